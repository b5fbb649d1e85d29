package broker

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/airlockhq/airlock/policy"
)

// Errors Inject returns besides a Source's (which wrap ErrUnavailable).
var (
	// ErrNotBound: the request's host is not one the credential is bound
	// to; nothing was injected (credential_host_mismatch).
	ErrNotBound = errors.New("the credential is not bound to this host")
	// ErrPlaintext: the request is plain HTTP and the credential does not
	// allow that; nothing was injected.
	ErrPlaintext = errors.New("the credential is only sent inside TLS (set allow_plaintext to change that)")
	// ErrUnknown: no credential has that name.
	ErrUnknown = errors.New("no such credential")
)

// MaxBodyScan is how many bytes of a request body FindPlaceholder
// examines; the rest of the body is passed on unexamined.
const MaxBodyScan = 1 << 20

// Broker holds the configured credentials. It is safe for concurrent use.
type Broker struct {
	creds map[string]*credential
	names []string // sorted
	key   []byte   // derives per-sandbox placeholders
}

type credential struct {
	name           string
	src            Source
	hosts          []policy.HostPattern
	header         string // canonical header key
	prefix, suffix string // the format around {token}
	placeholder    string // configured; "" = derived per sandbox
	allowPlaintext bool
	placeholderEnv string
}

// New builds a Broker for cfg's credentials. placeholderKey (at least 16
// bytes) derives the placeholders of credentials that configure none; it
// must be stable across restarts, or sandboxes lose their placeholders.
// client carries token-endpoint requests of the oauth2 and github_app
// minters; it must dial through Airlock's address checks (see
// proxy.GuardedClient), and may be nil when no credential mints.
func New(cfg *policy.Config, placeholderKey []byte, client *http.Client) (*Broker, error) {
	if len(placeholderKey) < 16 {
		return nil, errors.New("broker: placeholder key shorter than 16 bytes")
	}
	b := &Broker{creds: make(map[string]*credential), key: placeholderKey}
	for name, spec := range cfg.Credentials {
		src, err := newSource(name, spec.Source, client)
		if err != nil {
			return nil, err
		}
		prefix, suffix, _ := strings.Cut(spec.Inject.Format, "{token}")
		b.creds[name] = &credential{
			name:           name,
			src:            src,
			hosts:          spec.Hosts,
			header:         http.CanonicalHeaderKey(spec.Inject.Header),
			prefix:         prefix,
			suffix:         suffix,
			placeholder:    spec.Placeholder,
			allowPlaintext: spec.AllowPlaintext,
			placeholderEnv: placeholderEnv(name, spec),
		}
		b.names = append(b.names, name)
	}
	sort.Strings(b.names)
	return b, nil
}

// placeholderEnv is the environment variable `airlock env` sets to a
// credential's placeholder: the source's variable for env sources (the
// sandbox sees the name it expects), else NAME_TOKEN.
func placeholderEnv(name string, spec *policy.CredentialSpec) string {
	if spec.Source.Env != "" {
		return spec.Source.Env
	}
	return strings.ToUpper(strings.NewReplacer("-", "_").Replace(name)) + "_TOKEN"
}

// Names returns the credential names, sorted.
func (b *Broker) Names() []string { return b.names }

// Placeholder returns the value sandbox holds in place of credential
// name, and the environment variable `airlock env` puts it in. A
// configured placeholder is the same for every sandbox; otherwise it is
// derived from the placeholder key, the sandbox and the name, so it is
// stable and differs between sandboxes.
func (b *Broker) Placeholder(sandbox, name string) (value, env string, ok bool) {
	c, ok := b.creds[name]
	if !ok {
		return "", "", false
	}
	return b.placeholder(c, sandbox), c.placeholderEnv, true
}

func (b *Broker) placeholder(c *credential, sandbox string) string {
	if c.placeholder != "" {
		return c.placeholder
	}
	m := hmac.New(sha256.New, b.key)
	m.Write([]byte(sandbox))
	m.Write([]byte{0})
	m.Write([]byte(c.name))
	return "airlock-placeholder-" + hex.EncodeToString(m.Sum(nil)[:20])
}

// Injection records what Inject wrote, for scrubbing the response. Its
// values never appear in logs or errors.
type Injection struct {
	Credential string
	values     []Secret // the forms an upstream might reflect, longest first
}

// Inject writes credential name into r's configured slot, replacing every
// value the client sent in it (duplicates included). sandbox is who sends
// r; host is its canonical host (already decided); tls says whether it
// travels inside TLS. It fails, leaving r's slot empty, with ErrUnknown,
// ErrNotBound, ErrPlaintext or a Source error wrapping ErrUnavailable.
func (b *Broker) Inject(ctx context.Context, r *http.Request, sandbox, name string, host policy.Host, tls bool) (*Injection, error) {
	c, ok := b.creds[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	r.Header.Del(c.header)
	if !c.bound(host) {
		return nil, fmt.Errorf("credential %s, host %s: %w", name, host, ErrNotBound)
	}
	if !tls && !c.allowPlaintext {
		return nil, fmt.Errorf("credential %s: %w", name, ErrPlaintext)
	}
	v, err := c.src.Get(ctx, Request{Sandbox: sandbox, Host: host.String()})
	if err != nil {
		return nil, err
	}
	raw := v.Reveal()
	r.Header.Set(c.header, c.prefix+raw+c.suffix)
	return &Injection{Credential: name, values: reflections(raw)}, nil
}

func (c *credential) bound(h policy.Host) bool {
	for _, p := range c.hosts {
		if p.Matches(h) {
			return true
		}
	}
	return false
}

// reflections are the forms of a value an upstream might echo: as is,
// base64 (standard and URL alphabets, with and without padding) and
// percent-encoded, longest first.
func reflections(raw string) []Secret {
	forms := []string{
		raw,
		base64.StdEncoding.EncodeToString([]byte(raw)),
		base64.RawStdEncoding.EncodeToString([]byte(raw)),
		base64.URLEncoding.EncodeToString([]byte(raw)),
		base64.RawURLEncoding.EncodeToString([]byte(raw)),
		url.QueryEscape(raw),
		url.PathEscape(raw),
	}
	seen := make(map[string]bool, len(forms))
	out := forms[:0]
	for _, f := range forms {
		if f != "" && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	// Longest first, so a longer form is masked whole before a shorter
	// one inside it.
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	secrets := make([]Secret, len(out))
	for i, f := range out {
		secrets[i] = NewSecret(f)
	}
	return secrets
}

// Found is a placeholder seen where it must not be.
type Found struct {
	Credential string // whose placeholder
	Where      string // "header NAME", "url" or "body"
}

// FindPlaceholder looks for any of sandbox's placeholders in r: in every
// header, the URL and the first MaxBodyScan bytes of the body (which it
// puts back, so the body is unchanged for the upstream). A placeholder is
// fine in exactly one place: the slot of its own credential, when allowed
// names that credential (the rule that admitted r injects it there) and
// host is bound to it. Anywhere else it is reported: that is an
// exfiltration attempt.
func (b *Broker) FindPlaceholder(r *http.Request, sandbox, allowed string, host policy.Host) (Found, bool, error) {
	if len(b.creds) == 0 {
		return Found{}, false, nil
	}
	type ph struct {
		cred string
		val  []byte
		slot string // the header where it may stand, or ""
	}
	var phs []ph
	for _, name := range b.names {
		c := b.creds[name]
		slot := ""
		if name == allowed && c.bound(host) {
			slot = c.header
		}
		phs = append(phs, ph{name, []byte(b.placeholder(c, sandbox)), slot})
	}
	has := func(s string, p ph) bool { return strings.Contains(s, string(p.val)) }
	for _, p := range phs {
		for k, vs := range r.Header {
			for _, v := range vs {
				if has(v, p) && k != p.slot || has(k, p) {
					return Found{p.cred, "header " + k}, true, nil
				}
			}
		}
		if has(r.URL.String(), p) || has(r.Host, p) {
			return Found{p.cred, "url"}, true, nil
		}
	}
	if r.Body == nil || r.Body == http.NoBody {
		return Found{}, false, nil
	}
	head := make([]byte, MaxBodyScan)
	n, err := io.ReadFull(r.Body, head)
	head = head[:n]
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		r.Body = readCloser{bytes.NewReader(head), r.Body}
	case err != nil:
		return Found{}, false, fmt.Errorf("read request body: %w", err)
	default:
		r.Body = readCloser{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	}
	for _, p := range phs {
		if bytes.Contains(head, p.val) {
			return Found{p.cred, "body"}, true, nil
		}
	}
	return Found{}, false, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// KeyFile is the placeholder key's file name in a state directory.
const KeyFile = "placeholder.key"

// LoadKey returns the placeholder key kept in dir, creating it (32 random
// bytes, mode 0600; dir 0700) the first time. Keep it: a new key gives
// every sandbox new placeholders.
func LoadKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, KeyFile)
	if k, err := os.ReadFile(path); err == nil {
		if len(k) < 16 {
			return nil, fmt.Errorf("%s is shorter than 16 bytes; remove it to generate a new key (sandboxes then get new placeholders)", path)
		}
		return k, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return LoadKey(dir) // another process made it first
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(k); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return k, f.Close()
}

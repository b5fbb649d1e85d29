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
	"sync"
	"time"

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

// Broker holds the configured credentials. It is safe for concurrent use.
type Broker struct {
	creds map[string]*credential
	names []string // sorted
	key   []byte   // derives per-sandbox placeholders
	// derived caches placeholders by sandbox and credential (string
	// "sandbox\x00credential"): every request looks for them, and an HMAC
	// each time was 6% of the proxy's CPU on plain-HTTP requests. Sandbox
	// names come from the configuration, so it stays small.
	derived sync.Map
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

// OnMint makes f see every mint of a minted credential: its name, how
// long it took, and its error (nil: minted). Call it before the Broker is
// in use; f must be safe for concurrent use.
func (b *Broker) OnMint(f func(credential string, d time.Duration, err error)) {
	for _, c := range b.creds {
		if m, ok := c.src.(*cachedMinter); ok {
			m.observe = f
		}
	}
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
	key := sandbox + "\x00" + c.name
	if p, ok := b.derived.Load(key); ok {
		return p.(string)
	}
	m := hmac.New(sha256.New, b.key)
	m.Write([]byte(sandbox))
	m.Write([]byte{0})
	m.Write([]byte(c.name))
	p := "airlock-placeholder-" + hex.EncodeToString(m.Sum(nil)[:20])
	b.derived.Store(key, p)
	return p
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

// reflections are the forms of a value an upstream might echo: as is;
// hex in either case; JSON with escaped slashes; percent-encoded in
// either case; and base64 (standard and URL alphabets) at each of the
// three offsets the value can start at inside a longer encoded string
// (for offsets 1 and 2 only the characters that depend on the value
// alone, so "Authorization: Bearer TOKEN", base64-encoded, is caught).
// Longest first. Masking them is best effort: an upstream that echoes
// the value in pieces or another encoding is not caught.
func reflections(raw string) []Secret {
	forms := []string{
		raw,
		hex.EncodeToString([]byte(raw)),
		strings.ToUpper(hex.EncodeToString([]byte(raw))),
		strings.ReplaceAll(raw, "/", `\/`),
		url.QueryEscape(raw),
		url.PathEscape(raw),
		lowerEscapes(url.QueryEscape(raw)),
		lowerEscapes(url.PathEscape(raw)),
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		forms = append(forms, enc.EncodeToString([]byte(raw)), enc.WithPadding(base64.NoPadding).EncodeToString([]byte(raw)))
		for off := 1; off <= 2; off++ {
			// With off bytes before it, the value's bytes from index
			// 3-off on fill whole 3-byte groups: their characters are the
			// same whatever precedes.
			if rest := raw[3-off:]; len(rest) >= 3 {
				rest = rest[:len(rest)/3*3]
				forms = append(forms, enc.WithPadding(base64.NoPadding).EncodeToString([]byte(rest)))
			}
		}
	}
	seen := make(map[string]bool, len(forms))
	out := forms[:0]
	for _, f := range forms {
		// Very short forms would mask ordinary text; a value that short
		// is not a credential worth the name anyway.
		if len(f) >= 8 && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	secrets := make([]Secret, len(out))
	for i, f := range out {
		secrets[i] = NewSecret(f)
	}
	return secrets
}

// lowerEscapes lower-cases the hex digits of percent escapes ("%2F" ->
// "%2f"): both spellings mean the same.
func lowerEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerHex(b[i+1]), lowerHex(b[i+2])
		}
	}
	return string(b)
}

func lowerHex(c byte) byte {
	if 'A' <= c && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// Found is a placeholder seen where it must not be.
type Found struct {
	Credential string // whose placeholder
	Where      string // "header NAME", "url" or "body"
}

// FindPlaceholder looks for any of sandbox's placeholders in r: in the
// method, every header name and value, the URL (as sent and
// percent-decoded) and the body, ignoring case. A placeholder is fine in
// exactly one place: the slot of its own credential, when allowed names
// that credential (the rule that admitted r injects it there) and host is
// bound to it. Anywhere else it is reported: that is what an exfiltration
// attempt looks like. It is a tripwire, not a barrier: a placeholder
// encoded another way passes unseen (and is worthless anyway).
//
// Headers, URL and the first PrefetchBody bytes of the body are checked
// now. The rest of a longer body is checked as it streams to the
// upstream: r.Body is replaced by a reader that holds back the last few
// bytes and fails with a *PlaceholderError, before passing on a byte of
// the placeholder, if one appears; the upload then breaks off and no
// placeholder reaches the upstream. Nothing more is buffered.
func (b *Broker) FindPlaceholder(r *http.Request, sandbox, allowed string, host policy.Host) (Found, bool, error) {
	if len(b.creds) == 0 {
		return Found{}, false, nil
	}
	phs := b.placeholders(sandbox, allowed, host)
	target := strings.ToLower(r.URL.String() + " " + r.Host)
	if dec, err := url.PathUnescape(r.URL.EscapedPath()); err == nil {
		target += " " + strings.ToLower(dec)
	}
	if dec, err := url.QueryUnescape(r.URL.RawQuery); err == nil {
		target += " " + strings.ToLower(dec)
	}
	method := strings.ToLower(r.Method)
	for _, p := range phs {
		if strings.Contains(method, p.lower) {
			return Found{p.cred, "method"}, true, nil
		}
		for k, vs := range r.Header {
			if strings.Contains(strings.ToLower(k), p.lower) {
				return Found{p.cred, "a header name"}, true, nil
			}
			for _, v := range vs {
				if k != p.slot && strings.Contains(strings.ToLower(v), p.lower) {
					// The name may hold another credential's placeholder.
					return Found{p.cred, "header " + b.Redact(sandbox, k)}, true, nil
				}
			}
		}
		if strings.Contains(target, p.lower) {
			return Found{p.cred, "url"}, true, nil
		}
	}
	if r.Body == nil || r.Body == http.NoBody {
		return Found{}, false, nil
	}
	// Most bodies are small: read up to PrefetchBody bytes first, so that
	// a placeholder in them is caught before anything goes upstream.
	head := make([]byte, PrefetchBody)
	n, err := io.ReadFull(r.Body, head)
	head = head[:n]
	var rest io.Reader = r.Body
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		rest = eofReader{} // the whole body is in head
	case err != nil:
		return Found{}, false, fmt.Errorf("read request body: %w", err)
	}
	body := struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), rest), r.Body}
	lower := bytes.ToLower(head)
	for _, p := range phs {
		if bytes.Contains(lower, []byte(p.lower)) {
			r.Body = body
			return Found{p.cred, "body"}, true, nil
		}
	}
	// A longer body is scanned as it streams on.
	r.Body = newBodyScanner(body, phs)
	return Found{}, false, nil
}

// PrefetchBody is how much of a request body FindPlaceholder reads before
// the request is sent; the rest is scanned as it streams.
const PrefetchBody = 64 << 10

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// placeholder is one of a sandbox's placeholders, as FindPlaceholder
// looks for it.
type placeholder struct {
	cred  string
	lower string
	slot  string // the header where it may stand, or ""
}

func (b *Broker) placeholders(sandbox, allowed string, host policy.Host) []placeholder {
	phs := make([]placeholder, 0, len(b.names))
	for _, name := range b.names {
		c := b.creds[name]
		slot := ""
		if name == allowed && c.bound(host) {
			slot = c.header
		}
		phs = append(phs, placeholder{name, strings.ToLower(b.placeholder(c, sandbox)), slot})
	}
	return phs
}

// Redact replaces each of sandbox's placeholders in s (any case) with
// "[placeholder]", for log lines built from request data.
func (b *Broker) Redact(sandbox, s string) string {
	if b == nil || s == "" {
		return s
	}
	lower := strings.ToLower(s)
	for _, name := range b.names {
		ph := strings.ToLower(b.placeholder(b.creds[name], sandbox))
		for i := strings.Index(lower, ph); i >= 0; i = strings.Index(lower, ph) {
			s = s[:i] + "[placeholder]" + s[i+len(ph):]
			lower = lower[:i] + "[placeholder]" + lower[i+len(ph):]
		}
	}
	return s
}

// PlaceholderError is the error a scanned request body fails with when a
// placeholder appears in it.
type PlaceholderError struct{ Found Found }

func (e *PlaceholderError) Error() string {
	return "a placeholder of credential " + e.Found.Credential + " in the request body"
}

// newBodyScanner passes a request body on through a holdback window,
// failing with a *PlaceholderError, before any byte of it is handed on,
// when a placeholder (any case) appears.
func newBodyScanner(body io.ReadCloser, phs []placeholder) io.ReadCloser {
	keep := 0
	for _, p := range phs {
		keep = max(keep, len(p.lower)-1)
	}
	return &holdback{src: body, keep: keep, inspect: func(buf []byte, from int) error {
		window := bytes.ToLower(buf[from:])
		for _, ph := range phs {
			if bytes.Contains(window, []byte(ph.lower)) {
				return &PlaceholderError{Found{ph.cred, "body"}}
			}
		}
		return nil
	}}
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

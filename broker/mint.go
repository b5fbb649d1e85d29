package broker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
	"golang.org/x/sync/singleflight"

	"github.com/airlockhq/airlock/policy"
)

// minter makes a short-lived token for a request kind.
type minter interface {
	// key is what tokens are cached by: requests with equal keys share one.
	key(req Request) string
	// mint returns a new token and when it expires.
	mint(ctx context.Context, req Request) (Secret, time.Time, error)
}

func newMinter(name string, spec policy.SourceSpec, client *http.Client) (minter, error) {
	if client == nil {
		// Placeholders only (airlock env): a mint that needs a token
		// endpoint fails, and says why.
		client = &http.Client{Transport: noClient{}}
	}
	switch {
	case spec.JWT != nil:
		return &jwtMinter{name: name, spec: *spec.JWT, now: time.Now}, nil
	case spec.OAuth2 != nil:
		return &oauth2Minter{name: name, spec: *spec.OAuth2, client: client}, nil
	case spec.GitHubApp != nil:
		return &githubAppMinter{name: name, spec: *spec.GitHubApp, client: client, now: time.Now}, nil
	}
	return nil, fmt.Errorf("credential %s: no minter", name)
}

// noClient refuses every request: a broker built without an HTTP client
// cannot reach token endpoints.
type noClient struct{}

func (noClient) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("this broker has no HTTP client for token endpoints")
}

// mintTimeout bounds one mint, token-endpoint round trip included.
const mintTimeout = 15 * time.Second

// cachedMinter caches a minter's tokens per key and mints again before
// they expire: when less than a fifth of a token's life (at most 5
// minutes) is left. Concurrent requests for one key share one mint; a
// failed mint is not cached.
type cachedMinter struct {
	name    string
	observe func(credential string, d time.Duration, err error) // may be nil
	m       minter
	now     func() time.Time
	mints   singleflight.Group
	mu      sync.Mutex
	cache   map[string]cachedToken
}

type cachedToken struct {
	value   Secret
	renewAt time.Time
}

func newCachedMinter(name string, m minter) *cachedMinter {
	return &cachedMinter{name: name, m: m, now: time.Now, cache: make(map[string]cachedToken)}
}

func (c *cachedMinter) Get(ctx context.Context, req Request) (Secret, error) {
	k := c.m.key(req)
	c.mu.Lock()
	t, ok := c.cache[k]
	c.mu.Unlock()
	if ok && c.now().Before(t.renewAt) {
		return t.value, nil
	}
	v, err, _ := c.mints.Do(k, func() (any, error) {
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mintTimeout)
		defer cancel()
		start := c.now()
		t0 := time.Now()
		tok, exp, err := c.m.mint(mctx, req)
		if c.observe != nil {
			c.observe(c.name, time.Since(t0), err)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: credential %s: %v", ErrUnavailable, c.name, err)
		}
		life := exp.Sub(start)
		if life <= 0 {
			return nil, fmt.Errorf("%w: credential %s: the minted token is already expired", ErrUnavailable, c.name)
		}
		c.mu.Lock()
		c.cache[k] = cachedToken{value: tok, renewAt: exp.Add(-min(life/5, 5*time.Minute))}
		c.mu.Unlock()
		return tok, nil
	})
	if err != nil {
		return Secret{}, err
	}
	return v.(Secret), nil
}

// readValue reads a key or secret from its environment variable or file.
func readValue(v policy.ValueSpec) ([]byte, error) {
	if v.Env != "" {
		s := os.Getenv(v.Env)
		if strings.TrimSpace(s) == "" {
			return nil, fmt.Errorf("environment variable %s is empty or unset", v.Env)
		}
		return []byte(s), nil
	}
	b, err := os.ReadFile(v.File)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// jwtMinter signs a JWT per (sandbox, host): RFC 7519 claims iss, sub
// (the sandbox), aud (the host), iat, nbf, exp and a random jti, plus
// "scope" when configured.
type jwtMinter struct {
	name string
	spec policy.JWTSpec
	now  func() time.Time
}

func (m *jwtMinter) key(req Request) string { return req.Sandbox + "\x00" + req.Host }

func (m *jwtMinter) mint(_ context.Context, req Request) (Secret, time.Time, error) {
	raw, err := readValue(m.spec.Key)
	if err != nil {
		return Secret{}, time.Time{}, fmt.Errorf("signing key: %w", err)
	}
	if m.spec.Algorithm != "HS256" {
		if err := isPrivateKeyPEM(raw); err != nil {
			return Secret{}, time.Time{}, fmt.Errorf("signing key: %w", err)
		}
	}
	var method jwt.SigningMethod
	var key any
	switch m.spec.Algorithm {
	case "ES256":
		method = jwt.SigningMethodES256
		key, err = jwt.ParseECPrivateKeyFromPEM(raw)
	case "RS256":
		method = jwt.SigningMethodRS256
		key, err = jwt.ParseRSAPrivateKeyFromPEM(raw)
	case "EdDSA":
		method = jwt.SigningMethodEdDSA
		key, err = jwt.ParseEdPrivateKeyFromPEM(raw)
	case "HS256":
		method = jwt.SigningMethodHS256
		key = bytes.TrimSpace(raw)
	default:
		err = fmt.Errorf("unsupported algorithm %q", m.spec.Algorithm)
	}
	if err != nil {
		// The parse error names the key type, never its bytes.
		return Secret{}, time.Time{}, fmt.Errorf("signing key for %s: %w", m.spec.Algorithm, err)
	}
	now := m.now()
	exp := now.Add(m.spec.TTL)
	claims := jwt.MapClaims{
		"iss": m.spec.Issuer,
		"sub": req.Sandbox,
		"aud": req.Host,
		"iat": now.Unix(),
		"nbf": now.Add(-30 * time.Second).Unix(),
		"exp": exp.Unix(),
		"jti": randomID(),
	}
	if m.spec.Scope != "" {
		claims["scope"] = m.spec.Scope
	}
	signed, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		return Secret{}, time.Time{}, fmt.Errorf("sign: %w", err)
	}
	return NewSecret(signed), exp, nil
}

// isPrivateKeyPEM says what is wrong when raw is not a PEM private key,
// naming what it is instead (never its bytes).
func isPrivateKeyPEM(raw []byte) error {
	block, _ := pem.Decode(raw)
	switch {
	case block == nil:
		return errors.New("expected a PEM private key; found no PEM block")
	case !strings.HasSuffix(block.Type, "PRIVATE KEY"):
		return fmt.Errorf("expected a PEM private key, found a %s", block.Type)
	}
	return nil
}

func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// oauth2Minter fetches tokens with the client-credentials grant (RFC 6749
// §4.4) through golang.org/x/oauth2/clientcredentials, one per sandbox.
type oauth2Minter struct {
	name   string
	spec   policy.OAuth2Spec
	client *http.Client
}

func (m *oauth2Minter) key(req Request) string { return req.Sandbox }

// defaultOAuth2Life is assumed for a token whose response has no
// expires_in.
const defaultOAuth2Life = 5 * time.Minute

func (m *oauth2Minter) mint(ctx context.Context, _ Request) (Secret, time.Time, error) {
	secret, err := readValue(m.spec.ClientSecret)
	if err != nil {
		return Secret{}, time.Time{}, fmt.Errorf("client secret: %w", err)
	}
	cc := clientcredentials.Config{
		ClientID:     m.spec.ClientID,
		ClientSecret: strings.TrimSpace(string(secret)),
		TokenURL:     m.spec.TokenURL,
		Scopes:       m.spec.Scopes,
	}
	tok, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, m.client))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			// Not the body: a token endpoint may echo what it was sent.
			return Secret{}, time.Time{}, fmt.Errorf("token endpoint %s: HTTP %d %s", m.spec.TokenURL, re.Response.StatusCode, re.ErrorCode)
		}
		return Secret{}, time.Time{}, fmt.Errorf("token endpoint %s: %w", m.spec.TokenURL, scrubURLError(err))
	}
	if tok.AccessToken == "" {
		return Secret{}, time.Time{}, errors.New("the token endpoint returned no access_token")
	}
	exp := tok.Expiry
	if exp.IsZero() {
		exp = time.Now().Add(defaultOAuth2Life)
	}
	return NewSecret(tok.AccessToken), exp, nil
}

// githubAppMinter mints GitHub App installation tokens: an app JWT (RS256,
// iss = app ID, at most 10 minutes), then POST
// /app/installations/{id}/access_tokens, narrowed to the configured
// repositories and permissions (GitHub REST API: "Create an installation
// access token for an app"). One token per sandbox; nothing is assumed of
// the token's length or format.
type githubAppMinter struct {
	name   string
	spec   policy.GitHubAppSpec
	client *http.Client
	now    func() time.Time
}

func (m *githubAppMinter) key(req Request) string { return req.Sandbox }

func (m *githubAppMinter) mint(ctx context.Context, _ Request) (Secret, time.Time, error) {
	raw, err := readValue(m.spec.PrivateKey)
	if err != nil {
		return Secret{}, time.Time{}, fmt.Errorf("app private key: %w", err)
	}
	if err := isPrivateKeyPEM(raw); err != nil {
		return Secret{}, time.Time{}, fmt.Errorf("app private key: %w", err)
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM(raw)
	if err != nil {
		return Secret{}, time.Time{}, fmt.Errorf("app private key: %w", err)
	}
	now := m.now()
	appJWT, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iat": now.Add(-60 * time.Second).Unix(), // GitHub's advice, for clock drift
		"exp": now.Add(9 * time.Minute).Unix(),   // GitHub allows at most 10 minutes
		"iss": m.spec.AppID,
	}).SignedString(key)
	if err != nil {
		return Secret{}, time.Time{}, fmt.Errorf("sign the app JWT: %w", err)
	}
	body := map[string]any{}
	if len(m.spec.Repositories) > 0 {
		body["repositories"] = m.spec.Repositories
	}
	if len(m.spec.Permissions) > 0 {
		body["permissions"] = m.spec.Permissions
	}
	payload, _ := json.Marshal(body)
	endpoint := strings.TrimSuffix(m.spec.APIURL, "/") + "/app/installations/" + url.PathEscape(fmt.Sprint(m.spec.InstallationID)) + "/access_tokens"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(payload))
	if err != nil {
		return Secret{}, time.Time{}, err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Authorization", "Bearer "+appJWT)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := m.client.Do(req)
	if err != nil {
		return Secret{}, time.Time{}, fmt.Errorf("POST %s: %w", endpoint, scrubURLError(err))
	}
	defer resp.Body.Close()
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
		Message   string    `json:"message"`
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, 1<<20))
	decErr := dec.Decode(&out)
	if resp.StatusCode != http.StatusCreated {
		msg := out.Message
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return Secret{}, time.Time{}, fmt.Errorf("POST %s: HTTP %d: %s", endpoint, resp.StatusCode, msg)
	}
	if decErr != nil || out.Token == "" || out.ExpiresAt.IsZero() {
		return Secret{}, time.Time{}, fmt.Errorf("POST %s: no token and expires_at in the response", endpoint)
	}
	return NewSecret(out.Token), out.ExpiresAt, nil
}

// scrubURLError drops the URL a *url.Error carries (it may hold a query),
// keeping the cause.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

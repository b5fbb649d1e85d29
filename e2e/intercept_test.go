package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

// interceptSetup starts an HTTPS upstream for allowed.test (trusted by
// Airlock through tls.upstream_ca) and Airlock with path and method rules
// for it, so its tunnels are intercepted. It returns the proxy, the
// upstream and a pool trusting Airlock's generated CA (read back with
// `airlock ca export`).
// interceptSetup starts Airlock intercepting allowed.test (extra is added
// to its configuration) and returns it with the upstream, a pool trusting
// Airlock's CA and that CA's file.
func interceptSetup(t *testing.T, extra ...string) (*testutil.Proxy, *testutil.Upstream, *x509.CertPool, string) {
	t.Helper()
	upCA := testutil.NewCA(t)
	up := testutil.NewTLSUpstream(t, upCA, "allowed.test")
	dir := t.TempDir()
	cfg := fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {allowed.test: 127.0.0.1, other.allowed.test: 127.0.0.1}
tls:
  upstream_ca: %s
policies:
  default:
    allow:
      - host: allowed.test
        ports: [%[2]d]
        methods: [GET, POST]
        paths: ["/public/**", "/headers", "/acme/*/info/refs", "/acme/*/git-upload-pack", "/acme/*/git-receive-pack"]
      - host: other.allowed.test
        ports: [%[2]d]
    deny:
      - host: allowed.test
        paths: ["/**/git-receive-pack"]
`, upCA.WritePEM(t, dir), up.Port()) + strings.Join(extra, "")
	p := testutil.StartProxy(t, cfg)
	caPEM, err := execOutputOnly(testutil.Binary(t), "ca", "export", "--dir", p.StateDir)
	if err != nil {
		t.Fatalf("airlock ca export: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatalf("ca export printed no certificate: %q", caPEM)
	}
	caFile := filepath.Join(dir, "airlock-ca.pem")
	os.WriteFile(caFile, []byte(caPEM), 0o644)
	return p, up, pool, caFile
}

// execOutputOnly runs a command and returns its standard output.
func execOutputOnly(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).Output()
	return string(out), err
}

func TestInterceptedHostIsDecidedPerRequest(t *testing.T) {
	p, up, pool, caFile := interceptSetup(t)
	base := fmt.Sprintf("https://allowed.test:%d", up.Port())

	t.Run("curl", func(t *testing.T) {
		code, body := curl(t, p.URL(), "--cacert", caFile, base+"/public/readme")
		if code != 200 || body != "hello from upstream\n" {
			t.Fatalf("allowed path: %d %q", code, body)
		}
		code, body = curl(t, p.URL(), "--cacert", caFile, base+"/private/key")
		if code != 403 || !strings.Contains(body, "path_not_allowed") {
			t.Fatalf("path outside the rule: %d %q", code, body)
		}
		code, _ = curl(t, p.URL(), "--cacert", caFile, "-X", "DELETE", base+"/public/readme")
		if code != 403 {
			t.Fatalf("DELETE: %d", code)
		}
	})
	t.Run("git push is denied, fetch allowed", func(t *testing.T) {
		c := httpClient(p.URL(), pool)
		resp, _ := get(t, c, base+"/acme/repo.git/info/refs?service=git-upload-pack")
		if resp.StatusCode != 200 {
			t.Fatalf("fetch discovery: %d", resp.StatusCode)
		}
		resp, err := c.Post(base+"/acme/repo.git/git-receive-pack", "application/x-git-receive-pack-request", strings.NewReader("0000"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") != "denied_by_rule" {
			t.Fatalf("push: %d %q", resp.StatusCode, resp.Header.Get("X-Airlock-Decision"))
		}
	})
	t.Run("the upstream sees the canonical authority", func(t *testing.T) {
		resp, body := get(t, httpClient(p.URL(), pool), fmt.Sprintf("https://ALLOWED.test.:%d/headers", up.Port()))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		var seen struct{ Host string }
		json.Unmarshal([]byte(body), &seen)
		if want := fmt.Sprintf("allowed.test:%d", up.Port()); seen.Host != want {
			t.Errorf("upstream saw Host %q, want %q", seen.Host, want)
		}
	})
	for _, r := range up.Requests() {
		if strings.Contains(r.Path, "private") || strings.Contains(r.Path, "receive-pack") || r.Method == "DELETE" {
			t.Errorf("a refused request reached the upstream: %s %s", r.Method, r.Path)
		}
	}
	// Each inner request has its line, and each tunnel one more.
	time.Sleep(200 * time.Millisecond)
	var inner, tunnels int
	for _, ev := range p.Audit(t) {
		if ev["intercepted"] != true {
			t.Errorf("line not marked intercepted: %v", ev)
		}
		switch ev["event"] {
		case "http.request":
			inner++
			if ev["url.scheme"] != "https" || ev["server.address"] != "allowed.test" {
				t.Errorf("inner line: %v", ev)
			}
		case "tunnel":
			tunnels++
		}
	}
	if inner != 6 {
		t.Errorf("want 6 inner request lines, got %d:\n%s", inner, strings.Join(p.AuditLines(), "\n"))
	}
}

// openInterceptedTunnel CONNECTs to target and starts TLS with sni.
func openInterceptedTunnel(t *testing.T, p *testutil.Proxy, target, sni string, pool *x509.CertPool) (*tls.Conn, error) {
	t.Helper()
	status, c, br := connectRaw(t, p.Addr, target)
	if status != "200" {
		t.Fatalf("CONNECT %s: %s", target, status)
	}
	t.Cleanup(func() { c.Close() })
	if br.Buffered() > 0 {
		t.Fatal("bytes after the CONNECT response")
	}
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: pool, InsecureSkipVerify: sni == "evil.test"})
	return tc, tc.Handshake()
}

func TestInterceptedTunnelHoldsOneAuthority(t *testing.T) {
	p, up, pool, _ := interceptSetup(t)
	target := fmt.Sprintf("allowed.test:%d", up.Port())

	t.Run("SNI naming another host", func(t *testing.T) {
		if _, err := openInterceptedTunnel(t, p, target, "evil.test", pool); err == nil {
			t.Fatal("TLS handshake succeeded with SNI evil.test in a tunnel to allowed.test")
		}
	})
	send := func(t *testing.T, raw string) *http.Response {
		tc, err := openInterceptedTunnel(t, p, target, "allowed.test", pool)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(tc, raw)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	t.Run("Host naming another host", func(t *testing.T) {
		resp := send(t, "GET /public/x HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n")
		if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") != "authority_mismatch" {
			t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("X-Airlock-Decision"))
		}
	})
	t.Run("absolute URI to another host", func(t *testing.T) {
		resp := send(t, fmt.Sprintf("GET https://other.allowed.test:%d/public/x HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", up.Port(), up.Port()))
		if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") != "authority_mismatch" {
			t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("X-Airlock-Decision"))
		}
	})
	t.Run("second request on a keep-alive connection to another host", func(t *testing.T) {
		tc, err := openInterceptedTunnel(t, p, target, "allowed.test", pool)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(tc)
		fmt.Fprintf(tc, "GET /public/a HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", up.Port())
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("first request: %v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		fmt.Fprintf(tc, "GET /public/b HTTP/1.1\r\nHost: other.allowed.test:%d\r\n\r\n", up.Port())
		resp, err = http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 403 {
			t.Fatalf("second request: %v %v", resp, err)
		}
	})
	for _, r := range up.Requests() {
		if r.Path != "/public/a" {
			t.Errorf("upstream received %s %s", r.Method, r.Path)
		}
	}
	// The refused handshake is on record.
	found := false
	for _, ev := range p.WaitAudit(t, 1) {
		found = found || (ev["event"] == "tunnel" && ev["reason"] == "authority_mismatch")
	}
	if !found {
		time.Sleep(300 * time.Millisecond)
		for _, ev := range p.Audit(t) {
			found = found || (ev["event"] == "tunnel" && ev["reason"] == "authority_mismatch")
		}
	}
	if !found {
		t.Errorf("no tunnel line with reason authority_mismatch:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
}

func TestCAExportWithoutInterceptionStillWorks(t *testing.T) {
	dir := t.TempDir()
	out, err := execOutput(testutil.Binary(t), "ca", "init", "--dir", dir)
	if err != nil || !strings.Contains(out, "created a new CA") {
		t.Fatalf("ca init: %v\n%s", err, out)
	}
	out, err = execOutput(testutil.Binary(t), "ca", "init", "--dir", dir)
	if err != nil || !strings.Contains(out, "kept the existing CA") {
		t.Fatalf("second ca init: %v\n%s", err, out)
	}
	pemOut, err := execOutputOnly(testutil.Binary(t), "ca", "export", "--dir", dir)
	if err != nil || !strings.HasPrefix(pemOut, "-----BEGIN CERTIFICATE-----") || strings.Contains(pemOut, "PRIVATE") {
		t.Fatalf("ca export: %v\n%s", err, pemOut)
	}
}

func TestTunnelsAreClosedAtTheirMaximumLifetime(t *testing.T) {
	p, up, pool, _ := interceptSetup(t, "limits: {max_tunnel_lifetime: 1s}\n")
	intercepted, err := openInterceptedTunnel(t, p, fmt.Sprintf("allowed.test:%d", up.Port()), "allowed.test", pool)
	if err != nil {
		t.Fatal(err)
	}
	status, c, _ := connectRaw(t, p.Addr, fmt.Sprintf("other.allowed.test:%d", up.Port()))
	if status != "200" {
		t.Fatal(status)
	}
	t.Cleanup(func() { c.Close() })
	opaque := tls.Client(c, &tls.Config{ServerName: "other.allowed.test", InsecureSkipVerify: true})
	if err := opaque.Handshake(); err != nil {
		t.Fatal(err)
	}
	// Both are idle far below idle_timeout (5m); the lifetime ends them.
	for name, tc := range map[string]*tls.Conn{"intercepted": intercepted, "opaque": opaque} {
		tc.SetReadDeadline(time.Now().Add(15 * time.Second))
		if _, err := tc.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s tunnel: read %v; want it closed by max_tunnel_lifetime", name, err)
		}
	}
	// The cap is per tunnel: a new one opens at once.
	if again, err := openInterceptedTunnel(t, p, fmt.Sprintf("allowed.test:%d", up.Port()), "allowed.test", pool); err != nil {
		t.Errorf("a new tunnel after the old ones reached their lifetime: %v", err)
	} else {
		again.Close()
	}
	p.StopAndFlush(t)
	var closed int
	for _, ev := range p.Audit(t) {
		if ev["event"] == "tunnel" && ev["close_reason"] == "max_lifetime" && ev["limit"] == "max_tunnel_lifetime" {
			closed++
		}
	}
	if closed != 2 {
		t.Errorf("want 2 tunnel lines with close_reason max_lifetime, got %d:\n%s", closed, strings.Join(p.AuditLines(), "\n"))
	}
}

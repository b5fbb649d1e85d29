package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

// Tests for what an attack on the limits found (each names the finding).

// innerGet sends one request inside an intercepted tunnel and reads the
// response.
func innerGet(t *testing.T, tc *tls.Conn, br *bufio.Reader, req string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(tc, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", strings.SplitN(req, "\r\n", 2)[0], err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// endlessHeader writes one header line without end; it reports whether
// Airlock closed the tunnel before 8 MiB.
func endlessHeader(t *testing.T, tc *tls.Conn, host string) bool {
	t.Helper()
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: %s\r\nX-Endless: ", host)
	chunk := bytes.Repeat([]byte("e"), 16<<10)
	for sent := 0; sent < 8<<20; sent += len(chunk) {
		if _, err := tc.Write(chunk); err != nil {
			return !isTimeout(err)
		}
	}
	return false
}

// F1: an encoded response to a credentialed request (refused with 502)
// has its audit line, and the header cap stays armed after it.
func TestUnmaskableResponseIsAuditedAndKeepsTheHeaderCap(t *testing.T) {
	p, up, pool, _ := credentialSetup(t, "")
	host := fmt.Sprintf("api.allowed.test:%d", up.Port())
	tc, err := openInterceptedTunnel(t, p, host, "api.allowed.test", pool)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(tc)
	if resp := innerGet(t, tc, br, fmt.Sprintf("GET /gzip-headers HTTP/1.1\r\nHost: %s\r\n\r\n", host)); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("gzip echo of a credentialed request: %d, want 502", resp.StatusCode)
	}
	if !endlessHeader(t, tc, host) {
		t.Fatal("after a 502 for an encoded response, Airlock read 8 MiB of one header line")
	}
	p.StopAndFlush(t)
	evs := p.Audit(t)
	if n := len(events(evs, map[string]any{"url.path": "/gzip-headers", "http.response.status_code": 502, "error.type": "unmaskable_encoding"})); n != 1 {
		t.Errorf("want the 502's audit line:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
	if n := len(events(evs, map[string]any{"event": "tunnel", "close_reason": "quota_exceeded", "limit": "max_header_bytes"})); n != 1 {
		t.Errorf("want the tunnel closed for max_header_bytes:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
}

// F9: a large body that Airlock refused (or the upstream did not read)
// is body, not the next request's header: the tunnel carries on.
// F8: requests inside an intercepted tunnel are rate limited like any.
func TestInterceptedTunnelsDrainRefusedBodiesAndAreRateLimited(t *testing.T) {
	t.Parallel()
	p, up, pool, _ := interceptSetup(t, "limits: {requests_per_second: 0.001, burst: 3}\n")
	host := fmt.Sprintf("allowed.test:%d", up.Port())
	tc, err := openInterceptedTunnel(t, p, host, "allowed.test", pool) // the CONNECT takes one token
	if err != nil {
		t.Fatal(err)
	}
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(tc)
	big := strings.Repeat("b", 300<<10)
	if resp := innerGet(t, tc, br, fmt.Sprintf("POST /denied HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", host, len(big), big)); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST to a path the policy refuses: %d, want 403", resp.StatusCode)
	}
	if resp := innerGet(t, tc, br, fmt.Sprintf("GET /headers HTTP/1.1\r\nHost: %s\r\n\r\n", host)); resp.StatusCode != 200 {
		t.Fatalf("the next request in the tunnel: %d, want 200 (the refused body must not count as a header)", resp.StatusCode)
	}
	resp := innerGet(t, tc, br, fmt.Sprintf("GET /headers HTTP/1.1\r\nHost: %s\r\n\r\n", host))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the fourth request of a burst of 3: %d, want 429 with Retry-After", resp.StatusCode)
	}
	p.StopAndFlush(t)
	evs := p.Audit(t)
	if n := len(events(evs, map[string]any{"limit": "max_header_bytes"})); n != 0 {
		t.Errorf("a body was taken for a header:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
	if n := len(events(evs, map[string]any{"intercepted": true, "reason": "quota_exceeded", "limit": "requests_per_second"})); n != 1 {
		t.Errorf("want the 429 inside the tunnel on record:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
}

// F2: a client that stops sending its upload is answered 408 after
// idle_timeout, and its connection slot is free again.
func TestStalledUploadTimesOutAndFreesItsSlot(t *testing.T) {
	t.Parallel()
	up := testutil.NewUpstream(t)
	p := testutil.StartProxy(t, localConfig(up.Port())+"limits: {idle_timeout: 1s, max_connections: 1}\n")
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "POST http://allowed.test:%d/echo HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 100\r\n\r\nabc", up.Port())
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled upload: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("stalled upload: %d, want 408", resp.StatusCode)
	}
	if code, _ := curl(t, p.URL(), fmt.Sprintf("http://allowed.test:%d/", up.Port())); code != 200 {
		t.Errorf("a request after the stalled one: %d, want 200 (its max_connections slot given back)", code)
	}
	p.StopAndFlush(t)
	if n := len(events(p.Audit(t), map[string]any{"url.path": "/echo", "close_reason": "idle_timeout", "limit": "idle_timeout"})); n != 1 {
		t.Errorf("want the stalled upload on record as idle_timeout:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
}

// F4, F5: a reload judges open tunnels for the sandbox that opened them
// (by session token), closes those whose token it revokes, and applies
// the sandbox's new limits to the ones it keeps.
func TestReloadJudgesOpenTunnelsByTheirSessionToken(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	up := testutil.NewTLSUpstream(t, ca, "allowed.test")
	conf := func(agentAllows bool, revoked, limits string) string {
		agentRule := "{}"
		if agentAllows {
			agentRule = fmt.Sprintf("{allow: [{host: allowed.test, ports: [%d]}]}", up.Port())
		}
		return fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {allowed.test: 127.0.0.1}
auth: {required: true, revoked: [%s]}
policies:
  default: {allow: [{host: allowed.test, ports: [%d]}]}
  agent: %s
sandboxes:
  - name: agent
    limits: {%s}
`, revoked, up.Port(), agentRule, limits)
	}
	p := testutil.StartProxy(t, conf(true, "", ""))
	token1, _ := issueToken(t, p.ConfigPath, p.StateDir, "agent", "1h")
	token2, jti2 := issueToken(t, p.ConfigPath, p.StateDir, "agent", "1h")
	token3, _ := issueToken(t, p.ConfigPath, p.StateDir, "agent", "1h")
	open := func(token string) *tls.Conn {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second))
		target := fmt.Sprintf("allowed.test:%d", up.Port())
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Bearer %s\r\n\r\n", target, target, token)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT as agent: %v %v", resp, err)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: ca.Pool()})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		return tc
	}
	closedSoon := func(tc *tls.Conn) bool {
		tc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := tc.Read(make([]byte, 1))
		return err != nil && !isTimeout(err)
	}
	reload := func(content string) {
		t.Helper()
		writeAtomically(t, p.ConfigPath, content)
		p.Signal(syscall.SIGHUP)
		time.Sleep(500 * time.Millisecond)
	}

	// The token's sandbox loses the host, the address's (default) keeps
	// it: the tunnel must close.
	t1 := open(token1)
	reload(conf(false, "", ""))
	if !closedSoon(t1) {
		t.Error("a tunnel whose token's sandbox no longer allows its host stayed open")
	}
	// A revoked token's tunnel closes.
	reload(conf(true, "", ""))
	t2 := open(token2)
	reload(conf(true, fmt.Sprintf("%q", jti2), ""))
	if !closedSoon(t2) {
		t.Error("a tunnel whose token was revoked stayed open")
	}
	// New limits reach a tunnel that stays open.
	t3 := open(token3)
	reload(conf(true, fmt.Sprintf("%q", jti2), "max_tunnel_lifetime: 1s"))
	if !closedSoon(t3) {
		t.Error("an open tunnel outlived the max_tunnel_lifetime a reload gave its sandbox")
	}
	p.StopAndFlush(t)
	evs := p.Audit(t)
	if n := len(events(evs, map[string]any{"event": "tunnel", "sandbox": "agent", "close_reason": "policy_reload"})); n != 2 {
		t.Errorf("want 2 tunnels closed by reloads:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
	if n := len(events(evs, map[string]any{"event": "tunnel", "sandbox": "agent", "close_reason": "max_lifetime"})); n != 1 {
		t.Errorf("want 1 tunnel closed at its new lifetime:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
	for _, l := range append(p.AuditLines(), p.Stderr()) {
		for _, tok := range []string{token1, token2, token3} {
			if strings.Contains(l, tok) {
				t.Fatal("a session token in the logs")
			}
		}
	}
	_ = os.Stderr
}

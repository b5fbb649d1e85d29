package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

// events returns the audit events with every field in want.
func events(evs []map[string]any, want map[string]any) []map[string]any {
	var found []map[string]any
next:
	for _, e := range evs {
		for k, v := range want {
			if fmt.Sprint(e[k]) != fmt.Sprint(v) {
				continue next
			}
		}
		found = append(found, e)
	}
	return found
}

// A sandbox over its byte quota has its transfer cut off, then gets 429
// with Retry-After for requests and CONNECTs until the window ends, and
// then works again. Tunnels that cross the quota are closed. Each is on
// record and counted in metrics.
func TestByteQuotasCutOffRefuseAndRecover(t *testing.T) {
	t.Parallel()
	up := testutil.NewUpstream(t)
	ca := testutil.NewCA(t)
	tlsUp := testutil.NewTLSUpstream(t, ca, "allowed.test")
	admin := freePort(t)
	p := testutil.StartProxy(t, fmt.Sprintf("listen: {admin: 127.0.0.1:%d}\n", admin)+localConfig(up.Port(), tlsUp.Port())+
		"limits: {max_bytes_received: 100KiB, max_bytes_sent: 64KiB, bytes_window: 4s}\n")
	c := httpClient(p.URL(), ca.Pool())
	big := fmt.Sprintf("http://allowed.test:%d/bytes?n=60000", up.Port())

	if resp, body := get(t, c, big); resp.StatusCode != 200 || len(body) != 60000 {
		t.Fatalf("first 60000 bytes: %d, %d bytes", resp.StatusCode, len(body))
	}
	// The second crosses 100 KiB: the client must see a broken transfer,
	// not a short one that looks complete.
	resp, err := c.Get(big)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil || n >= 60000 {
		t.Fatalf("the transfer crossing max_bytes_received: read %d bytes, err %v; want it cut off", n, err)
	}
	// What was left of the quota, less the response headers, which count too.
	if left := int64(100<<10 - 60000); n > left || n < left-1024 {
		t.Errorf("cut off after %d bytes; want the %d left in the quota, less the two response headers", n, left)
	}
	resp, body := get(t, c, fmt.Sprintf("http://allowed.test:%d/", up.Port()))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Airlock-Decision") != "quota_exceeded" ||
		!strings.Contains(body, "limits.max_bytes_received") {
		t.Fatalf("over the quota: %d %q; want 429 quota_exceeded naming limits.max_bytes_received", resp.StatusCode, body)
	}
	wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || wait < 1 || wait > 4 {
		t.Fatalf("Retry-After %q; want the seconds left in the 4s window", resp.Header.Get("Retry-After"))
	}
	if status, _, _ := connectRaw(t, p.Addr, fmt.Sprintf("allowed.test:%d", tlsUp.Port())); !strings.HasPrefix(status, "429") {
		t.Errorf("CONNECT over the quota: %s; want 429", status)
	}

	time.Sleep(time.Duration(wait)*time.Second + 200*time.Millisecond)
	if resp, body := get(t, c, fmt.Sprintf("http://allowed.test:%d/", up.Port())); resp.StatusCode != 200 {
		t.Fatalf("after Retry-After: %d %q; want 200", resp.StatusCode, body)
	}

	// In a fresh window, an upload through an opaque tunnel crosses
	// max_bytes_sent: the tunnel is closed.
	// (The echo may answer before the upload ends: read it all.)
	echoed := int64(0)
	resp, err = c.Post(fmt.Sprintf("https://allowed.test:%d/echo", tlsUp.Port()), "application/octet-stream",
		bytes.NewReader(make([]byte, 80<<10)))
	if err == nil {
		echoed, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err == nil || echoed >= 80<<10 {
		t.Errorf("an 80 KiB upload through a tunnel went through a 64 KiB max_bytes_sent:\n%s", strings.Join(p.AuditLines(), "\n"))
	}

	p.StopAndFlush(t)
	evs := p.Audit(t)
	if len(events(evs, map[string]any{"event": "http.request", "decision": "allow", "close_reason": "quota_exceeded", "limit": "max_bytes_received"})) != 1 {
		t.Errorf("want one allowed request cut off for max_bytes_received:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
	if len(events(evs, map[string]any{"decision": "deny", "reason": "quota_exceeded", "http.response.status_code": 429, "limit": "max_bytes_received"})) != 2 {
		t.Errorf("want a refused request and a refused CONNECT for max_bytes_received:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
	if len(events(evs, map[string]any{"event": "tunnel", "close_reason": "quota_exceeded", "limit": "max_bytes_sent"})) != 1 {
		t.Errorf("want one tunnel closed for max_bytes_sent:\n%s", strings.Join(p.AuditLines(), "\n"))
	}
}

// The metrics count each limit hit, by limit.
func TestQuotaCountersAreInMetrics(t *testing.T) {
	t.Parallel()
	up := testutil.NewUpstream(t)
	admin := freePort(t)
	p := testutil.StartProxy(t, fmt.Sprintf("listen: {admin: 127.0.0.1:%d}\n", admin)+localConfig(up.Port())+
		"limits: {requests_per_second: 0.001, burst: 1, max_request_body: 10}\n")
	c := httpClient(p.URL(), nil)
	target := fmt.Sprintf("http://allowed.test:%d/echo", up.Port())
	if resp, err := c.Post(target, "text/plain", strings.NewReader("far more than ten bytes")); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over max_request_body: %v %v; want 413", resp, err)
	}
	for range 2 {
		if resp, _ := get(t, c, target); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("over the rate: %d; want 429", resp.StatusCode)
		}
	}
	p.WaitAudit(t, 3)
	count := scrape(t, admin)
	for limit, want := range map[string]float64{"max_request_body": 1, "requests_per_second": 2} {
		if n := count("airlock_quota_exceeded_total", map[string]string{"limit": limit, "sandbox": "default"}); n != want {
			t.Errorf("airlock_quota_exceeded_total{limit=%q} = %v, want %v", limit, n, want)
		}
	}
}

// max_request_body and max_header_bytes on plain HTTP: 413 and 431 with
// reason quota_exceeded, nothing sent upstream, and a request within the
// limits goes through on the same connection settings right after.
func TestBodyAndHeaderCapsOnPlainHTTP(t *testing.T) {
	t.Parallel()
	up := testutil.NewUpstream(t)
	p := testutil.StartProxy(t, localConfig(up.Port())+`
limits: {max_request_body: 1KiB, max_header_bytes: 16KiB}
sandboxes:
  - name: local
    policy: default
    clients: [127.0.0.0/8]
    limits: {max_header_bytes: 4KiB}
`)
	c := httpClient(p.URL(), nil)
	target := fmt.Sprintf("http://allowed.test:%d/echo", up.Port())
	post := func(body io.Reader) (*http.Response, string) {
		t.Helper()
		resp, err := c.Post(target, "application/octet-stream", body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := post(bytes.NewReader(make([]byte, 2000))); resp.StatusCode != http.StatusRequestEntityTooLarge ||
		resp.Header.Get("X-Airlock-Decision") != "quota_exceeded" || !strings.Contains(body, "limits.max_request_body") {
		t.Errorf("2000-byte body with Content-Length: %d %q; want 413 naming limits.max_request_body", resp.StatusCode, body)
	}
	// Without Content-Length (chunked), the body is cut off at the cap.
	if resp, body := post(io.MultiReader(bytes.NewReader(make([]byte, 2000)))); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("2000-byte chunked body: %d %q; want 413", resp.StatusCode, body)
	}
	if resp, body := post(strings.NewReader(strings.Repeat("a", 1024))); resp.StatusCode != 200 || len(body) != 1024 {
		t.Errorf("a body of exactly 1 KiB: %d, %d bytes back; want 200 and the body", resp.StatusCode, len(body))
	}

	withHeader := func(size int) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://allowed.test:%d/", up.Port()), nil)
		req.Header.Set("X-Big", strings.Repeat("b", size))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := withHeader(8 << 10); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("8 KiB header over the sandbox's 4 KiB: %d, want 431", code)
	}
	if code := withHeader(20 << 10); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("20 KiB header over the listener's 16 KiB: %d, want 431", code)
	}
	if code := withHeader(1 << 10); code != 200 {
		t.Errorf("1 KiB header: %d, want 200", code)
	}
	for _, s := range up.Requests() {
		if s.Header.Get("X-Big") != "" && len(s.Header.Get("X-Big")) > 1<<10 {
			t.Errorf("the upstream saw a %d-byte header", len(s.Header.Get("X-Big")))
		}
	}
	// The chunked body's head went upstream before its size was known;
	// it was cut off at the cap. The rest never left.
	if n := len(up.Requests()); n != 3 {
		t.Errorf("the upstream saw %d requests; want 3 (the cut-off chunked one and the two within the limits)", n)
	}
	evs := p.WaitAudit(t, 5)
	if n := len(events(evs, map[string]any{"sandbox": "local", "reason": "quota_exceeded", "http.response.status_code": 413, "limit": "max_request_body"})); n != 2 {
		t.Errorf("want 2 audit lines for max_request_body, got %d:\n%s", n, strings.Join(p.AuditLines(), "\n"))
	}
	// The listener's own 431 comes before Airlock sees the request: no line.
	if n := len(events(evs, map[string]any{"reason": "quota_exceeded", "http.response.status_code": 431, "limit": "max_header_bytes"})); n != 1 {
		t.Errorf("want 1 audit line for max_header_bytes, got %d:\n%s", n, strings.Join(p.AuditLines(), "\n"))
	}
}

// The same caps inside an intercepted tunnel, where goproxy reads the
// requests: 413 and 431 per request, and a header that never ends closes
// the tunnel instead of filling Airlock's memory.
func TestBodyAndHeaderCapsInsideInterceptedTunnels(t *testing.T) {
	t.Parallel()
	p, up, pool, _ := interceptSetup(t, "limits: {max_request_body: 1KiB, max_header_bytes: 16KiB}\n")
	c := httpClient(p.URL(), pool)
	target := fmt.Sprintf("https://allowed.test:%d/headers", up.Port())
	post := func(n int) int {
		t.Helper()
		resp, err := c.Post(target, "application/octet-stream", bytes.NewReader(make([]byte, n)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(2000); code != http.StatusRequestEntityTooLarge {
		t.Errorf("2000-byte body: %d, want 413", code)
	}
	if code := post(500); code != 200 {
		t.Errorf("500-byte body: %d, want 200", code)
	}
	req, _ := http.NewRequest(http.MethodGet, target, nil)
	req.Header.Set("X-Big", strings.Repeat("b", 20<<10))
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("20 KiB header: %v %v; want 431", resp, err)
	}

	tc, err := openInterceptedTunnel(t, p, fmt.Sprintf("allowed.test:%d", up.Port()), "allowed.test", pool)
	if err != nil {
		t.Fatal(err)
	}
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(tc, "GET /headers HTTP/1.1\r\nHost: allowed.test:%d\r\nX-Endless: ", up.Port())
	chunk := bytes.Repeat([]byte("e"), 16<<10)
	var werr error
	for sent := 0; sent < 8<<20 && werr == nil; sent += len(chunk) {
		_, werr = tc.Write(chunk)
	}
	if werr == nil {
		t.Fatal("Airlock read 8 MiB of one header line without closing the tunnel")
	}
	if isTimeout(werr) {
		t.Fatalf("writing the endless header: %v", werr)
	}
	p.StopAndFlush(t)
	evs := p.Audit(t)
	if n := len(events(evs, map[string]any{"event": "tunnel", "close_reason": "quota_exceeded", "limit": "max_header_bytes"})); n != 1 {
		t.Errorf("want the endless header's tunnel closed for max_header_bytes, got %d:\n%s", n, strings.Join(p.AuditLines(), "\n"))
	}
	for limit, want := range map[string]int{"max_request_body": 1, "max_header_bytes": 2} {
		if n := len(events(evs, map[string]any{"reason": "quota_exceeded", "limit": limit})) + len(events(evs, map[string]any{"close_reason": "quota_exceeded", "limit": limit})); n != want {
			t.Errorf("%d lines for %s, want %d:\n%s", n, limit, want, strings.Join(p.AuditLines(), "\n"))
		}
	}
}

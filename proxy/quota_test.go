package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/policy"
)

func TestRateLimitAnswers429AndRecovers(t *testing.T) {
	up := testutil.NewUpstream(t)
	addr, _ := startProxy(t, localYAML(up.Port())+"limits: {requests_per_second: 1, burst: 2}\n")
	pu, _ := url.Parse("http://" + addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	target := fmt.Sprintf("http://allowed.test:%d/x", up.Port())
	get := func() *http.Response {
		t.Helper()
		resp, err := c.Get(target)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 2 {
		if r := get(); r.StatusCode != 200 {
			t.Fatalf("request %d within the burst: %d", i+1, r.StatusCode)
		}
	}
	r := get()
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("X-Airlock-Decision") != "quota_exceeded" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("over the burst: %d %v; want 429 quota_exceeded with Retry-After", r.StatusCode, r.Header)
	}
	// A CONNECT counts too.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", up.Port())
	if resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("CONNECT over the limit: %v %v; want 429", resp, err)
	}
	// The bucket refills at 1 per second.
	time.Sleep(1100 * time.Millisecond)
	if r := get(); r.StatusCode != 200 {
		t.Errorf("after a second: %d, want 200", r.StatusCode)
	}
	if n := len(up.Requests()); n != 3 {
		t.Errorf("upstream saw %d requests, want 3 (refused ones never forwarded)", n)
	}
}

func TestConnectionCapAnswers429UntilATunnelCloses(t *testing.T) {
	up, pool := tlsUpstream(t)
	plain := testutil.NewUpstream(t)
	addr, srv := startProxy(t, fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {allowed.test: 127.0.0.1}
limits: {max_connections: 1}
policies:
  default:
    allow:
      - host: allowed.test
        ports: [%d, %d]
`, up.Port(), plain.Port()))
	pu, _ := url.Parse("http://" + addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}}
	get := func() int {
		t.Helper()
		resp, err := c.Get(fmt.Sprintf("http://allowed.test:%d/x", plain.Port()))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Sequential requests each give their slot back.
	for i := range 3 {
		if code := get(); code != 200 {
			t.Fatalf("request %d: %d", i+1, code)
		}
	}
	raw, _, _ := openTunnel(t, addr, up.Port(), pool)
	if code := get(); code != http.StatusTooManyRequests {
		t.Errorf("a request while the tunnel holds the only slot: %d, want 429", code)
	}
	raw.Close()
	for deadline := time.Now().Add(10 * time.Second); srv.OpenTunnels() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if code := get(); code != 200 {
		t.Errorf("after the tunnel closed: %d, want 200", code)
	}
}

func TestByteQuotaWindowsAreFixedAndPerDirection(t *testing.T) {
	sb := &policy.Sandbox{Name: "a", MaxBytesSent: 100, BytesWindow: 200 * time.Millisecond}
	var q byteQuotas
	if r := q.room(sb, dirReceived); r != math.MaxInt64 {
		t.Errorf("room without a received cap = %d, want unlimited", r)
	}
	q.charge(sb, dirSent, 60)
	if r := q.room(sb, dirSent); r != 40 {
		t.Errorf("room after 60 of 100 = %d, want 40", r)
	}
	if ref := q.exhausted(sb, time.Now()); ref != nil {
		t.Errorf("exhausted at 60 of 100: %+v", ref)
	}
	q.charge(sb, dirSent, 50)
	ref := q.exhausted(sb, time.Now())
	if ref == nil || ref.limit != "max_bytes_sent" || ref.retry <= 0 || ref.retry > 200*time.Millisecond {
		t.Fatalf("at 110 of 100: %+v; want max_bytes_sent, retry within the window", ref)
	}
	if r := q.room(sb, dirSent); r != 0 {
		t.Errorf("room over the cap = %d, want 0", r)
	}
	time.Sleep(ref.retry + 10*time.Millisecond)
	if ref := q.exhausted(sb, time.Now()); ref != nil || q.room(sb, dirSent) != 100 {
		t.Errorf("in the next window: %+v, room %d; want a fresh quota", ref, q.room(sb, dirSent))
	}
	other := &policy.Sandbox{Name: "b", MaxBytesSent: 100, BytesWindow: time.Hour}
	if r := q.room(other, dirSent); r != 100 {
		t.Errorf("another sandbox's room = %d, want its own 100", r)
	}
}

func TestRetryAfterIsWholeSecondsRoundedUp(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "1", 10 * time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", time.Hour: "3600"} {
		if got := retryAfter(d); got != want {
			t.Errorf("retryAfter(%v) = %s, want %s", d, got, want)
		}
	}
}

func TestPlainUploadOverByteQuotaAnswers429(t *testing.T) {
	up := testutil.NewUpstream(t)
	addr, _ := startProxy(t, localYAML(up.Port())+"limits: {max_bytes_sent: 1KiB, bytes_window: 1h}\n")
	pu, _ := url.Parse("http://" + addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	target := fmt.Sprintf("http://allowed.test:%d/echo", up.Port())
	// No Content-Length: the body is read as it goes, and cut at the quota.
	resp, err := c.Post(target, "application/octet-stream", io.MultiReader(strings.NewReader(strings.Repeat("u", 4096))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Airlock-Decision") != "quota_exceeded" || ra < 3500 {
		t.Fatalf("upload over max_bytes_sent: %d %v; want 429 quota_exceeded, Retry-After near an hour", resp.StatusCode, resp.Header)
	}
	resp, err = c.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a request after the quota is spent: %d, want 429", resp.StatusCode)
	}
}

// Headers count toward the byte quotas, both ways: a sandbox cannot
// carry data out (or in) in them for free.
func TestHeadersCountTowardByteQuotas(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, _ := strconv.Atoi(r.URL.Query().Get("hdr")); n > 0 {
			w.Header().Set("X-Big", strings.Repeat("h", n))
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	get := func(addr, query string, header int) int {
		t.Helper()
		pu, _ := url.Parse("http://" + addr)
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://allowed.test:%d/?%s", port, query), nil)
		if header > 0 {
			req.Header.Set("X-Data", strings.Repeat("d", header))
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0 // cut off: the transfer that crossed the quota
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	sent, _ := startProxy(t, localYAML(port)+"limits: {max_bytes_sent: 8KiB}\n")
	for i := range 2 {
		if code := get(sent, "", 3000); code != 200 {
			t.Fatalf("request %d with a 3000-byte header: %d", i+1, code)
		}
	}
	if code := get(sent, "", 3000); code != http.StatusTooManyRequests {
		// Two 3 KB headers and the rest of the requests come to over 6 KB;
		// the third takes the sandbox past 8 KiB.
		if code = get(sent, "", 0); code != http.StatusTooManyRequests {
			t.Errorf("after ~9 KB of request headers against max_bytes_sent 8KiB: %d, want 429", code)
		}
	}
	received, _ := startProxy(t, localYAML(port)+"limits: {max_bytes_received: 8KiB}\n")
	for range 3 {
		get(received, "hdr=3000", 0)
	}
	if code := get(received, "", 0); code != http.StatusTooManyRequests {
		t.Errorf("after ~9 KB of response headers against max_bytes_received 8KiB: %d, want 429", code)
	}
}

// An upstream that stalls mid-body past idle_timeout: the client sees a
// broken transfer, never a short one that looks complete.
func TestStalledResponseIsCutOffVisibly(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "start")
		w.(http.Flusher).Flush()
		time.Sleep(3 * time.Second)
		io.WriteString(w, "end")
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	addr, _ := startProxy(t, localYAML(port)+"limits: {idle_timeout: 500ms}\n")
	pu, _ := url.Parse("http://" + addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	resp, err := c.Get(fmt.Sprintf("http://allowed.test:%d/", port))
	if err != nil {
		return // broken before the header: visibly so
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Errorf("a response cut off by idle_timeout read as complete: %d %q", resp.StatusCode, b)
	}
}

// Tunnels running side by side overshoot a byte cap by at most one
// capped step (64 KiB) each.
func TestParallelTunnelsOvershootAByteCapByOneStepEach(t *testing.T) {
	up, pool := tlsUpstream(t)
	addr, _ := startProxy(t, fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {allowed.test: 127.0.0.1}
limits: {max_bytes_received: 1MiB, bytes_window: 1h}
policies:
  default:
    allow:
      - host: allowed.test
        ports: [%d]
`, up.Port()))
	const tunnels = 16
	var total atomic.Int64
	var wg sync.WaitGroup
	for range tunnels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pu, _ := url.Parse("http://" + addr)
			c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}}
			resp, err := c.Get(fmt.Sprintf("https://allowed.test:%d/bytes?n=%d", up.Port(), 4<<20))
			if err != nil {
				return
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			total.Add(n)
		}()
	}
	wg.Wait()
	// TLS adds a few per cent to the bodies the clients count.
	if limit := int64(1<<20 + tunnels*64<<10); total.Load() > limit {
		t.Errorf("%d tunnels received %d body bytes against a 1 MiB cap; want at most %d", tunnels, total.Load(), limit)
	}
}

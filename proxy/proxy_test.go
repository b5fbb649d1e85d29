package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/broker"
	"github.com/airlockhq/airlock/certs"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/policy"
)

// startProxy runs a Server in-process on loopback with cfgYAML and returns
// its address. Audit lines go to the returned buffer-less discard logger.
func startProxy(tb testing.TB, cfgYAML string) (addr string, srv *Server) {
	return startProxyWith(tb, cfgYAML, Options{})
}

// startProxyWith is startProxy with options (a CA, a broker); the audit
// log is discarded.
func startProxyWith(tb testing.TB, cfgYAML string, opts Options) (addr string, srv *Server) {
	tb.Helper()
	cfg, err := policy.Parse("test.yaml", []byte(cfgYAML))
	if err != nil {
		tb.Fatal(err)
	}
	opts.Audit = audit.New(io.Discard)
	srv, err = New(cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	hs := srv.NewHTTPServer()
	go hs.Serve(ln)
	tb.Cleanup(func() { hs.Close(); srv.closeTunnels() })
	return ln.Addr().String(), srv
}

// tlsUpstream starts an HTTPS upstream for allowed.test and returns it
// with a pool that trusts it.
func tlsUpstream(tb testing.TB) (*testutil.Upstream, *x509.CertPool) {
	ca := testutil.NewCA(tb)
	return testutil.NewTLSUpstream(tb, ca, "allowed.test"), ca.Pool()
}

// openTunnel sends CONNECT allowed.test:port to the proxy at addr, fails
// unless it answers 200, and starts TLS to allowed.test through it
// (opaque tunnels must carry TLS naming the CONNECT host). It returns the
// raw connection (closed at the end of the test), the TLS connection and
// a reader on it.
func openTunnel(tb testing.TB, addr string, port int, pool *x509.CertPool) (*net.TCPConn, *tls.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", port)
	if resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		tb.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: pool})
	if err := tc.Handshake(); err != nil {
		tb.Fatalf("TLS through the tunnel: %v", err)
	}
	return c.(*net.TCPConn), tc, bufio.NewReader(tc)
}

func localYAML(port int) string {
	return fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {allowed.test: 127.0.0.1}
policies:
  default:
    allow:
      - host: allowed.test
        ports: [%d]
`, port)
}

func TestRemoveHopByHop(t *testing.T) {
	h := http.Header{}
	h.Set("Connection", "close, X-Private, keep-alive")
	h.Set("X-Private", "1")
	h.Set("Keep-Alive", "timeout=5")
	h.Set("Proxy-Authorization", "Basic Zm9vOmJhcg==")
	h.Set("Proxy-Connection", "keep-alive")
	h.Set("Te", "trailers")
	h.Set("Upgrade", "websocket")
	h.Set("Accept", "*/*")
	removeHopByHop(h)
	if len(h) != 1 || h.Get("Accept") != "*/*" {
		t.Fatalf("left %v, want only Accept", h)
	}
}

func TestDenyBodyTellsTheAgentWhatAndWhy(t *testing.T) {
	body := denyBody("evil.example", 443, "host_not_allowed", "agent-1")
	for _, want := range []string{"host: evil.example\n", "port: 443\n", "host_not_allowed", "agent-1", "not on the allowlist", "will not work"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
}

// A tunnel where one side is silent but the other is busy is not idle.
func TestTunnelIdleIsJudgedAcrossBothDirections(t *testing.T) {
	up, pool := tlsUpstream(t)
	addr, _ := startProxy(t, localYAML(up.Port())+"limits: {idle_timeout: 300ms}\n")
	raw, c, br := openTunnel(t, addr, up.Port(), pool)
	// Ask for a slow-ish stream: the client then stays silent while bytes
	// flow down for longer than the idle timeout.
	const n = 64 << 20
	fmt.Fprintf(c, "GET /bytes?n=%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", n)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := int64(0)
	buf := make([]byte, 64<<10)
	for {
		k, err := resp.Body.Read(buf)
		got += int64(k)
		if got < 4<<20 {
			time.Sleep(time.Millisecond) // read slowly at first
		}
		if err != nil {
			break
		}
	}
	if got != n {
		t.Fatalf("read %d of %d bytes before the tunnel closed", got, n)
	}
	// Now nothing moves either way: the tunnel must close.
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("unexpected data")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("idle tunnel not closed")
	}
}

func BenchmarkHTTPForwardKeepAlive(b *testing.B) {
	up := testutil.NewUpstream(b)
	addr, _ := startProxy(b, localYAML(up.Port()))
	pu, _ := url.Parse("http://" + addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), MaxIdleConnsPerHost: 64}}
	target := fmt.Sprintf("http://allowed.test:%d/bytes?n=1024", up.Port())
	b.ReportAllocs()
	b.SetBytes(1024)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(target)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// A new CONNECT tunnel and TLS handshake per request.
func BenchmarkCONNECTNewTunnelPerRequest(b *testing.B) {
	up, pool := tlsUpstream(b)
	addr, _ := startProxy(b, localYAML(up.Port()))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		raw, c, br := openTunnel(b, addr, up.Port(), pool)
		io.WriteString(c, "GET /bytes?n=1024 HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		raw.Close()
	}
}

// Bulk download through one opaque tunnel (TLS end to end: the proxy
// splices ciphertext).
func BenchmarkTunnelThroughput(b *testing.B) {
	up, pool := tlsUpstream(b)
	addr, _ := startProxy(b, localYAML(up.Port()))
	_, c, br := openTunnel(b, addr, up.Port(), pool)
	const n = 16 << 20
	b.SetBytes(n)
	b.ResetTimer()
	for b.Loop() {
		fmt.Fprintf(c, "GET /bytes?n=%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", n)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// goproxy accepts and tunnels any CONNECT by default. Airlock handles
// CONNECT itself; if one ever reached goproxy it must be refused.
func TestGoproxyRefusesCONNECTItself(t *testing.T) {
	up := testutil.NewUpstream(t)
	_, srv := startProxy(t, localYAML(up.Port()))
	ts := httptest.NewServer(srv.gp)
	defer ts.Close()
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", up.Port())
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if strings.Contains(line, " 200 ") {
		t.Fatalf("goproxy accepted a CONNECT: %q", line)
	}
}

// A client that half-closes its side and then never reads must not keep a
// tunnel open past the idle timeout.
func TestHalfClosedTunnelThatStopsReadingIsClosedWhenIdle(t *testing.T) {
	up, pool := tlsUpstream(t)
	addr, srv := startProxy(t, localYAML(up.Port())+"limits: {idle_timeout: 500ms}\n")
	raw, c, _ := openTunnel(t, addr, up.Port(), pool)
	raw.SetReadBuffer(4096)
	// Ask for far more than socket buffers hold, half-close, never read.
	fmt.Fprintf(c, "GET /bytes?n=%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 256<<20)
	c.CloseWrite()

	deadline := time.Now().Add(20 * time.Second)
	for srv.OpenTunnels() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the tunnel was still open 20s after going idle")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startTLSProxy runs a Server with a generated CA in front of an HTTPS
// upstream for allowed.test; with inspect, a path rule makes Airlock
// intercept its tunnels. It returns a keep-alive client through the proxy.
func startTLSProxy(b *testing.B, inspect bool) (*http.Client, string) {
	upCA := testutil.NewCA(b)
	up := testutil.NewTLSUpstream(b, upCA, "allowed.test")
	dir := b.TempDir()
	rule := ""
	if inspect {
		rule = `        paths: ["/**"]`
	}
	cfgYAML := fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {allowed.test: 127.0.0.1}
tls:
  upstream_ca: %s
policies:
  default:
    allow:
      - host: allowed.test
        ports: [%d]
%s
`, upCA.WritePEM(b, dir), up.Port(), rule)
	certPath, keyPath, _, err := certs.Init(filepath.Join(dir, "state"))
	if err != nil {
		b.Fatal(err)
	}
	ca, err := certs.Load(certPath, keyPath, 0)
	if err != nil {
		b.Fatal(err)
	}
	addr, _ := startProxyWith(b, cfgYAML, Options{CA: ca})

	roots := upCA.Pool()
	roots.AddCert(ca.Certificate())
	pu, _ := url.Parse("http://" + addr)
	c := &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyURL(pu),
		TLSClientConfig:     &tls.Config{RootCAs: roots},
		MaxIdleConnsPerHost: 64,
	}}
	return c, fmt.Sprintf("https://allowed.test:%d/bytes?n=1024", up.Port())
}

func benchmarkHTTPSKeepAlive(b *testing.B, inspect bool) {
	c, target := startTLSProxy(b, inspect)
	b.ReportAllocs()
	b.SetBytes(1024)
	b.ResetTimer()
	for b.Loop() {
		resp, err := c.Get(target)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// HTTPS keep-alive GETs through an opaque CONNECT tunnel, and through an
// intercepted one: the difference is the cost of interception per request.
func BenchmarkHTTPSKeepAliveOpaqueTunnel(b *testing.B)      { benchmarkHTTPSKeepAlive(b, false) }
func BenchmarkHTTPSKeepAliveInterceptedTunnel(b *testing.B) { benchmarkHTTPSKeepAlive(b, true) }

// An opaque tunnel is decided on the CONNECT host, so it must carry TLS
// for that host: CDNs route on the TLS server name, and a ClientHello
// naming another site would reach any tenant of the CDN.
func TestOpaqueTunnelRefusesAnotherServerName(t *testing.T) {
	up, pool := tlsUpstream(t)
	addr, _ := startProxy(t, localYAML(up.Port()))
	connect := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", up.Port())
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	for _, sni := range []string{"exfil.attacker.example", ""} {
		tc := tls.Client(connect(), &tls.Config{ServerName: sni, RootCAs: pool, InsecureSkipVerify: true})
		if err := tc.Handshake(); err == nil {
			t.Errorf("TLS with SNI %q went through a tunnel to allowed.test", sni)
		}
	}
	c := connect()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: exfil.attacker.example\r\n\r\n")
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Errorf("plain HTTP through an opaque tunnel got an answer: %q", b)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("the upstream served %d requests from refused tunnels", n)
	}
}

func TestCheckClientHello(t *testing.T) {
	name, _ := policy.ParseHost("allowed.test")
	ip, _ := policy.ParseHost("192.0.2.7")
	cases := []struct {
		sni  string
		exts []uint16
		host policy.Host
		ok   bool
	}{
		{"allowed.test", []uint16{0, 10, 13}, name, true},
		{"ALLOWED.test.", nil, name, true},
		{"other.test", nil, name, false},
		{"", nil, name, false},
		{"", nil, ip, true},
		{"allowed.test", []uint16{0, extensionECH}, name, false},
	}
	for _, tc := range cases {
		if got := checkClientHello(tc.sni, tc.exts, tc.host) == ""; got != tc.ok {
			t.Errorf("checkClientHello(%q, %v, %s) ok=%v, want %v", tc.sni, tc.exts, tc.host, got, tc.ok)
		}
	}
}

// A plain-HTTP client that stops reading a large response must not pin
// its connection and the upstream's: each write to it has idle to finish.
func TestStalledHTTPClientIsCutOffWhenIdle(t *testing.T) {
	gaveUp := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		for i := 0; i < 1<<14; i++ { // up to 1 GiB
			if _, err := w.Write(chunk); err != nil {
				close(gaveUp)
				return
			}
		}
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	addr, _ := startProxy(t, localYAML(port)+"limits: {idle_timeout: 300ms}\n")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", port)
	select {
	case <-gaveUp:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream was still sending to a stalled client 20s later")
	}
}

// Idle deadlines are about bytes not moving while a transfer runs; a slow
// upstream (no bytes to move yet) must not trip them, on a fresh or a
// keep-alive connection, after a request body or without one.
func TestSlowUpstreamIsNotIdle(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(800 * time.Millisecond)
		io.WriteString(w, "late but fine")
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	addr, _ := startProxy(t, localYAML(port)+"limits: {idle_timeout: 300ms}\n")
	pu, _ := url.Parse("http://" + addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	target := fmt.Sprintf("http://allowed.test:%d/", port)
	for i, body := range []string{"", "a request body", ""} {
		var resp *http.Response
		var err error
		if body == "" {
			resp, err = c.Get(target)
		} else {
			resp, err = c.Post(target, "text/plain", strings.NewReader(body))
		}
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "late but fine" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
}

func TestRequestShapeTricksAreRefusedUnderMethodRules(t *testing.T) {
	up := testutil.NewUpstream(t)
	addr, _ := startProxy(t, fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {allowed.test: 127.0.0.1}
policies:
  default:
    allow:
      - host: allowed.test
        ports: [%d]
        methods: [GET, POST]
`, up.Port()))
	send := func(raw string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, raw)
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line
	}
	base := fmt.Sprintf("http://allowed.test:%d/", up.Port())
	for _, raw := range []string{
		"POST " + base + " HTTP/1.1\r\nHost: allowed.test\r\nX-HTTP-Method-Override: DELETE\r\nContent-Length: 0\r\n\r\n",
		"GET " + base + " HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\n\r\nhello",
	} {
		if line := send(raw); strings.Contains(line, " 200 ") {
			t.Errorf("%q: %s", strings.SplitN(raw, "\r\n", 3)[2], line)
		}
	}
	if line := send("GET " + base + " HTTP/1.1\r\nHost: allowed.test\r\n\r\n"); !strings.Contains(line, " 200 ") {
		t.Errorf("a plain GET: %s", line)
	}
	if n := len(up.Requests()); n != 1 {
		t.Errorf("upstream saw %d requests, want only the plain GET", n)
	}
}

func TestEncodedAsSeesEveryContentEncoding(t *testing.T) {
	for _, tc := range []struct {
		vals []string
		want string
	}{
		{nil, ""},
		{[]string{"identity"}, ""},
		{[]string{"identity", "gzip"}, "gzip"},
		{[]string{"identity, br"}, "br"},
		{[]string{"GZIP"}, "GZIP"},
	} {
		h := http.Header{}
		for _, v := range tc.vals {
			h.Add("Content-Encoding", v)
		}
		if got := encodedAs(h); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.vals, got, tc.want)
		}
	}
}

// With credentials configured every request body is checked for
// placeholders; a client that stalls its body is still cut off when idle,
// and request trailers are never forwarded.
func TestBodyChecksHonourIdleAndDropTrailers(t *testing.T) {
	gotTrailer := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		gotTrailer <- r.Trailer
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	cfgYAML := localYAML(port) + `limits: {idle_timeout: 300ms}
credentials:
  c:
    source: {env: AIRLOCK_TEST_UNUSED}
    hosts: [api.test]
`
	cfg, err := policy.Parse("t.yaml", []byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(cfg, []byte("0123456789abcdef0123456789abcdef"), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := startProxyWith(t, cfgYAML, Options{Broker: b})

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 100000\r\n\r\n0123456789", port)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("a stalled request body held the connection past the idle timeout")
		}
	}

	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "POST http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\nTrailer: X-Leak\r\n\r\n5\r\nhello\r\n0\r\nX-Leak: secret-ish\r\n\r\n", port)
	select {
	case tr := <-gotTrailer:
		if tr.Get("X-Leak") != "" {
			t.Errorf("the upstream received request trailers: %v", tr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the upstream")
	}
}

package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/certs"
	"github.com/airlockhq/airlock/internal/testutil"
	"github.com/airlockhq/airlock/policy"
)

// TestNothingLeaksAfterShutdown drives every kind of traffic (plain HTTP,
// an opaque tunnel, an intercepted tunnel, a refusal), leaves the tunnels
// open, shuts down, and checks that no goroutine is left behind.
func TestNothingLeaksAfterShutdown(t *testing.T) {
	upCA := testutil.NewCA(t)
	up := testutil.NewTLSUpstream(t, upCA, "allowed.test", "inspected.test")
	plain := testutil.NewUpstream(t)
	ignore := goleak.IgnoreCurrent() // the upstreams' accept loops
	dir := t.TempDir()
	cfg, err := policy.Parse("test.yaml", []byte(fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {allowed.test: 127.0.0.1, inspected.test: 127.0.0.1}
tls:
  upstream_ca: %s
policies:
  default:
    allow:
      - host: allowed.test
        ports: [%d, %d]
      - host: inspected.test
        ports: [%d]
        paths: ["/**"]
`, upCA.WritePEM(t, dir), up.Port(), plain.Port(), up.Port())))
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath, _, err := certs.Init(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.Load(certPath, keyPath, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Options{Audit: audit.New(io.Discard), CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.NewHTTPServer()
	served := make(chan struct{})
	go func() { hs.Serve(ln); close(served) }()

	roots := upCA.Pool()
	roots.AddCert(ca.Certificate())
	pu, _ := url.Parse("http://" + ln.Addr().String())
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}}
	client := &http.Client{Transport: tr}
	for _, u := range []string{
		fmt.Sprintf("http://allowed.test:%d/x", plain.Port()),
		fmt.Sprintf("https://allowed.test:%d/x", up.Port()),
		fmt.Sprintf("https://inspected.test:%d/x", up.Port()),
		"http://denied.test/x",
	} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// A tunnel whose client holds it open past the goroutine check: only
	// the shutdown can end the proxy's side of it.
	held, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close() // after the check below: the proxy must not wait for the client
	fmt.Fprintf(held, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", up.Port())
	heldTLS := tls.Client(held, &tls.Config{ServerName: "allowed.test", RootCAs: roots})
	if _, err := http.ReadResponse(bufio.NewReader(held), &http.Request{Method: http.MethodConnect}); err != nil {
		t.Fatal(err)
	}
	if err := heldTLS.Handshake(); err != nil {
		t.Fatal(err)
	}
	// The other tunnels stay open (keep-alive) into the shutdown too.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	hs.Shutdown(ctx)
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	<-served
	tr.CloseIdleConnections()
	goleak.VerifyNone(t, ignore, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"))
}

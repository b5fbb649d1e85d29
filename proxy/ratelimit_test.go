package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
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

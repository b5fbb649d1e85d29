package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

// allowLocal is the config fragment that lets tests reach upstreams on
// 127.0.0.1: loopback is a special-purpose address, blocked unless an
// allow_cidrs exception names it.
const allowLocal = `
network:
  allow_cidrs: [127.0.0.1/32]
  hosts:
    allowed.test: 127.0.0.1
    other.allowed.test: 127.0.0.1
    internal.test: 127.0.0.1
`

// httpClient returns a Go client that uses proxyURL for every request and
// trusts pool for HTTPS, and never follows redirects.
func httpClient(proxyURL string, roots *x509.CertPool) *http.Client {
	u, _ := url.Parse(proxyURL)
	tr := &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func get(t *testing.T, c *http.Client, rawURL string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(rawURL)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// curl runs curl through the proxy and returns the HTTP status and body.
// When the proxy refused a CONNECT, the status is the CONNECT response's.
func curl(t *testing.T, proxy string, args ...string) (int, string) {
	t.Helper()
	bin := testutil.NeedTool(t, "curl")
	full := append([]string{"-sS", "--max-time", "20", "-x", proxy, "-o", "-", "-w", "\n%{http_code} %{http_connect}"}, args...)
	out, err := exec.Command(bin, full...).Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("curl %v: %v", args, err)
	}
	s := strings.TrimRight(string(out), "\n")
	i := strings.LastIndex(s, "\n")
	var code, connectCode int
	fmt.Sscan(s[i+1:], &code, &connectCode)
	if code == 0 {
		code = connectCode
	}
	if i < 0 {
		return code, ""
	}
	return code, s[:i]
}

// oneEvent asserts that exactly one audit line exists for host and
// returns it.
func oneEvent(t *testing.T, p *testutil.Proxy, host string, total int) map[string]any {
	t.Helper()
	evs := p.WaitAudit(t, total)
	var found []map[string]any
	for _, e := range evs {
		if e["server.address"] == host {
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one audit line for %s, got %d:\n%s", host, len(found), strings.Join(p.AuditLines(), "\n"))
	}
	return found[0]
}

func wantFields(t *testing.T, ev map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := ev[k]
		if !ok {
			t.Errorf("audit line lacks %q: %v", k, ev)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("audit %s = %v, want %v", k, got, v)
		}
	}
}

// connectRaw sends "CONNECT target" on a raw connection and returns the
// status line and the rest of the response head.
func connectRaw(t *testing.T, proxyAddr, target string) (string, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		return fmt.Sprintf("%d %s", resp.StatusCode, b), nil, nil
	}
	return "200", c, br
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// execOutput runs a command and returns its combined output.
func execOutput(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}

// exitCode returns a command's exit status (0 for a nil error, -1 when it
// did not run).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

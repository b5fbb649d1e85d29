package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/testutil"
)

// writeAtomically replaces path the way editors and Kubernetes do: write
// a temporary file, rename it over the old one.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestReloadAppliesNewPolicyAndKeepsTheOldOneOnErrors(t *testing.T) {
	ca := testutil.NewCA(t)
	up := testutil.NewTLSUpstream(t, ca, "allowed.test", "other.allowed.test")
	adminPort := freePort(t)
	config := func(rules string) string {
		return fmt.Sprintf(`
listen:
  admin: 127.0.0.1:%d
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {allowed.test: 127.0.0.1, other.allowed.test: 127.0.0.1}
policies:
  default:
    allow:
%s      - host: other.allowed.test
        ports: [%d]
`, adminPort, rules, up.Port())
	}
	withAllowed := fmt.Sprintf("      - host: allowed.test\n        ports: [%d]\n", up.Port())
	p := testutil.StartProxy(t, config(withAllowed))

	// Two open tunnels; the reload will remove the first one's host.
	raw1, tc1 := tlsTunnel(t, p, up.Port(), ca.Pool(), "allowed.test")
	if err := tc1.Handshake(); err != nil {
		t.Fatal(err)
	}
	status, c2, _ := connectRaw(t, p.Addr, fmt.Sprintf("other.allowed.test:%d", up.Port()))
	if status != "200" {
		t.Fatal(status)
	}
	tc2 := tls.Client(c2, &tls.Config{ServerName: "other.allowed.test", RootCAs: ca.Pool()})

	writeAtomically(t, p.ConfigPath, config(""))
	if !p.WaitStderr("configuration reloaded") {
		t.Fatalf("no reload after the file changed:\n%s", p.Stderr())
	}
	raw1.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := tc1.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the tunnel to a host the new policy refuses is still open: %v", err)
	}
	fmt.Fprintf(tc2, "GET / HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(tc2), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a still-allowed tunnel was dropped: %v %v", resp, err)
	}
	if status, _, _ := connectRaw(t, p.Addr, fmt.Sprintf("allowed.test:%d", up.Port())); !strings.HasPrefix(status, "403") {
		t.Fatalf("a new CONNECT after the reload: %s", status)
	}
	found := false
	for _, ev := range p.WaitAudit(t, 2) {
		found = found || (ev["event"] == "tunnel" && ev["close_reason"] == "policy_reload" && ev["server.address"] == "allowed.test")
	}
	if !found {
		t.Errorf("no tunnel line with close_reason policy_reload:\n%s", strings.Join(p.AuditLines(), "\n"))
	}

	// A broken file is reported with its place, and changes nothing.
	writeAtomically(t, p.ConfigPath, config("      - hots: typo.test\n"))
	if !p.WaitStderr("reload failed") || !p.WaitStderr(p.ConfigPath+":10:9") {
		t.Fatalf("a broken file was not reported with file:line:col:\n%s", p.Stderr())
	}
	if status, _, _ := connectRaw(t, p.Addr, fmt.Sprintf("other.allowed.test:%d", up.Port())); status != "200" {
		t.Fatalf("after a broken file, the running policy changed: %s", status)
	}

	// A change only a restart can apply is refused.
	writeAtomically(t, p.ConfigPath, strings.Replace(config(""), "allow_cidrs: [127.0.0.1/32]", "allow_cidrs: [127.0.0.1/32]\n  resolvers: [127.0.0.53]", 1))
	if !p.WaitStderr("takes effect only when Airlock restarts") {
		t.Fatalf("a resolver change was not refused:\n%s", p.Stderr())
	}

	// On demand: airlock reload, and SIGHUP.
	os.WriteFile(p.ConfigPath, []byte(config(withAllowed)), 0o600)
	out, err := execOutput(testutil.Binary(t), "reload", "--admin", fmt.Sprintf("127.0.0.1:%d", adminPort))
	if err != nil || !strings.Contains(out, "reloaded") {
		t.Fatalf("airlock reload: %v %s", err, out)
	}
	if status, _, _ := connectRaw(t, p.Addr, fmt.Sprintf("allowed.test:%d", up.Port())); status != "200" {
		t.Fatalf("after airlock reload: %s", status)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !p.WaitStderr(`trigger=SIGHUP`) {
		t.Errorf("SIGHUP did not reload:\n%s", p.Stderr())
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(interface{ Timeout() bool })
	return ok && ne.Timeout()
}

package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/testutil"
)

// listenInNetns listens on addr inside the named network namespace: the
// socket is made on a thread moved into it (a thread never moved back,
// so it ends with its goroutine).
func listenInNetns(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.ln
}

func ipCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// examples/netns/airlock-netns.sh confines a command: inside its
// namespace the request through Airlock works, the same upstream is
// unreachable directly, a denied host is refused, Airlock's DNS answers
// allowed names only, the exit status comes back, and nothing is left
// behind. Everything happens in namespaces this test creates: the script
// runs in a "host" namespace of the test's own, with the upstream on
// every address there.
func TestNetnsExampleConfinesACommand(t *testing.T) {
	testutil.NeedRoot(t)
	for _, tool := range []string{"ip", "nft", "setpriv", "curl", "dig"} {
		testutil.NeedTool(t, tool)
	}
	hostNS := fmt.Sprintf("al-e2e-host-%d", os.Getpid())
	sandboxNS := fmt.Sprintf("al-e2e-sb-%d", os.Getpid())
	ipCmd(t, "netns", "add", hostNS)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", sandboxNS).Run()
		exec.Command("ip", "netns", "del", hostNS).Run()
	})
	ipCmd(t, "-n", hostNS, "link", "set", "lo", "up")

	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello from the host namespace")
	}))
	up.Listener = listenInNetns(t, hostNS, "0.0.0.0:0") // loopback and the veth end alike
	up.Start()
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	cfg := filepath.Join(dir, "airlock.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {allowed.test: 127.0.0.1}
dns: {mode: synthetic, answer: [10.199.77.1]}   # no query leaves the namespaces
policies:
  default:
    allow:
      - host: allowed.test
        ports: [%d]
      - host: intercepted.test       # makes Airlock intercept, so the command gets a CA bundle
        paths: ["/**"]
`, port)), 0o644)
	os.Chmod(dir, 0o755)
	auditLog := filepath.Join(dir, "audit.jsonl")
	inner := fmt.Sprintf(`
echo "uid=$(id -u)"
echo "proxy=$HTTPS_PROXY"
echo "ca_bundle=$(grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE")"
echo "proxied=$(curl -sS --max-time 10 -o /dev/null -w '%%{http_code}' http://allowed.test:%[1]d/)"
echo "direct=$(curl -sS --max-time 5 --noproxy '*' -o /dev/null -w '%%{http_code}' http://10.199.77.1:%[1]d/ 2>/dev/null)"
echo "denied=$(curl -sS --max-time 10 -o /dev/null -w '%%{http_code}' http://denied.test:%[1]d/)"
echo "dns_allowed=$(dig +time=2 +tries=1 allowed.test | grep -o 'status: [A-Z]*')"
echo "dns_denied=$(dig +time=2 +tries=1 denied.test | grep -o 'status: [A-Z]*')"
exit 7
`, port)
	script, _ := filepath.Abs("../examples/netns/airlock-netns.sh")
	cmd := exec.Command("ip", "netns", "exec", hostNS, script, "-c", cfg, "-u", "nobody",
		"-s", "10.199.77.0", "-n", sandboxNS, "-a", auditLog, "--", "sh", "-c", inner)
	cmd.Env = append(os.Environ(), "AIRLOCK="+testutil.Binary(t))
	out, err := cmd.Output()
	if exitCode(err) != 7 {
		t.Fatalf("exit status %d (%v), want the command's 7; output:\n%s", exitCode(err), err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	if n, _ := strconv.Atoi(got["ca_bundle"]); n < 2 {
		t.Errorf("the command's SSL_CERT_FILE holds %q certificates; want the system roots and Airlock's CA:\n%s", got["ca_bundle"], out)
	}
	for k, want := range map[string]string{
		"uid":         "65534", // -u nobody
		"proxy":       "http://10.199.77.1:3128",
		"proxied":     "200",
		"direct":      "000", // refused by the namespace's nftables table
		"denied":      "403",
		"dns_allowed": "status: NOERROR",
		"dns_denied":  "status: REFUSED",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q; output:\n%s", k, got[k], want, out)
		}
	}
	audit, _ := os.ReadFile(auditLog)
	if !strings.Contains(string(audit), `"server.address":"denied.test"`) || !strings.Contains(string(audit), `"client.address":"10.199.77.2"`) {
		t.Errorf("the audit log lacks the sandbox's requests:\n%s", audit)
	}
	if list := ipCmd(t, "netns", "list"); strings.Contains(list, sandboxNS) {
		t.Errorf("the sandbox namespace is left behind:\n%s", list)
	}
	if links := ipCmd(t, "-n", hostNS, "-o", "link"); strings.Contains(links, "alh") {
		t.Errorf("the host end of the veth is left behind:\n%s", links)
	}
	if m, _ := filepath.Glob("/etc/netns/" + sandboxNS); len(m) > 0 {
		t.Errorf("/etc/netns/%s is left behind", sandboxNS)
	}

	// SIGTERM to the script reaches COMMAND (in a session of its own, with
	// no terminal to push keystrokes into), and everything is torn down.
	cmd = exec.Command("ip", "netns", "exec", hostNS, script, "-c", cfg, "-u", "nobody",
		"-s", "10.199.77.0", "-n", sandboxNS, "-a", auditLog, "--", "sh", "-c", `(exec 3<>/dev/tty) 2>/dev/null && echo "has a terminal"; echo started; setsid sleep 300 & sleep 300`)
	cmd.Env = append(os.Environ(), "AIRLOCK="+testutil.Binary(t))
	var buf, errBuf lockedBuffer
	cmd.Stdout, cmd.Stderr = &buf, &errBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(buf.String(), "started") && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 143 {
			t.Errorf("after SIGTERM: exit status %d, want 143 (COMMAND killed by TERM)\n%s", code, errBuf.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("SIGTERM did not end the script")
	}
	if strings.Contains(buf.String(), "has a terminal") {
		t.Error("COMMAND has a controlling terminal")
	}
	if list := ipCmd(t, "netns", "list"); strings.Contains(list, sandboxNS) {
		t.Errorf("after SIGTERM the sandbox namespace is left behind:\n%s", list)
	}
	if out, err := exec.Command("pgrep", "-f", "sleep 300").Output(); err == nil {
		t.Errorf("processes of COMMAND survive it: %s", out)
	}

	// An existing namespace is never taken over, nor deleted.
	cmd = exec.Command("ip", "netns", "exec", hostNS, script, "-n", hostNS, "--", "true")
	cmd.Env = append(os.Environ(), "AIRLOCK="+testutil.Binary(t))
	if out, err := cmd.CombinedOutput(); exitCode(err) != 2 || !strings.Contains(string(out), "exists already") {
		t.Errorf("-n with an existing namespace: %v %s", err, out)
	}
	if !strings.Contains(ipCmd(t, "netns", "list"), hostNS) {
		t.Error("the script deleted a namespace it did not create")
	}
}

// lockedBuffer is a strings.Builder safe to write from a process's
// output copier while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

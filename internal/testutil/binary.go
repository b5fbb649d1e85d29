package testutil

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary builds the airlock command once per test process and returns
// the path of the executable.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "airlock")
		args := []string{"build", "-o", buildPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/airlockhq/airlock/cmd/airlock")
		cmd := exec.Command("go", args...)
		cmd.Dir = moduleRoot()
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// moduleRoot is the repository root (two levels above this file).
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// SharedDir returns the shared/ folder beside the checkout (test corpora).
func SharedDir() string { return filepath.Join(moduleRoot(), "..", "shared") }

// Proxy is a running airlock binary.
type Proxy struct {
	Addr       string // "127.0.0.1:PORT" of the proxy listener
	DNSAddr    string // "127.0.0.1:PORT" of the DNS listener, when listen.dns is set
	StateDir   string // --state-dir given by StartProxy
	ConfigPath string // the configuration file StartProxy wrote

	cmd     *exec.Cmd
	mu      sync.Mutex
	stdout  bytes.Buffer // audit lines
	stderr  bytes.Buffer
	done    chan struct{}
	scanned chan struct{} // closed when every stderr line is in stderr
}

// StartProxy writes config to a temporary file and runs
// `airlock run --config FILE --listen 127.0.0.1:0 --state-dir DIR EXTRA...`,
// waiting until it listens. The proxy is stopped at the end of the test.
// Its state directory (where a generated CA goes) is Proxy.StateDir.
func StartProxy(t testing.TB, config string, extra ...string) *Proxy {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	p := StartProxyArgs(t, append([]string{"run", "--config", path, "--listen", "127.0.0.1:0", "--state-dir", state}, extra...)...)
	p.StateDir, p.ConfigPath = state, path
	return p
}

var (
	listeningRE = regexp.MustCompile(`msg="airlock listening" addr=(\S+)`)
	dnsRE       = regexp.MustCompile(`msg="dns listening" udp=(\S+)`)
)

// StartProxyArgs runs the airlock binary with args (which must start the
// proxy) and waits for its listening line.
func StartProxyArgs(t testing.TB, args ...string) *Proxy {
	t.Helper()
	p := &Proxy{done: make(chan struct{})}
	p.cmd = exec.Command(Binary(t), args...)
	p.cmd.Stdout = &lockedWriter{mu: &p.mu, w: &p.stdout}
	pr, pw := io.Pipe()
	p.cmd.Stderr = pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	p.scanned = scanned
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		defer io.Copy(io.Discard, pr) // never leave the binary blocked on a full pipe
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if m := dnsRE.FindStringSubmatch(line); m != nil {
				p.mu.Lock()
				p.DNSAddr = m[1]
				p.mu.Unlock()
			}
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	go func() { p.cmd.Wait(); pw.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop(t)
		<-scanned // every stderr line is in p.stderr
		// A binary built with -race reports races on stderr and carries on.
		if e := p.Stderr(); strings.Contains(e, "WARNING: DATA RACE") || strings.Contains(e, "panic:") {
			t.Errorf("airlock reported a data race or panic:\n%s", e)
		}
	})
	select {
	case p.Addr = <-addr:
	case <-p.done:
		t.Fatalf("airlock exited before listening:\n%s", p.Stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("airlock did not start listening in 30s:\n%s", p.Stderr())
	}
	return p
}

// Signal sends sig to the proxy process.
func (p *Proxy) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// URL returns the proxy URL for HTTP_PROXY-style settings.
func (p *Proxy) URL() string { return "http://" + p.Addr }

// Stop sends SIGTERM and waits for a graceful exit (killing after 15s).
func (p *Proxy) Stop(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		t.Errorf("airlock did not exit within 15s of SIGTERM")
	}
}

// StopAndFlush stops the proxy and waits until everything it wrote is in
// AuditLines and Stderr: for checks that must see every line.
func (p *Proxy) StopAndFlush(t testing.TB) {
	p.Stop(t)
	<-p.scanned
}

// Stderr returns what the proxy wrote to stderr so far.
func (p *Proxy) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// WaitStderr waits up to 10s for the proxy's stderr to contain substr
// (lines reach Stderr through a pipe, a little after they are written)
// and reports whether it did.
func (p *Proxy) WaitStderr(substr string) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Stderr(), substr) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// AuditLines returns the raw audit lines written so far.
func (p *Proxy) AuditLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var lines []string
	for _, l := range strings.Split(p.stdout.String(), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// Audit returns the audit events written so far, decoded. A line that is
// not a JSON object fails the test.
func (p *Proxy) Audit(t testing.TB) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, l := range p.AuditLines() {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("audit line is not JSON: %q: %v", l, err)
		}
		evs = append(evs, m)
	}
	return evs
}

// WaitAudit waits until at least n audit lines exist and returns the
// events; it fails the test after 10s.
func (p *Proxy) WaitAudit(t testing.TB, n int) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if evs := p.Audit(t); len(evs) >= n {
			return evs
		}
		select {
		case <-ctx.Done():
			t.Fatalf("want %d audit lines, have:\n%s", n, strings.Join(p.AuditLines(), "\n"))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// NeedTool returns the path of an external tool, skipping the test when
// it is missing, except under CI=true, where a missing tool fails the test
// (CI installs every tool the tests use).
func NeedTool(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed; .ci/run must install it", name)
	}
	t.Skipf("%s is not installed", name)
	return ""
}

// NeedRoot skips the test unless it runs as root; in CI (CI=true), where
// .ci/run runs as root, it fails instead.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root (network namespaces); CI runs as root")
	}
	t.Skip("needs root (network namespaces)")
}

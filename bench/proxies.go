package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// target is what the load goes through: no proxy ("direct"), or a proxy
// process the harness started.
type target struct {
	name   string
	addr   string // proxy host:port; "" for direct
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

func (t *target) pid() int {
	if t.cmd == nil || t.cmd.Process == nil {
		return 0
	}
	return t.cmd.Process.Pid
}

func (t *target) stop() {
	if t.cmd == nil || t.cmd.Process == nil {
		return
	}
	t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.exited:
	case <-time.After(15 * time.Second):
		t.cmd.Process.Kill()
		<-t.exited
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListening waits until addr accepts TCP connections.
func waitListening(addr string, t *target) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-t.exited:
			return fmt.Errorf("%s exited", t.cmd.Path)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not listen on %s within 20s", t.cmd.Path, addr)
}

func startProc(name, addr string, stderr *os.File, bin string, args ...string) (*target, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout = nil // audit and access logs: discarded, as for every proxy
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	t := &target{name: name, addr: addr, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(t.exited) }()
	if err := waitListening(addr, t); err != nil {
		t.stop()
		return nil, fmt.Errorf("%s: %w (its log: %s)", name, err, stderr.Name())
	}
	return t, nil
}

// upstreamPorts are the upstream process's listeners.
type upstreamPorts struct{ http, https, dns int }

// airlockConfig allows the upstream by address (no DNS on the request
// path, as for the peers), with the DNS limits that would refuse a
// benchmark's thousands of names opened up. With intercept, HTTPS to the
// upstream is intercepted and a credential injected into each request.
func airlockConfig(dir string, up upstreamPorts, proxyPort, dnsPort int, intercept bool) string {
	rule := "      - host: 127.0.0.1\n"
	if intercept {
		rule = fmt.Sprintf("      - host: 127.0.0.1\n        ports: [%d]\n        paths: [\"/**\"]\n        credential: bench\n      - host: 127.0.0.1\n        ports: [%d]\n", up.https, up.http)
	}
	return fmt.Sprintf(`listen:
  proxy: 127.0.0.1:%d
  dns: 127.0.0.1:%d
network:
  allow_cidrs: [127.0.0.1/32]
  resolvers: ["127.0.0.1:%d"]
  ports: [%d, %d]
tls:
  upstream_ca: %s
dns:
  exfil: {max_new_names: 1000000000, max_new_bytes: 1000000000, qps: 1000000, burst: 1000000, entropy_min_len: 63}
credentials:
  bench:
    source: {env: BENCH_TOKEN}
    hosts: [127.0.0.1]
policies:
  default:
    allow:
%s      - host: bench.test
      - host: "*.bench.test"
audit:
  output: stdout
`, proxyPort, dnsPort, up.dns, up.http, up.https, filepath.Join(dir, "upstream-ca.pem"), rule)
}

func startAirlock(bin, dir string, up upstreamPorts, intercept bool) (*target, int, error) {
	name := "airlock"
	if intercept {
		name = "airlock-intercept"
	}
	port, dnsPort := freePort(), freePort()
	cfg := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(cfg, []byte(airlockConfig(dir, up, port, dnsPort, intercept)), 0o644); err != nil {
		return nil, 0, err
	}
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, 0, err
	}
	os.Setenv("BENCH_TOKEN", "bench-token-value-0123456789")
	t, err := startProc(name, fmt.Sprintf("127.0.0.1:%d", port), log, bin, "run", "--config", cfg, "--state-dir", filepath.Join(dir, name+"-state"))
	return t, dnsPort, err
}

// Squid 5 as a plain forward proxy: no cache, every request and CONNECT
// from loopback allowed, the access log written (to /dev/null) as
// Airlock's audit log is.
func startSquid(dir string) (*target, error) {
	bin, err := exec.LookPath("squid")
	if err != nil {
		return nil, fmt.Errorf("squid is not installed (apt-get install squid), or run with -peers=false")
	}
	port := freePort()
	conf := filepath.Join(dir, "squid.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`http_port 127.0.0.1:%d
acl localnet src 127.0.0.1/32
acl SSL_ports port 1-65535
acl CONNECT method CONNECT
http_access allow localnet
http_access deny all
cache deny all
cache_mem 8 MB
access_log stdio:/dev/null
cache_log /dev/null
cache_store_log none
pid_filename none
max_filedescriptors 20000
workers 1
shutdown_lifetime 0 seconds
forwarded_for delete
via off
client_persistent_connections on
server_persistent_connections on
`, port)), 0o644)
	log, err := os.Create(filepath.Join(dir, "squid.log"))
	if err != nil {
		return nil, err
	}
	return startProc("squid", fmt.Sprintf("127.0.0.1:%d", port), log, bin, "-N", "-f", conf)
}

// tinyproxy 1.11: every client on loopback allowed, CONNECT to any port.
func startTinyproxy(dir string) (*target, error) {
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		return nil, fmt.Errorf("tinyproxy is not installed (apt-get install tinyproxy), or run with -peers=false")
	}
	port := freePort()
	conf := filepath.Join(dir, "tinyproxy.conf")
	user := ""
	if os.Geteuid() == 0 {
		user = "User nobody\nGroup nogroup\n"
	}
	os.WriteFile(conf, []byte(fmt.Sprintf(`%sPort %d
Listen 127.0.0.1
Timeout 600
MaxClients 20000
Allow 127.0.0.1
LogLevel Critical
LogFile "/dev/null"
DisableViaHeader Yes
`, user, port)), 0o644)
	log, err := os.Create(filepath.Join(dir, "tinyproxy.log"))
	if err != nil {
		return nil, err
	}
	return startProc("tinyproxy", fmt.Sprintf("127.0.0.1:%d", port), log, bin, "-d", "-c", conf)
}

// cpuTime returns a process's user plus system CPU time, children
// included (Squid's helpers), from /proc/PID/stat.
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces), from 3 on.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime (fields 14-17)
		v, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// rss returns a process's resident set size in bytes.
func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

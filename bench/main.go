// Command bench measures Airlock side by side with no proxy, Squid and
// tinyproxy, on loopback, in one run: HTTP and HTTPS keep-alive requests,
// a new CONNECT tunnel and TLS handshake per request, intercepted HTTPS
// with credential injection, bulk throughput through one and four
// tunnels, idle tunnels held open (proxy memory per tunnel) and DNS
// queries. Runs are interleaved (every target in turn, round after
// round) so that drift of the machine hits all alike.
//
//	go run ./bench                      # everything (needs squid and tinyproxy)
//	go run ./bench -peers=false -quick  # Airlock and direct, short runs
//
// It prints Markdown tables; docs/BENCHMARKS.md holds a run and says what
// limits each figure.
package main

import (
	"bufio"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type scenario struct {
	name, title string
	targets     func(all []*target) []*target
	run         func(t *target) sample
	kind        string // "rps", "bulk", "idle", "dns"
}

// upstreamEnv makes the bench binary (or its test binary) serve the
// upstream instead: the harness starts itself again with it set.
const upstreamEnv = "AIRLOCK_BENCH_UPSTREAM"

func main() {
	if dir := os.Getenv(upstreamEnv); dir != "" {
		if err := serveUpstream(dir); err != nil {
			fmt.Fprintln(os.Stderr, "bench upstream:", err)
			os.Exit(1)
		}
		return
	}
	duration := flag.Duration("duration", 5*time.Second, "length of each measured run")
	rounds := flag.Int("rounds", 3, "runs of each scenario per target, interleaved")
	conc := flag.Int("c", 32, "concurrent clients for request scenarios")
	tunnels := flag.Int("tunnels", 9000, "idle tunnels to hold at once")
	bulkBytes := flag.Int64("bulk-bytes", 256<<20, "bytes per bulk download")
	peers := flag.Bool("peers", true, "also measure Squid and tinyproxy (must be installed)")
	only := flag.String("scenarios", "", "comma-separated scenario names to run (default: all)")
	airlockBin := flag.String("airlock", "", "airlock binary (default: build ./cmd/airlock)")
	quick := flag.Bool("quick", false, "short runs: 1s, one round, 200 tunnels")
	flag.Parse()
	if *quick {
		*duration, *rounds, *tunnels, *bulkBytes = time.Second, 1, 200, 32<<20
	}
	if err := run(os.Stdout, *duration, *rounds, *conc, *tunnels, *bulkBytes, *peers, *only, *airlockBin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run measures every scenario (or those named in only) and writes the
// Markdown tables to w.
func run(w io.Writer, d time.Duration, rounds, conc, tunnels int, bulkBytes int64, peers bool, only, airlockBin string) error {
	// Each idle tunnel takes a descriptor here, two in the proxy and one
	// in the upstream: raise the soft limit to the hard one (children
	// inherit it).
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	dir, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: working directory (logs, configs):", dir)

	if airlockBin == "" {
		airlockBin = filepath.Join(dir, "airlock")
		build := exec.Command("go", "build", "-trimpath", "-o", airlockBin, "github.com/airlockhq/airlock/cmd/airlock")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	upCmd := exec.Command(self)
	upCmd.Env = append(os.Environ(), upstreamEnv+"="+dir)
	upOut, _ := upCmd.StdoutPipe()
	upCmd.Stderr = os.Stderr
	if err := upCmd.Start(); err != nil {
		return err
	}
	defer upCmd.Process.Kill()
	var up upstreamPorts
	line, err := bufio.NewReader(upOut).ReadString('\n')
	if _, serr := fmt.Sscan(line, &up.http, &up.https, &up.dns); err != nil || serr != nil {
		return fmt.Errorf("upstream did not start: %q %v", line, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "upstream-ca.pem"))
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)

	direct := &target{name: "direct"}
	al, alDNS, err := startAirlock(airlockBin, dir, up, false)
	if err != nil {
		return err
	}
	defer al.stop()
	all := []*target{direct, al}
	if peers {
		sq, err := startSquid(dir)
		if err != nil {
			return err
		}
		defer sq.stop()
		tp, err := startTinyproxy(dir)
		if err != nil {
			return err
		}
		defer tp.stop()
		all = append(all, sq, tp)
	}
	var ai *target
	interceptRoots := roots
	needIntercept := only == "" || strings.Contains(only, "intercept")
	if needIntercept {
		if ai, _, err = startAirlock(airlockBin, dir, up, true); err != nil {
			return err
		}
		defer ai.stop()
		exp, err := exec.Command(airlockBin, "ca", "export", "--state-dir", filepath.Join(dir, "airlock-intercept-state")).Output()
		if err != nil {
			return fmt.Errorf("airlock ca export: %w", err)
		}
		interceptRoots = roots.Clone()
		interceptRoots.AppendCertsFromPEM(exp)
	}

	stats := &http.Client{}
	upConns := func() int64 {
		resp, err := stats.Get(fmt.Sprintf("http://127.0.0.1:%d/stats", up.http))
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		n, _ := strconv.ParseInt(string(b), 10, 64)
		return n
	}
	upConns() // the stats client's own connection, once
	measure := func(t *target) func() func(*sample) {
		return func() func(*sample) {
			cpu0, c0 := cpuTime(t.pid()), upConns()
			return func(s *sample) {
				s.cpu = cpuTime(t.pid()) - cpu0
				s.upConns = upConns() - c0
			}
		}
	}
	httpURL := fmt.Sprintf("http://127.0.0.1:%d/1k", up.http)
	httpsURL := fmt.Sprintf("https://127.0.0.1:%d/1k", up.https)
	bulkURL := fmt.Sprintf("https://127.0.0.1:%d/stream?n=%d", up.https, bulkBytes)
	everyone := func(all []*target) []*target { return all }
	scenarios := []scenario{
		{name: "http", title: fmt.Sprintf("HTTP keep-alive GET of 1 KiB, %d clients", conc), kind: "rps", targets: everyone,
			run: func(t *target) sample { return loadHTTP(client(t, roots, conc, true), httpURL, conc, d, measure(t)) }},
		{name: "https", title: fmt.Sprintf("HTTPS keep-alive GET of 1 KiB through a CONNECT tunnel, %d clients", conc), kind: "rps", targets: everyone,
			run: func(t *target) sample { return loadHTTP(client(t, roots, conc, true), httpsURL, conc, d, measure(t)) }},
		{name: "newtunnel", title: fmt.Sprintf("HTTPS GET of 1 KiB with a new CONNECT tunnel and TLS handshake each, %d clients", conc), kind: "rps", targets: everyone,
			run: func(t *target) sample { return loadHTTP(client(t, roots, conc, false), httpsURL, conc, d, measure(t)) }},
		{name: "intercept", title: fmt.Sprintf("HTTPS keep-alive GET of 1 KiB, intercepted with a credential injected (Airlock only), %d clients", conc), kind: "rps",
			targets: func([]*target) []*target { return []*target{direct, ai} },
			run: func(t *target) sample {
				return loadHTTP(client(t, interceptRoots, conc, true), httpsURL, conc, d, measure(t))
			}},
		{name: "bulk1", title: "Bulk HTTPS download through one tunnel", kind: "bulk", targets: everyone,
			run: func(t *target) sample { return loadHTTP(client(t, roots, 1, true), bulkURL, 1, d, measure(t)) }},
		{name: "bulk4", title: "Bulk HTTPS download through four tunnels at once", kind: "bulk", targets: everyone,
			run: func(t *target) sample { return loadHTTP(client(t, roots, 4, true), bulkURL, 4, d, measure(t)) }},
		{name: "idle", title: fmt.Sprintf("%d idle tunnels held at once (TLS handshake done)", tunnels), kind: "idle", targets: everyone,
			run: func(t *target) sample { return holdTunnels(t, up.https, tunnels, roots) }},
		{name: "dns-cached", title: fmt.Sprintf("DNS A queries answered from the cache (Airlock only), %d clients", conc), kind: "dns",
			targets: func([]*target) []*target { return []*target{al} },
			run: func(t *target) sample {
				return loadDNS(fmt.Sprintf("127.0.0.1:%d", alDNS), conc, d, false, measure(t))
			}},
		{name: "dns-forwarded", title: fmt.Sprintf("DNS A queries for new names, forwarded upstream (Airlock only), %d clients", conc), kind: "dns",
			targets: func([]*target) []*target { return []*target{al} },
			run: func(t *target) sample {
				return loadDNS(fmt.Sprintf("127.0.0.1:%d", alDNS), conc, d, true, measure(t))
			}},
	}
	if only != "" {
		want := strings.Split(only, ",")
		scenarios = slices.DeleteFunc(scenarios, func(s scenario) bool { return !slices.Contains(want, s.name) })
		if len(scenarios) == 0 {
			return errors.New("-scenarios names none of: http, https, newtunnel, intercept, bulk1, bulk4, idle, dns-cached, dns-forwarded")
		}
	}

	fmt.Fprintf(w, "# Airlock benchmarks\n\n%s, %d cores, %s; %s per run, %d rounds interleaved.\n",
		cpuModel(), runtime.NumCPU(), runtime.Version(), d, rounds)
	for _, sc := range scenarios {
		ts := sc.targets(all)
		res := map[string][]sample{}
		for r := range rounds {
			for i := range ts {
				t := ts[(i+r)%len(ts)] // rotate who goes first
				fmt.Fprintf(os.Stderr, "bench: %s round %d: %s\n", sc.name, r+1, t.name)
				res[t.name] = append(res[t.name], sc.run(t))
				time.Sleep(200 * time.Millisecond)
			}
		}
		report(w, sc, ts, res)
	}
	return nil
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return runtime.GOARCH
}

// summary is one target's figures for one scenario, over its rounds.
type summary struct {
	rate, mbps        float64 // median over rounds
	p50, p90, p99     time.Duration
	cpuPer10k         float64 // proxy CPU seconds per 10,000 requests
	upPerReq          float64
	errors            int64
	perTunnel, tunnel int64
}

func summarize(ss []sample) summary {
	var out summary
	var rates, mbps []float64
	var lat []time.Duration
	var reqs int64
	var cpu time.Duration
	var up int64
	for _, s := range ss {
		if s.elapsed > 0 {
			rates = append(rates, float64(s.requests)/s.elapsed.Seconds())
			mbps = append(mbps, float64(s.bytes)/s.elapsed.Seconds()/1e6)
		}
		lat = append(lat, s.lat...)
		reqs += s.requests
		cpu += s.cpu
		up += s.upConns
		out.errors += s.errors
		out.perTunnel = max(out.perTunnel, s.perTunnel)
		out.tunnel = max(out.tunnel, s.tunnels)
	}
	out.rate, out.mbps = median(rates), median(mbps)
	lat = sortLat(lat)
	out.p50, out.p90, out.p99 = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99)
	if reqs > 0 {
		out.cpuPer10k = cpu.Seconds() / float64(reqs) * 10000
		out.upPerReq = float64(up) / float64(reqs)
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func report(w io.Writer, sc scenario, ts []*target, res map[string][]sample) {
	sums := map[string]summary{}
	for _, t := range ts {
		sums[t.name] = summarize(res[t.name])
	}
	value := func(s summary) float64 {
		if sc.kind == "bulk" {
			return s.mbps
		}
		return s.rate
	}
	best := 0.0
	for _, p := range []string{"squid", "tinyproxy"} {
		if s, ok := sums[p]; ok {
			best = max(best, value(s))
		}
	}
	ratio := func(v, of float64) string {
		if of == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", v/of)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }
	fmt.Fprintf(w, "\n## %s (`%s`)\n\n", sc.title, sc.name)
	switch sc.kind {
	case "idle":
		fmt.Fprintln(w, "| target | tunnels held | failed | proxy RSS per tunnel |\n|---|---|---|---|")
		for _, t := range ts {
			s := sums[t.name]
			per := "-"
			if t.addr != "" {
				per = fmt.Sprintf("%.1f KiB", float64(s.perTunnel)/1024)
			}
			fmt.Fprintf(w, "| %s | %d | %d | %s |\n", t.name, s.tunnel, s.errors, per)
		}
		return
	case "bulk":
		fmt.Fprintln(w, "| target | MB/s | vs direct | vs best peer | proxy CPU s per GB | errors |\n|---|---|---|---|---|---|")
	default:
		fmt.Fprintln(w, "| target | req/s | p50 ms | p90 ms | p99 ms | proxy CPU s / 10k req | upstream conns / req | vs direct | vs best peer | errors |\n|---|---|---|---|---|---|---|---|---|---|")
	}
	d := value(sums["direct"])
	for _, t := range ts {
		s := sums[t.name]
		v := value(s)
		if sc.kind == "bulk" {
			var cpuPerGB float64
			if total := totalBytes(res[t.name]); total > 0 {
				cpuPerGB = totalCPU(res[t.name]).Seconds() / (float64(total) / 1e9)
			}
			fmt.Fprintf(w, "| %s | %.0f | %s | %s | %.2f | %d |\n", t.name, v, ratio(v, d), ratio(v, best), cpuPerGB, s.errors)
			continue
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %.2f | %.3f | %s | %s | %d |\n", t.name, v, ms(s.p50), ms(s.p90), ms(s.p99),
			s.cpuPer10k, s.upPerReq, ratio(v, d), ratio(v, best), s.errors)
	}
}

func totalBytes(ss []sample) (n int64) {
	for _, s := range ss {
		n += s.bytes
	}
	return n
}

func totalCPU(ss []sample) (d time.Duration) {
	for _, s := range ss {
		d += s.cpu
	}
	return d
}

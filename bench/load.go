package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// sample is what one run of one scenario through one target measured.
type sample struct {
	requests, errors int64
	bytes            int64
	elapsed          time.Duration
	lat              []time.Duration
	cpu              time.Duration // the proxy's CPU time during the run
	upConns          int64         // upstream connections accepted during the run
	perTunnel        int64         // idle tunnels: proxy RSS bytes per tunnel
	tunnels          int64         // idle tunnels held at once
}

// client returns an HTTP client through t (direct when t.addr is empty)
// that trusts roots, with an idle pool sized for conc.
func client(t *target, roots *x509.CertPool, conc int, keepAlive bool) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots},
		MaxIdleConns:        conc * 2,
		MaxIdleConnsPerHost: conc * 2,
		DisableKeepAlives:   !keepAlive,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	if t.addr != "" {
		u, _ := url.Parse("http://" + t.addr)
		tr.Proxy = http.ProxyURL(u)
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// loadHTTP runs conc workers that GET rawURL back to back for d, after a
// warm-up of a second, and records each request's latency.
func loadHTTP(c *http.Client, rawURL string, conc int, d time.Duration, onRun func() func(*sample)) sample {
	get := func() (int64, error) {
		resp, err := c.Get(rawURL)
		if err != nil {
			return 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		return n, err
	}
	warm := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(warm) {
				get()
			}
		}()
	}
	wg.Wait()

	s := measure(conc, d, onRun, func() func() (int64, error) { return get })
	c.CloseIdleConnections()
	return s
}

// measure runs conc workers for d, each doing op (made once per worker by
// newOp; nil: the worker could not start) back to back, and records each
// op's latency and bytes; onRun is called when measuring starts, and what
// it returns when it ends.
func measure(conc int, d time.Duration, onRun func() func(*sample), newOp func() func() (int64, error)) sample {
	finish := onRun()
	var s sample
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := newOp()
			if op == nil {
				return
			}
			var lat []time.Duration
			var n, errs, bytes int64
			for time.Now().Before(stop) {
				t0 := time.Now()
				b, err := op()
				if err != nil {
					errs++
					continue
				}
				lat = append(lat, time.Since(t0))
				n++
				bytes += b
			}
			mu.Lock()
			s.requests += n
			s.errors += errs
			s.bytes += bytes
			s.lat = append(s.lat, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	s.elapsed = time.Since(start)
	finish(&s)
	return s
}

// loadDNS runs conc workers that query the resolver at addr for d: the
// same name (answered from the cache) or a new name each time
// (forwarded).
func loadDNS(addr string, conc int, d time.Duration, fresh bool, onRun func() func(*sample)) sample {
	var seq atomic.Int64
	var conns []net.Conn
	var mu sync.Mutex
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	return measure(conc, d, onRun, func() func() (int64, error) {
		c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
		conn, err := c.Dial(addr)
		if err != nil {
			return nil
		}
		mu.Lock()
		conns = append(conns, conn)
		mu.Unlock()
		return func() (int64, error) {
			name := "bench.test."
			if fresh {
				name = "n" + strconv.FormatInt(seq.Add(1), 10) + ".bench.test."
			}
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeA)
			r, _, err := c.ExchangeWithConn(m, conn)
			if err == nil && r.Rcode != dns.RcodeSuccess {
				err = fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
			}
			return 0, err
		}
	})
}

// holdTunnels opens n tunnels through t to the upstream's HTTPS port,
// each with its TLS handshake done, and returns the proxy's RSS growth per
// tunnel once all are open and idle, and how many opened.
func holdTunnels(t *target, httpsPort, n int, roots *x509.CertPool) sample {
	pid := t.pid()
	before := rss(pid)
	conns := make([]net.Conn, n)
	var opened, failed atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := openTunnel(t, httpsPort, roots)
			if err != nil {
				failed.Add(1)
				return
			}
			conns[i] = c
			opened.Add(1)
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second) // let the proxies settle
	after := rss(pid)
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	s := sample{tunnels: opened.Load(), errors: failed.Load()}
	if s.tunnels > 0 && pid != 0 {
		s.perTunnel = (after - before) / s.tunnels
	}
	return s
}

func openTunnel(t *target, httpsPort int, roots *x509.CertPool) (net.Conn, error) {
	target := fmt.Sprintf("127.0.0.1:%d", httpsPort)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var d net.Dialer
	if t.addr == "" {
		raw, err := d.DialContext(ctx, "tcp", target)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return tc, nil
	}
	raw, err := d.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	raw.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(raw, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(raw)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		raw.Close()
		return nil, fmt.Errorf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	raw.SetDeadline(time.Time{})
	return tc, nil
}

// percentile returns the p-th percentile (0..100) of sorted latencies.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

func sortLat(l []time.Duration) []time.Duration {
	l = slices.Clone(l)
	slices.Sort(l)
	return l
}

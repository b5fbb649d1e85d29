package dnsfilter

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// benchQueries sends queries for name(i) from parallel UDP clients and
// reports queries per second. Client and upstream run in the same
// process, so the figures include their work too.
func benchQueries(b *testing.B, name func(i int64) string, forward bool) {
	var up *upstream
	if forward {
		up = newUpstream(b, "api.allowed.test. 300 IN A 203.0.113.7")
	}
	addr := startFilter(b, testPolicy+`dns:
  exfil: {qps: 1000000, burst: 1000000, max_new_names: 100000000, max_new_bytes: 1000000000}
`, up)
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
		conn, err := c.Dial(addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close()
		m := new(dns.Msg)
		for pb.Next() {
			m.SetQuestion(name(n.Add(1)), dns.TypeA)
			if _, _, err := c.ExchangeWithConn(m, conn); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "queries/s")
}

func same(name string) func(int64) string { return func(int64) string { return name } }

// Refused locally (nothing upstream).
func BenchmarkRefusedQuery(b *testing.B) { benchQueries(b, same("evil.test."), false) }

// Answered from the cache (the first query fills it).
func BenchmarkCachedQuery(b *testing.B) { benchQueries(b, same("api.allowed.test."), true) }

// A new name each time: forwarded to the loopback upstream.
func BenchmarkForwardedQuery(b *testing.B) {
	benchQueries(b, func(i int64) string { return fmt.Sprintf("h%d.wild.test.", i) }, true)
}

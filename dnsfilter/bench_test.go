package dnsfilter

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

func benchQueries(b *testing.B, name string, forward bool) {
	var up *upstream
	if forward {
		up = newUpstream(b, "api.allowed.test. 60 IN A 203.0.113.7")
	}
	addr := startFilter(b, testPolicy+"dns:\n  exfil: {qps: 1000000, burst: 1000000}\n", up)
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
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
		for pb.Next() {
			if _, _, err := c.ExchangeWithConn(m, conn); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "queries/s")
}

// Queries answered without asking anybody (a refused name), and queries
// forwarded to a loopback upstream. Client and upstream run in the same
// process, so the figures include them.
func BenchmarkRefusedQuery(b *testing.B)   { benchQueries(b, "evil.test.", false) }
func BenchmarkForwardedQuery(b *testing.B) { benchQueries(b, "api.allowed.test.", true) }

package dnsfilter

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

var cacheT0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// answerMsg is an upstream reply to q with rcode and records (zone file
// syntax; SOA records go to the authority section), with an OPT record.
func answerMsg(t testing.TB, q dns.Question, rcode int, records ...string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Qtype)
	m.Response = true
	m.Rcode = rcode
	for _, r := range records {
		rr, err := dns.NewRR(r)
		if err != nil {
			t.Fatalf("%q: %v", r, err)
		}
		if rr.Header().Rrtype == dns.TypeSOA {
			m.Ns = append(m.Ns, rr)
		} else {
			m.Answer = append(m.Answer, rr)
		}
	}
	m.SetEdns0(MaxUDPSize, false)
	return m
}

func qA(name string) dns.Question {
	return dns.Question{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}
}

// fetchOnce is a fetch returning m that fails the test if called twice.
func fetchOnce(t *testing.T, m *dns.Msg) func() (*dns.Msg, error) {
	var n atomic.Int32
	return func() (*dns.Msg, error) {
		if n.Add(1) > 1 {
			t.Error("fetch called again")
		}
		return m, nil
	}
}

func resolve(t *testing.T, c *Cache, q dns.Question, now time.Time, m *dns.Msg) (*dns.Msg, bool) {
	t.Helper()
	r, fromCache, err := c.Resolve(q, now, func() (*dns.Msg, error) { return m, nil })
	if err != nil {
		t.Fatal(err)
	}
	return r, fromCache
}

func ttls(m *dns.Msg) []uint32 {
	var out []uint32
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			out = append(out, rr.Header().Ttl)
		}
	}
	return out
}

func equalTTLs(t *testing.T, m *dns.Msg, want ...uint32) {
	t.Helper()
	got := ttls(m)
	if len(got) != len(want) {
		t.Fatalf("TTLs %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("TTLs %v, want %v", got, want)
		}
	}
}

func TestCacheTTLCountdown(t *testing.T) {
	c := NewCache(0, time.Second, 0)
	q := qA("www.Example.com.")
	up := answerMsg(t, q, dns.RcodeSuccess,
		"www.example.com. 300 IN CNAME edge.example.net.",
		"edge.example.net. 60 IN A 192.0.2.1")
	r, fromCache, err := c.Resolve(q, cacheT0, fetchOnce(t, up))
	if err != nil || fromCache {
		t.Fatalf("first Resolve: fromCache %v, err %v", fromCache, err)
	}
	equalTTLs(t, r, 300, 60)
	if r.IsEdns0() != nil {
		t.Error("the answer kept its OPT record")
	}
	if g := c.Get(q, cacheT0.Add(-time.Second)); g == nil {
		t.Error("clock went backwards: no answer")
	} else {
		equalTTLs(t, g, 300, 60)
	}

	// Other spellings of the same question hit the same entry.
	for _, name := range []string{"www.example.com.", "WWW.EXAMPLE.COM.", "www.example.com"} {
		g := c.Get(qA(name), cacheT0.Add(10500*time.Millisecond))
		if g == nil {
			t.Fatalf("%s: not cached", name)
		}
		equalTTLs(t, g, 290, 50)
	}
	if g := c.Get(dns.Question{Name: q.Name, Qtype: dns.TypeAAAA, Qclass: dns.ClassINET}, cacheT0); g != nil {
		t.Error("AAAA answered from the A entry")
	}
	if g := c.Get(dns.Question{Name: q.Name, Qtype: dns.TypeA, Qclass: dns.ClassCHAOS}, cacheT0); g != nil {
		t.Error("class CH answered from the IN entry")
	}
	r, fromCache, err = c.Resolve(q, cacheT0.Add(59*time.Second), fetchOnce(t, nil))
	if err != nil || !fromCache {
		t.Fatalf("Resolve at 59s: fromCache %v, err %v", fromCache, err)
	}
	equalTTLs(t, r, 241, 1)
}

func TestCacheExpiry(t *testing.T) {
	c := NewCache(0, time.Second, 0)
	q := qA("a.example.")
	resolve(t, c, q, cacheT0, answerMsg(t, q, dns.RcodeSuccess, "a.example. 30 IN A 192.0.2.1"))
	if c.Get(q, cacheT0.Add(30*time.Second-time.Nanosecond)) == nil {
		t.Fatal("expired early")
	}
	if c.Get(q, cacheT0.Add(30*time.Second)) != nil {
		t.Fatal("still cached after its TTL")
	}
	up := answerMsg(t, q, dns.RcodeSuccess, "a.example. 30 IN A 192.0.2.2")
	r, fromCache := resolve(t, c, q, cacheT0.Add(31*time.Second), up)
	if fromCache || r.Answer[0].(*dns.A).A.String() != "192.0.2.2" {
		t.Fatalf("expired entry served: fromCache %v, %v", fromCache, r.Answer)
	}
	if g := c.Get(q, cacheT0.Add(32*time.Second)); g == nil || g.Answer[0].(*dns.A).A.String() != "192.0.2.2" {
		t.Fatalf("refetched answer not cached: %v", g)
	}
}

func TestCacheClamp(t *testing.T) {
	c := NewCache(0, 5*time.Second, time.Minute)
	zero, long := qA("zero.example."), qA("long.example.")
	resolve(t, c, zero, cacheT0, answerMsg(t, zero, dns.RcodeSuccess, "zero.example. 0 IN A 192.0.2.1"))
	resolve(t, c, long, cacheT0, answerMsg(t, long, dns.RcodeSuccess, "long.example. 86400 IN A 192.0.2.1"))

	if g := c.Get(zero, cacheT0.Add(4*time.Second)); g == nil {
		t.Error("TTL 0 not cached for minTTL")
	} else {
		equalTTLs(t, g, 0) // never raised, never below zero
	}
	if c.Get(zero, cacheT0.Add(5*time.Second)) != nil {
		t.Error("TTL 0 cached beyond minTTL")
	}
	if g := c.Get(long, cacheT0); g == nil {
		t.Error("long TTL not cached")
	} else {
		equalTTLs(t, g, 60) // lowered to maxTTL
	}
	if g := c.Get(long, cacheT0.Add(59*time.Second)); g == nil {
		t.Error("long TTL expired before maxTTL")
	} else {
		equalTTLs(t, g, 1)
	}
	if c.Get(long, cacheT0.Add(time.Minute)) != nil {
		t.Error("long TTL cached beyond maxTTL")
	}

	// Defaults: 5s and 1h.
	d := NewCache(0, 0, 0)
	resolve(t, d, zero, cacheT0, answerMsg(t, zero, dns.RcodeSuccess, "zero.example. 0 IN A 192.0.2.1"))
	resolve(t, d, long, cacheT0, answerMsg(t, long, dns.RcodeSuccess, "long.example. 86400 IN A 192.0.2.1"))
	if d.Get(zero, cacheT0.Add(DefaultMinTTL-time.Nanosecond)) == nil || d.Get(zero, cacheT0.Add(DefaultMinTTL)) != nil {
		t.Error("default minTTL is not 5s")
	}
	if d.Get(long, cacheT0.Add(DefaultMaxTTL-time.Nanosecond)) == nil || d.Get(long, cacheT0.Add(DefaultMaxTTL)) != nil {
		t.Error("default maxTTL is not 1h")
	}
}

func TestCacheNegative(t *testing.T) {
	c := NewCache(0, time.Second, 0)
	nx := qA("nx.example.")
	resolve(t, c, nx, cacheT0, answerMsg(t, nx, dns.RcodeNameError,
		"example. 3600 IN SOA ns.example. hostmaster.example. 1 7200 900 1209600 120"))
	g := c.Get(nx, cacheT0.Add(119*time.Second))
	if g == nil || g.Rcode != dns.RcodeNameError {
		t.Fatalf("NXDOMAIN not cached for the SOA minimum: %v", g)
	}
	equalTTLs(t, g, 3600-119)
	if c.Get(nx, cacheT0.Add(120*time.Second)) != nil {
		t.Error("NXDOMAIN cached beyond the SOA minimum")
	}

	// NODATA, with the SOA's own TTL below its minimum (RFC 2308 §3).
	nodata := dns.Question{Name: "a.example.", Qtype: dns.TypeAAAA, Qclass: dns.ClassINET}
	resolve(t, c, nodata, cacheT0, answerMsg(t, nodata, dns.RcodeSuccess,
		"example. 30 IN SOA ns.example. hostmaster.example. 1 7200 900 1209600 600"))
	if c.Get(nodata, cacheT0.Add(29*time.Second)) == nil || c.Get(nodata, cacheT0.Add(30*time.Second)) != nil {
		t.Error("NODATA not cached for the SOA's TTL")
	}

	// No SOA: minTTL.
	bare := qA("bare.example.")
	resolve(t, c, bare, cacheT0, answerMsg(t, bare, dns.RcodeNameError))
	if c.Get(bare, cacheT0) == nil || c.Get(bare, cacheT0.Add(time.Second)) != nil {
		t.Error("NXDOMAIN without SOA not cached for minTTL")
	}
}

func TestCacheNotCached(t *testing.T) {
	c := NewCache(0, time.Second, 0)
	q := qA("a.example.")
	servfail := answerMsg(t, q, dns.RcodeServerFailure)
	refused := answerMsg(t, q, dns.RcodeRefused)
	tc := answerMsg(t, q, dns.RcodeSuccess, "a.example. 300 IN A 192.0.2.1")
	tc.Truncated = true
	for name, m := range map[string]*dns.Msg{"SERVFAIL": servfail, "REFUSED": refused, "truncated": tc} {
		r, fromCache := resolve(t, c, q, cacheT0, m)
		if fromCache || r == nil || r.Rcode != m.Rcode || r == m {
			t.Errorf("%s: got %v (fromCache %v), want a copy of the fetched answer", name, r, fromCache)
		}
		if c.Get(q, cacheT0) != nil {
			t.Errorf("%s was cached", name)
		}
	}

	boom := errors.New("boom")
	var calls int
	failing := func() (*dns.Msg, error) { calls++; return nil, boom }
	for range 2 {
		if r, _, err := c.Resolve(q, cacheT0, failing); !errors.Is(err, boom) || r != nil {
			t.Fatalf("Resolve = %v, %v; want the fetch error", r, err)
		}
	}
	if calls != 2 {
		t.Errorf("fetch called %d times, want 2: an error was cached", calls)
	}
}

func TestCacheSingleflight(t *testing.T) {
	c := NewCache(0, time.Second, 0)
	q := qA("a.example.")
	up := answerMsg(t, q, dns.RcodeSuccess, "a.example. 300 IN A 192.0.2.1")
	var calls atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	fetch := func() (*dns.Msg, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-release
		return up, nil
	}

	const n = 50
	var wg sync.WaitGroup
	answers := make([]*dns.Msg, n)
	errs := make([]error, n)
	wg.Go(func() { answers[0], _, errs[0] = c.Resolve(q, cacheT0, fetch) })
	<-started // the first fetch is in flight: the others join it
	for i := 1; i < n; i++ {
		wg.Go(func() { answers[i], _, errs[i] = c.Resolve(qA("A.EXAMPLE."), cacheT0, fetch) })
	}
	time.Sleep(20 * time.Millisecond) // let them block on the flight
	close(release)
	wg.Wait()

	if got := calls.Load(); got != 1 {
		t.Fatalf("fetch called %d times, want 1", got)
	}
	seen := map[*dns.Msg]bool{}
	for i, a := range answers {
		if errs[i] != nil || a == nil || len(a.Answer) != 1 {
			t.Fatalf("caller %d: %v, %v", i, a, errs[i])
		}
		if seen[a] || a == up {
			t.Fatalf("caller %d shares its message", i)
		}
		seen[a] = true
	}
}

func TestCacheCopies(t *testing.T) {
	c := NewCache(0, time.Second, 0)
	q := qA("a.example.")
	up := answerMsg(t, q, dns.RcodeSuccess, "a.example. 300 IN A 192.0.2.1")
	r, _ := resolve(t, c, q, cacheT0, up)
	// Neither the fetched message nor the returned ones are the cache's.
	up.Answer[0].(*dns.A).A[3] = 66
	r.Answer[0].Header().Ttl = 1
	r.Answer[0].(*dns.A).A[3] = 77
	r.Answer = append(r.Answer, r.Answer[0])
	g := c.Get(q, cacheT0)
	g.Answer[0].(*dns.A).A[3] = 88
	g.Rcode = dns.RcodeRefused

	g = c.Get(q, cacheT0)
	if g.Rcode != dns.RcodeSuccess || len(g.Answer) != 1 || g.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("the cache changed with its copies: %v", g)
	}
	equalTTLs(t, g, 300)
}

func TestCacheLRU(t *testing.T) {
	c := NewCache(2, time.Second, 0)
	qs := []dns.Question{qA("a.example."), qA("b.example."), qA("c.example.")}
	for _, q := range qs[:2] {
		resolve(t, c, q, cacheT0, answerMsg(t, q, dns.RcodeSuccess, q.Name+" 300 IN A 192.0.2.1"))
	}
	c.Get(qs[0], cacheT0) // a is now more recent than b
	resolve(t, c, qs[2], cacheT0, answerMsg(t, qs[2], dns.RcodeSuccess, "c.example. 300 IN A 192.0.2.1"))
	if c.Get(qs[1], cacheT0) != nil {
		t.Error("least recently used entry kept")
	}
	if c.Get(qs[0], cacheT0) == nil || c.Get(qs[2], cacheT0) == nil {
		t.Error("recent entries evicted")
	}
	if n := c.entries.Len(); n != 2 {
		t.Errorf("%d entries, want 2", n)
	}
}

func BenchmarkCacheGet(b *testing.B) {
	c := NewCache(0, 0, 0)
	q := qA("www.example.com.")
	up := answerMsg(b, q, dns.RcodeSuccess,
		"www.example.com. 300 IN CNAME edge.example.net.",
		"edge.example.net. 60 IN A 192.0.2.1",
		"edge.example.net. 60 IN A 192.0.2.2")
	if _, _, err := c.Resolve(q, cacheT0, func() (*dns.Msg, error) { return up, nil }); err != nil {
		b.Fatal(err)
	}
	now := cacheT0.Add(10 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if c.Get(q, now) == nil {
			b.Fatal("miss")
		}
	}
}

func BenchmarkCacheGetParallel(b *testing.B) {
	c := NewCache(0, 0, 0)
	q := qA("www.example.com.")
	up := answerMsg(b, q, dns.RcodeSuccess, "www.example.com. 300 IN A 192.0.2.1")
	if _, _, err := c.Resolve(q, cacheT0, func() (*dns.Msg, error) { return up, nil }); err != nil {
		b.Fatal(err)
	}
	now := cacheT0.Add(10 * time.Second)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if c.Get(q, now) == nil {
				b.Fatal("miss")
			}
		}
	})
}

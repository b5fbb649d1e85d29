package dnsfilter

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/policy"
)

// upstream is a DNS server on loopback answering from a table and
// recording every query it gets.
type upstream struct {
	addr    string
	mu      sync.Mutex
	queries []*dns.Msg
	answers map[string][]dns.RR // "name. TYPE" -> records
}

func newUpstream(t testing.TB, records ...string) *upstream {
	t.Helper()
	u := &upstream{answers: map[string][]dns.RR{}}
	for _, r := range records {
		rr, err := dns.NewRR(r)
		if err != nil {
			t.Fatalf("%q: %v", r, err)
		}
		k := strings.ToLower(rr.Header().Name) + " " + dns.TypeToString[rr.Header().Rrtype]
		u.answers[k] = append(u.answers[k], rr)
	}
	pc, ln, err := listenUDPAndTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		u.mu.Lock()
		u.queries = append(u.queries, r.Copy())
		u.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		m.Answer = u.answers[strings.ToLower(q.Name)+" "+dns.TypeToString[q.Qtype]]
		if _, tcp := w.RemoteAddr().(*net.TCPAddr); !tcp {
			size := dns.MinMsgSize
			if o := r.IsEdns0(); o != nil {
				size = int(o.UDPSize())
			}
			m.Truncate(size)
		}
		w.WriteMsg(m)
	})
	us := &dns.Server{PacketConn: pc, Handler: h}
	ts := &dns.Server{Listener: ln, Handler: h}
	go us.ActivateAndServe()
	go ts.ActivateAndServe()
	t.Cleanup(func() { us.Shutdown(); ts.Shutdown() })
	return u
}

func (u *upstream) asked() []*dns.Msg {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*dns.Msg(nil), u.queries...)
}

// startFilter runs a Server for cfgYAML (resolving through up) on
// loopback and returns its address.
func startFilter(t testing.TB, cfgYAML string, up *upstream) string {
	t.Helper()
	return startFilterLog(t, cfgYAML, up, io.Discard)
}

// startFilterLog is startFilter writing audit lines to log.
func startFilterLog(t testing.TB, cfgYAML string, up *upstream, log io.Writer) string {
	t.Helper()
	cfg, err := policy.Parse("t.yaml", []byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	var ups []string
	if up != nil {
		ups = []string{up.addr}
	}
	s, err := New(cfg, Options{Audit: audit.New(log), Upstreams: ups})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx, "127.0.0.1:0", func(u, _ net.Addr) { addr <- u.String() }) }()
	t.Cleanup(cancel)
	select {
	case a := <-addr:
		return a
	case err := <-errc:
		t.Fatalf("Serve: %v", err)
		return ""
	}
}

const testPolicy = `
network:
  allow_cidrs: [203.0.113.7/32]
policies:
  default:
    allow:
      - host: api.allowed.test
      - host: "*.wild.test"
      - host: txt.allowed.test
        dns_types: [TXT]
`

func ask(t *testing.T, addr, name string, qtype uint16, net string, edns bool) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	if edns {
		m.SetEdns0(4096, false)
	}
	c := &dns.Client{Net: net, Timeout: 5 * time.Second, UDPSize: 4096}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return r
}

func ede(m *dns.Msg) (uint16, bool) {
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if e, ok := opt.(*dns.EDNS0_EDE); ok {
				return e.InfoCode, true
			}
		}
	}
	return 0, false
}

func TestAllowedNameIsAnsweredAnyCase(t *testing.T) {
	up := newUpstream(t, "api.allowed.test. 60 IN A 203.0.113.7")
	addr := startFilter(t, testPolicy, up)
	r := ask(t, addr, "API.Allowed.TEST", dns.TypeA, "udp", true)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("%v", r)
	}
	q := up.asked()[0]
	if q.Question[0].Name != "api.allowed.test." {
		t.Errorf("upstream asked for %q, want the lower-cased name", q.Question[0].Name)
	}
}

func TestDeniedNameIsRefusedWithNothingUpstream(t *testing.T) {
	up := newUpstream(t)
	addr := startFilter(t, testPolicy, up)
	for _, name := range []string{"evil.test", "wild.test", "allowed.test"} {
		r := ask(t, addr, name, dns.TypeA, "udp", true)
		if code, ok := ede(r); r.Rcode != dns.RcodeRefused || !ok || code != dns.ExtendedErrorCodeProhibited {
			t.Errorf("%s: rcode %s, EDE %d %v", name, dns.RcodeToString[r.Rcode], code, ok)
		}
	}
	if n := len(up.asked()); n != 0 {
		t.Errorf("denied names reached the upstream %d times", n)
	}
}

func TestAnswersWithBlockedAddressesAreReplaced(t *testing.T) {
	up := newUpstream(t,
		"a.wild.test. 60 IN A 127.0.0.1",
		"b.wild.test. 60 IN A 10.0.0.1",
		"c.wild.test. 60 IN A 169.254.169.254",
		"d.wild.test. 60 IN AAAA ::ffff:10.0.0.1",
		"e.wild.test. 60 IN AAAA 64:ff9b::a00:1",
		"f.wild.test. 60 IN AAAA fd00:ec2::254",
		"mixed.wild.test. 60 IN A 203.0.113.7",
		"mixed.wild.test. 60 IN A 10.0.0.1",
		`hint.wild.test. 60 IN HTTPS 1 . alpn="h2" ipv4hint="10.0.0.1"`,
		"ok.wild.test. 60 IN A 203.0.113.7",
	)
	addr := startFilter(t, testPolicy, up)
	for _, c := range []struct {
		name  string
		qtype uint16
	}{
		{"a.wild.test", dns.TypeA}, {"b.wild.test", dns.TypeA}, {"c.wild.test", dns.TypeA},
		{"d.wild.test", dns.TypeAAAA}, {"e.wild.test", dns.TypeAAAA}, {"f.wild.test", dns.TypeAAAA},
		{"mixed.wild.test", dns.TypeA}, {"hint.wild.test", dns.TypeHTTPS},
	} {
		r := ask(t, addr, c.name, c.qtype, "udp", true)
		code, ok := ede(r)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || !ok || code != dns.ExtendedErrorCodeBlocked {
			t.Errorf("%s: rcode %s, %d answers, EDE %d", c.name, dns.RcodeToString[r.Rcode], len(r.Answer), code)
		}
	}
	if r := ask(t, addr, "ok.wild.test", dns.TypeA, "udp", true); len(r.Answer) != 1 {
		t.Errorf("an allowed public answer was dropped: %v", r)
	}
}

func TestQueryTypes(t *testing.T) {
	up := newUpstream(t, `txt.allowed.test. 60 IN TXT "hello"`, `api.allowed.test. 60 IN TXT "nope"`)
	addr := startFilter(t, testPolicy, up)
	for _, c := range []struct {
		name  string
		qtype uint16
		rcode int
	}{
		{"txt.allowed.test", dns.TypeTXT, dns.RcodeSuccess},
		{"api.allowed.test", dns.TypeTXT, dns.RcodeRefused}, // no dns_types
		{"api.allowed.test", dns.TypeANY, dns.RcodeRefused},
		{"api.allowed.test", dns.TypeAXFR, dns.RcodeRefused},
		{"api.allowed.test", dns.TypeNULL, dns.RcodeRefused},
		{"api.allowed.test", 65280, dns.RcodeRefused}, // private use
	} {
		if c.qtype == dns.TypeAXFR {
			// Zone transfers come over TCP.
			if r := ask(t, addr, c.name, c.qtype, "tcp", true); r.Rcode != c.rcode {
				t.Errorf("%s %d: %s", c.name, c.qtype, dns.RcodeToString[r.Rcode])
			}
			continue
		}
		if r := ask(t, addr, c.name, c.qtype, "udp", true); r.Rcode != c.rcode {
			t.Errorf("%s %s: %s", c.name, dns.TypeToString[c.qtype], dns.RcodeToString[r.Rcode])
		}
	}
}

func TestOpcodesAndEDNSVersions(t *testing.T) {
	addr := startFilter(t, testPolicy, newUpstream(t))
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	m := new(dns.Msg)
	m.SetNotify("api.allowed.test.")
	if r, _, err := c.Exchange(m, addr); err != nil || r.Rcode != dns.RcodeNotImplemented {
		t.Errorf("NOTIFY: %v %v", r, err)
	}
	m = new(dns.Msg)
	m.SetQuestion("api.allowed.test.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().SetVersion(1)
	if r, _, err := c.Exchange(m, addr); err != nil || r.Rcode != dns.RcodeBadVers {
		t.Errorf("EDNS version 1: %v %v", r, err)
	}
}

func TestLargeAnswerIsTruncatedOverUDPAndWholeOverTCP(t *testing.T) {
	var recs []string
	for i := range 60 {
		recs = append(recs, fmt.Sprintf("big.wild.test. 60 IN AAAA 2001:4860:4860::%x", i+1))
	}
	up := newUpstream(t, recs...)
	addr := startFilter(t, testPolicy, up)
	r := ask(t, addr, "big.wild.test", dns.TypeAAAA, "udp", true)
	r.Compress = true // as sent: Len then measures the wire size
	if !r.Truncated || r.Len() > MaxUDPSize {
		t.Errorf("UDP: truncated=%v, %d bytes (client asked for 4096; the cap is %d)", r.Truncated, r.Len(), MaxUDPSize)
	}
	r = ask(t, addr, "big.wild.test", dns.TypeAAAA, "tcp", true)
	if r.Truncated || len(r.Answer) != 60 {
		t.Errorf("TCP: truncated=%v, %d answers", r.Truncated, len(r.Answer))
	}
}

func TestClientOptionsNeverReachTheUpstream(t *testing.T) {
	up := newUpstream(t, "api.allowed.test. 60 IN A 203.0.113.7")
	addr := startFilter(t, testPolicy, up)
	m := new(dns.Msg)
	m.SetQuestion("api.allowed.test.", dns.TypeA)
	m.SetEdns0(4096, true)
	o := m.IsEdns0()
	o.Option = append(o.Option,
		&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.ParseIP("198.51.100.0").To4()},
		&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"},
		&dns.EDNS0_LOCAL{Code: 65001, Data: []byte("exfil")})
	m.Id = 4242
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	if _, _, err := c.Exchange(m, addr); err != nil {
		t.Fatal(err)
	}
	q := up.asked()[0]
	if q.Id == 4242 {
		t.Error("the upstream query reused the client's ID")
	}
	if opt := q.IsEdns0(); opt == nil || len(opt.Option) != 0 || opt.Do() {
		t.Errorf("upstream OPT: %v", opt)
	}
}

func TestSyntheticModeAnswersWithAirlockAndAsksNobody(t *testing.T) {
	addr := startFilter(t, testPolicy+"dns:\n  mode: synthetic\n  answer: [192.0.2.53, \"2001:db8::53\"]\n", nil)
	r := ask(t, addr, "api.allowed.test", dns.TypeA, "udp", true)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.53" {
		t.Errorf("A: %v", r.Answer)
	}
	r = ask(t, addr, "api.allowed.test", dns.TypeAAAA, "udp", true)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.AAAA).AAAA.String() != "2001:db8::53" {
		t.Errorf("AAAA: %v", r.Answer)
	}
	if r := ask(t, addr, "evil.test", dns.TypeA, "udp", true); r.Rcode != dns.RcodeRefused {
		t.Errorf("denied name: %s", dns.RcodeToString[r.Rcode])
	}
}

func TestEncodedLabelsUnderWildcardsAreRefusedBeforeForwarding(t *testing.T) {
	up := newUpstream(t)
	addr := startFilter(t, testPolicy, up)
	base32 := "mzxw6ytboi3dmnbvgu2tsnrwgq4tqmbqgeydcnzygm3tomrtg4ytmobxgq2tcm" // 63 chars
	hex := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f0"      // 60 chars
	for _, name := range []string{base32 + ".wild.test", hex + ".wild.test"} {
		if r := ask(t, addr, name, dns.TypeA, "udp", true); r.Rcode != dns.RcodeRefused {
			t.Errorf("%s: %s", name, dns.RcodeToString[r.Rcode])
		}
	}
	if n := len(up.asked()); n != 0 {
		t.Errorf("encoded labels reached the upstream %d times", n)
	}
}

func TestTheHundredAndFirstNewNameIsRefused(t *testing.T) {
	up := newUpstream(t)
	// A rate limit high enough not to be what refuses.
	var log syncBuffer
	addr := startFilterLog(t, testPolicy+"dns:\n  exfil: {qps: 10000, burst: 10000}\n", up, &log)
	for i := 1; i <= 100; i++ {
		if r := ask(t, addr, fmt.Sprintf("host%d.wild.test", i), dns.TypeA, "udp", true); r.Rcode == dns.RcodeRefused {
			t.Fatalf("name %d refused", i)
		}
	}
	if r := ask(t, addr, "host101.wild.test", dns.TypeA, "udp", true); r.Rcode != dns.RcodeRefused {
		t.Fatalf("the 101st new name: %s", dns.RcodeToString[r.Rcode])
	}
	if r := ask(t, addr, "api.allowed.test", dns.TypeA, "udp", true); r.Rcode == dns.RcodeRefused {
		t.Error("an exact name was refused with the wildcard domain")
	}
	// The audit line follows the answer: give it a moment.
	for i := 0; i < 100 && !strings.Contains(log.String(), "dns_exfiltration"); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	alerts := strings.Count(log.String(), `"alert":"dns_exfiltration"`)
	if alerts != 1 || !strings.Contains(log.String(), `"severity":"high"`) {
		t.Errorf("%d exfiltration alert lines, want 1", alerts)
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRepeatedQueriesAreAnsweredFromTheCache(t *testing.T) {
	up := newUpstream(t, "api.allowed.test. 300 IN A 203.0.113.7")
	addr := startFilter(t, testPolicy, up)
	for range 5 {
		if r := ask(t, addr, "api.allowed.test", dns.TypeA, "udp", true); len(r.Answer) != 1 {
			t.Fatal(r)
		}
	}
	if n := len(up.asked()); n != 1 {
		t.Errorf("upstream asked %d times for 5 queries, want 1", n)
	}
}

// Service labels are the asker's to choose, so they count as carried data
// even in front of an exactly allowed name; escapes are refused outright.
func TestServiceLabelsAndEscapesCannotCarryData(t *testing.T) {
	up := newUpstream(t)
	var log syncBuffer
	addr := startFilterLog(t, testPolicy+"dns:\n  exfil: {qps: 10000, burst: 10000}\n", up, &log)
	for _, name := range []string{
		`_x\.api.allowed.test`,                        // an escaped dot
		`_a\000b._tcp.txt.allowed.test`,               // a NUL byte
		"_0123456789abcdef0123._tcp.txt.allowed.test", // longer than a service name
		"_a._b._c.txt.allowed.test",                   // three service labels
	} {
		if r := ask(t, addr, name, dns.TypeTXT, "udp", true); r.Rcode != dns.RcodeRefused {
			t.Errorf("%s: %s", name, dns.RcodeToString[r.Rcode])
		}
	}
	if n := len(up.asked()); n != 0 {
		t.Fatalf("refused names reached the upstream: %d", n)
	}
	// Many distinct service names under one exact name hit the quota.
	refused := 0
	for i := range 150 {
		r := ask(t, addr, fmt.Sprintf("_s%d._tcp.txt.allowed.test", i), dns.TypeTXT, "udp", true)
		if r.Rcode == dns.RcodeRefused {
			refused++
		}
	}
	if refused == 0 {
		t.Error("150 new service names under one exact name were all answered")
	}
	if r := ask(t, addr, "_https._tcp.txt.allowed.test", dns.TypeTXT, "udp", true); r.Rcode == dns.RcodeRefused && refused == 0 {
		t.Error("an ordinary service name was refused")
	}
}

func TestDeniedNamesAreRateLimitedToo(t *testing.T) {
	var log syncBuffer
	addr := startFilterLog(t, testPolicy+"dns:\n  exfil: {qps: 1, burst: 5}\n", newUpstream(t), &log)
	for range 20 {
		if r := ask(t, addr, "evil.test", dns.TypeA, "udp", true); r.Rcode != dns.RcodeRefused {
			t.Fatalf("%s", dns.RcodeToString[r.Rcode])
		}
	}
	for i := 0; i < 100 && strings.Count(log.String(), "\n") < 20; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	// A burst of 5, then about one a second: most of the 20 are rate
	// limited before the policy is even asked.
	if n := strings.Count(log.String(), `"reason":"rate_limited"`); n < 10 {
		t.Errorf("%d of 20 quick queries for a denied name were rate limited", n)
	}
}

func TestExtendedUpstreamRcodesBecomeServfail(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeBadVers)
		m.SetEdns0(1232, false)
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	defer srv.Shutdown()
	addr := startFilter(t, testPolicy, &upstream{addr: pc.LocalAddr().String()})
	m := new(dns.Msg)
	m.SetQuestion("api.allowed.test.", dns.TypeA) // no EDNS
	r, _, err := (&dns.Client{Net: "udp", Timeout: 5 * time.Second}).Exchange(m, addr)
	if err != nil || r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("%v %v", r, err)
	}
}

func TestReloadChangesWhatIsAnswered(t *testing.T) {
	up := newUpstream(t, "api.allowed.test. 60 IN A 203.0.113.7", "new.allowed.test. 60 IN A 203.0.113.7")
	cfg, err := policy.Parse("t.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, Options{Audit: audit.New(io.Discard), Upstreams: []string{up.addr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	go s.Serve(ctx, "127.0.0.1:0", func(u, _ net.Addr) { addrc <- u.String() })
	addr := <-addrc
	if r := ask(t, addr, "new.allowed.test", dns.TypeA, "udp", true); r.Rcode != dns.RcodeRefused {
		t.Fatalf("before: %s", dns.RcodeToString[r.Rcode])
	}
	next, err := policy.Parse("t.yaml", []byte(strings.Replace(testPolicy, "- host: api.allowed.test", "- host: new.allowed.test", 1)))
	if err != nil {
		t.Fatal(err)
	}
	s.Reload(next)
	if r := ask(t, addr, "new.allowed.test", dns.TypeA, "udp", true); r.Rcode != dns.RcodeSuccess {
		t.Errorf("after: new name %s", dns.RcodeToString[r.Rcode])
	}
	if r := ask(t, addr, "api.allowed.test", dns.TypeA, "udp", true); r.Rcode != dns.RcodeRefused {
		t.Errorf("after: removed name %s", dns.RcodeToString[r.Rcode])
	}
}

func TestReportModeAnswersDeniedNamesButStillFiltersAddresses(t *testing.T) {
	up := newUpstream(t, "other.test. 60 IN A 203.0.113.7", "inner.test. 60 IN A 10.0.0.1")
	var log syncBuffer
	addr := startFilterLog(t, "mode: report\n"+testPolicy, up, &log)
	if r := ask(t, addr, "other.test", dns.TypeA, "udp", true); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("report mode, unlisted name: %v", r)
	}
	if r := ask(t, addr, "inner.test", dns.TypeA, "udp", true); len(r.Answer) != 0 {
		t.Errorf("report mode let an internal address through: %v", r.Answer)
	}
	for i := 0; i < 100 && !strings.Contains(log.String(), "would_deny"); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(log.String(), `"decision":"would_deny"`) {
		t.Errorf("no would_deny line:\n%s", log.String())
	}
}

// A name network.hosts pins is answered with those addresses, as the
// proxy would dial them, and no resolver is asked; a pinned address the
// address rules block is filtered like any answer.
func TestStaticHostsAreAnsweredWithoutAskingUpstream(t *testing.T) {
	up := newUpstream(t, "api.allowed.test. 60 IN A 203.0.113.99")
	addr := startFilter(t, `
network:
  allow_cidrs: [203.0.113.7/32]
  hosts: {api.allowed.test: [203.0.113.7, "2001:4860::8888"], pinned.wild.test: 10.1.2.3}
policies:
  default:
    allow:
      - host: api.allowed.test
      - host: "*.wild.test"
`, up)
	r := ask(t, addr, "api.allowed.test", dns.TypeA, "udp", true)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "203.0.113.7" {
		t.Errorf("A for a pinned name: %v; want network.hosts' 203.0.113.7", r.Answer)
	}
	r = ask(t, addr, "api.allowed.test", dns.TypeAAAA, "udp", true)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.AAAA).AAAA.String() != "2001:4860::8888" {
		t.Errorf("AAAA for a pinned name: %v", r.Answer)
	}
	r = ask(t, addr, "pinned.wild.test", dns.TypeA, "udp", true)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("a pinned name with a blocked address: %s %v; want an empty answer", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if n := len(up.asked()); n != 0 {
		t.Errorf("the upstream was asked %d times for pinned names", n)
	}
}

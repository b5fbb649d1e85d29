package dnsfilter

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	exfilT0      = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	exfilClientA = netip.MustParseAddr("10.0.0.1")
	exfilClientB = netip.MustParseAddr("10.0.0.2")
)

// exfilNoRate is a config whose rate limit never trips, for tests of the
// other checks.
func exfilNoRate(cfg ExfilConfig) ExfilConfig {
	cfg.QPS, cfg.Burst = 1e9, 1<<30
	return cfg
}

// exfilRand is a deterministic source of "encoded data".
func exfilRand(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	s[0] = byte(seed)
	s[1] = byte(seed >> 8)
	return rand.NewChaCha8(s)
}

func exfilBytes(r *rand.ChaCha8, n int) []byte {
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

func exfilBase32Label(r *rand.ChaCha8, n int) string {
	s := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(exfilBytes(r, n)))
	return s[:n]
}

func exfilHexLabel(r *rand.ChaCha8, n int) string {
	return hex.EncodeToString(exfilBytes(r, n))[:n]
}

// exfilBase64Label is base64url as it reaches the resolver: lower-cased.
func exfilBase64Label(r *rand.ChaCha8, n int) string {
	return strings.ToLower(base64.RawURLEncoding.EncodeToString(exfilBytes(r, n)))[:n]
}

func TestExfilDefaults(t *testing.T) {
	got := NewDetector(ExfilConfig{}).cfg
	want := ExfilConfig{
		MaxNameLen: 128, MaxLabelLen: 52, EntropyMinLen: 24, EntropyBits: 3.8,
		Window: 10 * time.Minute, MaxNewNames: 100, MaxNewBytes: 4096, QPS: 50, Burst: 100,
	}
	if got != want {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}
	// Set fields are kept.
	set := ExfilConfig{MaxNameLen: 1, MaxLabelLen: 2, EntropyMinLen: 3, EntropyBits: 4, Window: 5, MaxNewNames: 6, MaxNewBytes: 7, QPS: 8, Burst: 9}
	if got := NewDetector(set).cfg; got != set {
		t.Errorf("explicit config = %+v, want %+v", got, set)
	}
}

func TestExfilPerNameChecks(t *testing.T) {
	r := exfilRand(1)
	b32 := exfilBase32Label(r, 63)
	hex60 := exfilHexLabel(r, 60)
	b64 := exfilBase64Label(r, 52)
	long := strings.Repeat("a", 53)

	tests := []struct {
		desc string
		name string
		want string // reason; "" = allowed
	}{
		// Encoded data.
		{"63-char base32 label", b32 + ".example.com", "encoded_label"},
		{"60-char hex label", hex60 + ".example.com", "encoded_label"},
		{"52-char lower-cased base64url label", b64 + ".example.com", "encoded_label"},
		{"encoded label deeper in the name", "x." + exfilBase32Label(r, 40) + ".api.example.com", "encoded_label"},
		{"24-char hex label (the shortest tested)", "5f3a1c9e2b7d4f6a8c0e1b3d.example.com", "encoded_label"},
		{"32-char hex hash", "a79865eb4cd1a6ab990a45779b4e0b96.example.com", "encoded_label"},

		// Readable long labels pass: words have lower entropy, and in the
		// hyphenated alphabet they do not interleave letters and digits.
		{"readable hyphenated", "this-is-a-long-but-normal-subdomain-name.example.com", ""},
		{"bucket name", "my-company-production-terraform-state-us-east-1.s3.amazonaws.com", ""},
		{"ELB name with digits", "internal-my-load-balancer-1234567890.us-west-2.elb.amazonaws.com", ""},
		{"ELB name, 52-char label", "internal-my-very-long-load-balancer-names-1234567890.us-west-2.elb.amazonaws.com", ""},
		{"preview deploy", "deploy-preview-1234--my-awesome-site.netlify.app", ""},
		{"vercel preview", "my-project-git-feature-add-login-page-acme-corp.vercel.app", ""},
		{"github asset host", "github-production-release-asset-2e65be.s3.amazonaws.com", ""},
		{"k8s-ish", "kubernetes-dashboard-metrics-scraper.example.com", ""},
		{"concatenated words", "internationalizationservice.example.com", ""},
		{"concatenated words 2", "avatarsgithubusercontent.example.com", ""},
		{"concatenated words 3", "thisisalongbutnormalsubdomainname.example.com", ""},
		{"version tag", "prod-api-gateway-v2-us-west-2-abcdef1234.example.com", ""},
		{"UUID label (16 bytes of hex)", "550e8400-e29b-41d4-a716-446655440000.example.com", "encoded_label"},
		{"Lambda function URL id (use an exact rule)", "abcdefghijklmnopqrstuvwxyz234567.lambda-url.us-east-1.on.aws", "encoded_label"},
		{"punycode", "xn--bcher-kva-long-internationalized-name.example.com", ""},
		{"hex-alphabet words", "deadbeefcafebabedeadbeefcafebabe.example.com", ""},

		// Short random-looking labels are below EntropyMinLen: CDN-style
		// hashes pass (the domain quota bounds what they could carry).
		{"cloudfront-ish", "d1a2b3c4.cloudfront.net", ""},
		{"cloudfront distribution", "d111111abcdef8.cloudfront.net", ""},
		{"googlevideo shard", "r3---sn-ab5l6nzr.googlevideo.com", ""},
		{"23-char hex label", "5f3a1c9e2b7d4f6a8c0e1b3.example.com", ""},
		{"23-char base32 label", b32[:23] + ".example.com", ""},

		// Length caps.
		{"label of 52 (the cap)", long[:52] + ".example.com", ""},
		{"label of 53", long + ".example.com", "label_too_long"},
		{"label of 63, low entropy", strings.Repeat("ab", 31) + "a.example.com", "label_too_long"},
		{"name of 128 (the cap)", strings.Repeat("abcdefg.", 14) + strings.Repeat("x", 4) + ".example.com", ""},
		{"name of 129", strings.Repeat("abcdefg.", 14) + strings.Repeat("x", 5) + ".example.com", "name_too_long"},
		{"both caps: label wins", long + "." + strings.Repeat("a.", 40) + "com", "label_too_long"},
		{"encoded wins over caps", b32 + "." + b32 + "." + b32 + ".com", "encoded_label"},

		// Canonicalisation is defensive.
		{"upper case", strings.ToUpper(b32) + ".EXAMPLE.COM.", "encoded_label"},
		{"plain", "api.example.com", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if strings.Contains(tt.desc, "(the cap)") && len(strings.TrimSuffix(tt.name, ".")) > 128 {
				t.Fatalf("bad fixture: len %d", len(tt.name))
			}
			d := NewDetector(exfilNoRate(ExfilConfig{}))
			v := d.Check(exfilClientA, "sb", tt.name, true, exfilT0)
			if v.Reason != tt.want || v.Refuse != (tt.want != "") || v.Alert {
				t.Errorf("Check(%q) = %+v, want reason %q", tt.name, v, tt.want)
			}
			// The same name through an exact rule is never judged.
			if v := d.Check(exfilClientA, "sb", tt.name, false, exfilT0); v != (Verdict{}) {
				t.Errorf("exact Check(%q) = %+v, want allowed", tt.name, v)
			}
		})
	}
}

// TestExfilEncodedLabelRates checks the thresholds against many random
// labels: every full-size encoded label is refused, at every tested length a
// large share is.
func TestExfilEncodedLabelRates(t *testing.T) {
	d := NewDetector(ExfilConfig{MaxLabelLen: 63})
	r := exfilRand(2)
	gens := []struct {
		name string
		gen  func(*rand.ChaCha8, int) string
	}{
		{"base32", exfilBase32Label},
		{"hex", exfilHexLabel},
		{"base64", exfilBase64Label},
		{"uuid", func(r *rand.ChaCha8, _ int) string {
			b := exfilBytes(r, 16)
			return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
		}},
	}
	// Minimum share refused, by encoding and label length.
	want := map[string]map[int]float64{
		"base32": {24: 0.75, 32: 0.97, 40: 0.995, 52: 1, 63: 1},
		"hex":    {24: 0.95, 32: 0.995, 40: 1, 52: 1, 60: 1, 63: 1},
		"base64": {24: 0.75, 32: 0.9, 40: 0.95, 52: 0.95, 63: 0.97},
		"uuid":   {36: 1},
	}
	const n = 2000
	for _, g := range gens {
		for _, length := range slices.Sorted(maps.Keys(want[g.name])) {
			min := want[g.name][length]
			refused := 0
			for range n {
				if d.encodedLabel(g.gen(r, length)) {
					refused++
				}
			}
			share := float64(refused) / n
			t.Logf("%s, %d chars: %.1f%% refused", g.name, length, 100*share)
			if share < min {
				t.Errorf("%s, %d chars: %.3f refused, want >= %.3f", g.name, length, share, min)
			}
		}
	}
}

func TestExfilNewNameQuota(t *testing.T) {
	d := NewDetector(exfilNoRate(ExfilConfig{}))
	name := func(i int) string { return fmt.Sprintf("host%d.cdn.example.com", i) }
	check := func(sandbox, n string, at time.Time) Verdict {
		return d.Check(exfilClientA, sandbox, n, true, at)
	}

	for i := range 100 {
		if v := check("sb1", name(i), exfilT0); v.Refuse {
			t.Fatalf("never-seen name %d refused: %+v", i+1, v)
		}
	}
	steps := []struct {
		desc    string
		sandbox string
		name    string
		at      time.Time
		want    Verdict
	}{
		{"101st never-seen name is refused with an alert", "sb1", name(100), exfilT0, Verdict{Refuse: true, Reason: "domain_quota", Alert: true}},
		{"102nd refused without a second alert", "sb1", name(101), exfilT0.Add(time.Second), Verdict{Refuse: true, Reason: "domain_quota"}},
		{"the domain is refused, seen names too", "sb1", name(0), exfilT0.Add(time.Minute), Verdict{Refuse: true, Reason: "domain_quota"}},
		{"the bare registrable domain too", "sb1", "example.com", exfilT0.Add(time.Minute), Verdict{Refuse: true, Reason: "domain_quota"}},
		{"another sandbox is unaffected", "sb2", name(100), exfilT0.Add(time.Minute), Verdict{}},
		{"another domain is unaffected", "sb1", "host100.example.org", exfilT0.Add(time.Minute), Verdict{}},
		{"still refused just before the window passes", "sb1", name(102), exfilT0.Add(10*time.Minute - 1), Verdict{Refuse: true, Reason: "domain_quota"}},
		{"allowed again after the window", "sb1", name(100), exfilT0.Add(10 * time.Minute), Verdict{}},
		{"seen names allowed again", "sb1", name(0), exfilT0.Add(10 * time.Minute), Verdict{}},
	}
	for _, s := range steps {
		if got := check(s.sandbox, s.name, s.at); got != s.want {
			t.Errorf("%s: Check(%s, %s) = %+v, want %+v", s.desc, s.sandbox, s.name, got, s.want)
		}
	}

	// After the window the count starts over: 98 more fit (2 used above),
	// then the quota trips again with a new alert.
	at := exfilT0.Add(11 * time.Minute)
	for i := range 98 {
		if v := check("sb1", name(1000+i), at); v.Refuse {
			t.Fatalf("new window, name %d refused: %+v", i, v)
		}
	}
	if v := check("sb1", "again.cdn.example.com", at); !v.Refuse || !v.Alert {
		t.Errorf("quota in the next window = %+v, want refusal with alert", v)
	}
}

func TestExfilRepeatedNameDoesNotCount(t *testing.T) {
	d := NewDetector(exfilNoRate(ExfilConfig{MaxNewNames: 3}))
	names := []string{"a.example.com", "b.example.com", "c.example.com"}
	for round := range 50 {
		for _, n := range names {
			if v := d.Check(exfilClientA, "sb", n, true, exfilT0.Add(time.Duration(round)*time.Second)); v.Refuse {
				t.Fatalf("round %d: repeated %s refused: %+v", round, n, v)
			}
		}
	}
	if v := d.Check(exfilClientA, "sb", "d.example.com", true, exfilT0.Add(time.Minute)); v.Reason != "domain_quota" || !v.Alert {
		t.Errorf("4th never-seen name = %+v, want domain_quota with alert", v)
	}
}

func TestExfilSlidingWindow(t *testing.T) {
	d := NewDetector(exfilNoRate(ExfilConfig{MaxNewNames: 10, Window: 10 * time.Minute}))
	check := func(n string, at time.Duration) Verdict {
		return d.Check(exfilClientA, "sb", n+".example.com", true, exfilT0.Add(at))
	}
	for i := range 5 {
		check(fmt.Sprintf("early%d", i), 0)
	}
	for i := range 5 {
		check(fmt.Sprintf("late%d", i), 6*time.Minute)
	}
	// At 9m all ten are in the window: no room.
	if v := check("x", 9*time.Minute); v.Reason != "domain_quota" {
		t.Fatalf("at 9m: %+v, want domain_quota", v)
	}

	// A fresh key, same timeline, probed only after the early names left
	// the window: a fixed 10m bucket would still count them.
	d = NewDetector(exfilNoRate(ExfilConfig{MaxNewNames: 10, Window: 10 * time.Minute}))
	for i := range 5 {
		check(fmt.Sprintf("early%d", i), 0)
	}
	for i := range 5 {
		check(fmt.Sprintf("late%d", i), 6*time.Minute)
	}
	for i := range 5 {
		if v := check(fmt.Sprintf("new%d", i), 10*time.Minute); v.Refuse {
			t.Fatalf("at 10m, name %d: %+v, want allowed (early names expired)", i, v)
		}
	}
	if v := check("one-too-many", 10*time.Minute); v.Reason != "domain_quota" || !v.Alert {
		t.Errorf("at 10m, 6th new name: %+v, want domain_quota with alert", v)
	}
	// A late name was seen at 6m, still in the window: not counted, but the
	// domain is refused now anyway.
	if v := check("late0", 10*time.Minute); v.Reason != "domain_quota" || v.Alert {
		t.Errorf("refused domain, seen name: %+v, want domain_quota without alert", v)
	}
}

func TestExfilBytesQuota(t *testing.T) {
	d := NewDetector(exfilNoRate(ExfilConfig{MaxNewBytes: 100}))
	label := func(i int) string { return fmt.Sprintf("chunk%02d-%s", i, strings.Repeat("x", 21)) } // 29 bytes
	steps := []struct {
		name string
		want Verdict
	}{
		{label(0) + ".example.com", Verdict{}},                                                  // 29
		{label(1) + ".example.com", Verdict{}},                                                  // 58
		{label(2) + ".example.com", Verdict{}},                                                  // 87
		{label(2) + ".example.com", Verdict{}},                                                  // seen: carries nothing new
		{"short.example.com", Verdict{}},                                                        // 92 (5 bytes)
		{"a.b.example.com", Verdict{}},                                                          // 95 (3 bytes: "a.b")
		{label(3) + ".example.com", Verdict{Refuse: true, Reason: "domain_quota", Alert: true}}, // 124 > 100
		{"tiny.example.com", Verdict{Refuse: true, Reason: "domain_quota"}},
	}
	for i, s := range steps {
		if got := d.Check(exfilClientA, "sb", s.name, true, exfilT0); got != s.want {
			t.Errorf("step %d: Check(%s) = %+v, want %+v", i, s.name, got, s.want)
		}
	}
	// The registrable domain comes from the public suffix list: bytes are
	// counted before "example.co.uk", not before "co.uk".
	d = NewDetector(exfilNoRate(ExfilConfig{MaxNewBytes: 10}))
	if v := d.Check(exfilClientA, "sb", "0123456789.example.co.uk", true, exfilT0); v.Refuse {
		t.Errorf("10 bytes under example.co.uk refused: %+v", v)
	}
	if v := d.Check(exfilClientA, "sb", "x.example.co.uk", true, exfilT0); v.Reason != "domain_quota" {
		t.Errorf("11th byte under example.co.uk = %+v, want domain_quota", v)
	}
	if v := d.Check(exfilClientA, "sb", "0123456789.other.co.uk", true, exfilT0); v.Refuse {
		t.Errorf("other.co.uk is another domain, got %+v", v)
	}
}

func TestExfilRegistrableDomainKey(t *testing.T) {
	d := NewDetector(exfilNoRate(ExfilConfig{MaxNewNames: 1}))
	steps := []struct {
		name   string
		refuse bool
	}{
		{"a.foo.co.uk", false},
		{"b.foo.co.uk", true}, // same registrable domain foo.co.uk
		{"a.bar.co.uk", false},
		{"x.user1.github.io", false}, // github.io is a public suffix
		{"x.user2.github.io", false},
		{"co.uk", false}, // no registrable domain: keyed by the name
		{"B.BAR.CO.UK.", true},
	}
	for _, s := range steps {
		if v := d.Check(exfilClientA, "sb", s.name, true, exfilT0); v.Refuse != s.refuse {
			t.Errorf("Check(%s) = %+v, want refuse=%v", s.name, v, s.refuse)
		}
	}
}

func TestExfilRateLimit(t *testing.T) {
	d := NewDetector(ExfilConfig{QPS: 10, Burst: 5})
	steps := []struct {
		desc   string
		client netip.Addr
		at     time.Duration
		n      int // queries
		want   []bool
	}{
		{"burst", exfilClientA, 0, 6, []bool{true, true, true, true, true, false}},
		{"other client has its own bucket", exfilClientB, 0, 1, []bool{true}},
		{"refill: one token per 100ms", exfilClientA, 100 * time.Millisecond, 2, []bool{true, false}},
		{"half a token is not enough", exfilClientA, 150 * time.Millisecond, 1, []bool{false}},
		{"second token", exfilClientA, 200 * time.Millisecond, 1, []bool{true}},
		{"clock going backwards refills nothing", exfilClientA, 0, 1, []bool{false}},
		{"refill is capped at the burst", exfilClientA, 10 * time.Second, 6, []bool{true, true, true, true, true, false}},
	}
	for _, s := range steps {
		for i := range s.n {
			// Exact names: the rate limit applies to every query.
			v := d.Check(s.client, "sb", "api.example.com", false, exfilT0.Add(s.at))
			if allowed := !v.Refuse; allowed != s.want[i] {
				t.Errorf("%s: query %d: %+v, want allowed=%v", s.desc, i+1, v, s.want[i])
			}
			if v.Refuse && (v.Reason != "rate_limited" || v.Alert) {
				t.Errorf("%s: query %d: %+v, want rate_limited", s.desc, i+1, v)
			}
		}
	}
}

func TestExfilExactNamesSkipChecks(t *testing.T) {
	d := NewDetector(exfilNoRate(ExfilConfig{MaxNewNames: 2, MaxNewBytes: 10}))
	r := exfilRand(3)
	names := []string{
		exfilBase32Label(r, 63) + ".example.com",
		strings.Repeat("a", 63) + ".example.com",
		strings.Repeat("abcdefgh.", 27) + "com",
	}
	for i := range 20 {
		names = append(names, fmt.Sprintf("host%d.example.com", i))
	}
	for _, n := range names {
		if v := d.Check(exfilClientA, "sb", n, false, exfilT0); v != (Verdict{}) {
			t.Errorf("exact Check(%.30s...) = %+v, want allowed", n, v)
		}
	}
	// Exact queries leave no quota state behind.
	if n := d.domains.Len(); n != 0 {
		t.Errorf("exact queries created %d quota states", n)
	}
}

func TestExfilBoundedState(t *testing.T) {
	d := NewDetector(exfilNoRate(ExfilConfig{}))
	for i := range exfilMaxDomainKeys + 50 {
		d.Check(exfilClientA, fmt.Sprintf("sb%d", i), "a.example.com", true, exfilT0)
	}
	if n := d.domains.Len(); n != exfilMaxDomainKeys {
		t.Errorf("quota states = %d, want the cap %d", n, exfilMaxDomainKeys)
	}
	for i := range exfilMaxClients + 50 {
		d.Check(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), "sb", "a.example.com", false, exfilT0)
	}
	if n := d.clients.Len(); n != exfilMaxClients {
		t.Errorf("client buckets = %d, want the cap %d", n, exfilMaxClients)
	}
	// The seen-list of a key never exceeds MaxNewNames entries.
	d = NewDetector(exfilNoRate(ExfilConfig{MaxNewNames: 7}))
	for i := range 100 {
		d.Check(exfilClientA, "sb", fmt.Sprintf("h%d.example.com", i), true, exfilT0.Add(time.Duration(i)*time.Minute))
	}
	s, _ := d.domains.Peek(exfilDomainKey{"sb", "example.com"})
	if s == nil || len(s.seen)-s.head > 7 || cap(s.seen) > 8 {
		t.Errorf("seen-list: %+v", s)
	}
}

func TestExfilConcurrentDetector(t *testing.T) {
	d := NewDetector(exfilNoRate(ExfilConfig{}))
	const (
		sandboxes  = 4
		goroutines = 8
		perG       = 50 // 400 distinct names per sandbox, 100 allowed
	)
	var (
		mu      sync.Mutex
		allowed = map[string]int{}
		alerts  = map[string]int{}
		wg      sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := netip.AddrFrom4([4]byte{10, 0, 1, byte(g)})
			for i := range perG {
				for sb := range sandboxes {
					sandbox := fmt.Sprintf("sb%d", sb)
					v := d.Check(client, sandbox, fmt.Sprintf("g%d-n%d.example.com", g, i), true, exfilT0)
					d.Check(client, sandbox, "api.example.com", false, exfilT0)
					mu.Lock()
					if !v.Refuse {
						allowed[sandbox]++
					}
					if v.Alert {
						alerts[sandbox]++
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for sb := range sandboxes {
		sandbox := fmt.Sprintf("sb%d", sb)
		if allowed[sandbox] != 100 || alerts[sandbox] != 1 {
			t.Errorf("%s: %d allowed, %d alerts; want 100 and 1", sandbox, allowed[sandbox], alerts[sandbox])
		}
	}
}

func TestExfilEntropy(t *testing.T) {
	tests := []struct {
		s    string
		want float64
	}{
		{"", 0},
		{"aaaa", 0},
		{"ab", 1},
		{"abcd", 2},
		{"0123456789abcdef", 4},
		{"aabb", 1},
	}
	for _, tt := range tests {
		var counts [256]uint32
		for i := 0; i < len(tt.s); i++ {
			counts[tt.s[i]]++
		}
		if got := exfilEntropy(&counts, len(tt.s)); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("entropy(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	r := exfilRand(4)
	seen := make([]string, 50)
	for i := range seen {
		seen[i] = fmt.Sprintf("host%d.cdn.example.com", i)
	}
	long := "this-is-a-long-but-normal-subdomain-name." + exfilBase32Label(r, 20) + ".example.com"
	cases := []struct {
		name     string
		qname    func(i int) string
		wildcard bool
	}{
		{"exact", func(int) string { return "api.example.com" }, false},
		{"wildcard-seen", func(i int) string { return seen[i%len(seen)] }, true},
		{"wildcard-long-labels", func(int) string { return long }, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			d := NewDetector(exfilNoRate(ExfilConfig{}))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if v := d.Check(exfilClientA, "sb", c.qname(i), c.wildcard, exfilT0); v.Refuse {
					b.Fatalf("refused: %+v", v)
				}
				i++
			}
		})
	}
	b.Run("wildcard-new-names", func(b *testing.B) {
		// Distinct names, time advancing so the window keeps sliding.
		names := make([]string, 4096)
		for i := range names {
			names[i] = fmt.Sprintf("n%d.example.com", i)
		}
		d := NewDetector(exfilNoRate(ExfilConfig{Window: time.Second, MaxNewNames: 1000, MaxNewBytes: 1 << 20}))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			d.Check(exfilClientA, "sb", names[i%len(names)], true, exfilT0.Add(time.Duration(i)*time.Millisecond))
			i++
		}
	})
	b.Run("parallel-exact", func(b *testing.B) {
		d := NewDetector(exfilNoRate(ExfilConfig{}))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				d.Check(exfilClientA, "sb", "api.example.com", false, exfilT0)
			}
		})
	})
}

func FuzzDetectorCheck(f *testing.F) {
	r := exfilRand(5)
	f.Add("api.example.com", true, int64(0), uint8(0))
	f.Add(exfilBase32Label(r, 63)+".example.com", true, int64(1), uint8(1))
	f.Add("..", true, int64(-5), uint8(2))
	f.Add(".com.", true, int64(0), uint8(3))
	f.Add("co.uk", true, int64(1e12), uint8(4))
	f.Add(strings.Repeat("a.", 200), false, int64(0), uint8(5))
	f.Add("\xff\x00.EXAMPLE.com", true, int64(0), uint8(6))
	reasons := map[string]bool{"": true, "name_too_long": true, "label_too_long": true, "encoded_label": true, "domain_quota": true, "rate_limited": true}
	// One detector across inputs, small limits, so quotas and the rate
	// limit are reached.
	d := NewDetector(ExfilConfig{MaxNewNames: 3, MaxNewBytes: 40, QPS: 5, Burst: 3, Window: time.Minute})
	f.Fuzz(func(t *testing.T, name string, wildcard bool, offset int64, client uint8) {
		now := exfilT0.Add(time.Duration(offset))
		v := d.Check(netip.AddrFrom4([4]byte{10, 0, 0, client % 4}), fmt.Sprintf("sb%d", client%3), name, wildcard, now)
		if !reasons[v.Reason] {
			t.Fatalf("unknown reason %q", v.Reason)
		}
		if v.Refuse != (v.Reason != "") {
			t.Fatalf("Refuse=%v with reason %q", v.Refuse, v.Reason)
		}
		if v.Alert && v.Reason != "domain_quota" {
			t.Fatalf("alert with reason %q", v.Reason)
		}
		if !wildcard && v.Refuse && v.Reason != "rate_limited" {
			t.Fatalf("exact name refused for %q", v.Reason)
		}
	})
}

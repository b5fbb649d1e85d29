package policy

import (
	"bufio"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// addressCorpusPath is the shared address corpus (see corpusPath).
var addressCorpusPath = corpusPath("addresses.tsv")

// addressCase is one row of the shared address corpus.
type addressCase struct {
	line    int
	addr    string
	blocked bool
	why     string
}

// readAddressCorpus reads the shared corpus as is: tab-separated address,
// expected (blocked|allowed), why; lines starting with # are comments. A
// missing or malformed corpus fails the test: it is the spec.
func readAddressCorpus(tb testing.TB) []addressCase {
	tb.Helper()
	f, err := os.Open(addressCorpusPath)
	if err != nil {
		tb.Fatalf("address corpus: %v (expected shared/ beside the checkout, or policy/testdata/corpus)", err)
	}
	defer f.Close()
	var cases []addressCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 3 {
			tb.Fatalf("%s:%d: want 3 tab-separated fields, got %d: %q", addressCorpusPath, n, len(fields), line)
		}
		c := addressCase{line: n, addr: fields[0], why: fields[2]}
		switch fields[1] {
		case "blocked":
			c.blocked = true
		case "allowed":
		default:
			tb.Fatalf("%s:%d: expected must be blocked or allowed, got %q", addressCorpusPath, n, fields[1])
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("address corpus: %v", err)
	}
	if len(cases) == 0 {
		tb.Fatalf("%s: no cases", addressCorpusPath)
	}
	return cases
}

func TestAddressRulesCheckSharedCorpus(t *testing.T) {
	var zero AddressRules
	for _, c := range readAddressCorpus(t) {
		t.Run(c.addr, func(t *testing.T) {
			a, err := netip.ParseAddr(c.addr)
			if err != nil {
				t.Fatalf("%s:%d: %v", addressCorpusPath, c.line, err)
			}
			err = zero.Check(a)
			switch {
			case c.blocked && err == nil:
				t.Errorf("%s:%d: Check(%s) = nil, want blocked (%s)", addressCorpusPath, c.line, a, c.why)
			case !c.blocked && err != nil:
				t.Errorf("%s:%d: Check(%s) = %v, want allowed (%s)", addressCorpusPath, c.line, a, err, c.why)
			}
			why, special := ClassifySpecial(a)
			if special != c.blocked {
				t.Errorf("ClassifySpecial(%s) = %q, %v; want special %v", a, why, special, c.blocked)
			}
		})
	}
}

func TestAddressRulesCheckAllowAndDeny(t *testing.T) {
	p := netip.MustParsePrefix
	loopbackException := AddressRules{Allow: []netip.Prefix{p("127.0.0.1/32")}}
	tests := []struct {
		name    string
		rules   AddressRules
		addr    string
		wantWhy string // "" = allowed
	}{
		{"allow_cidrs 127.0.0.1/32 makes 127.0.0.1 dialable", loopbackException, "127.0.0.1", ""},
		{"allow_cidrs 127.0.0.1/32 makes its IPv4-mapped form dialable", loopbackException, "::ffff:127.0.0.1", ""},
		{"allow_cidrs 127.0.0.1/32 covers its NAT64 form", loopbackException, "64:ff9b::7f00:1", ""},
		{"allow_cidrs 127.0.0.1/32 leaves the rest of 127/8 blocked", loopbackException, "127.0.0.2", "loopback (RFC 1122)"},
		{"allow_cidrs 127.0.0.1/32 leaves IPv6 loopback blocked", loopbackException, "::1", "loopback (RFC 4291)"},
		{"allow_cidrs 127.0.0.1/32 does not unwrap IPv4-compatible", loopbackException, "::127.0.0.1", "IPv4-compatible, deprecated (RFC 4291)"},
		{"allow_cidrs as an IPv4-mapped prefix covers plain IPv4",
			AddressRules{Allow: []netip.Prefix{p("::ffff:127.0.0.1/128")}}, "127.0.0.1", ""},
		{"allow_cidrs for an internal mirror",
			AddressRules{Allow: []netip.Prefix{p("10.1.2.3/32")}}, "10.1.2.3", ""},
		{"allow_cidrs for an internal mirror only",
			AddressRules{Allow: []netip.Prefix{p("10.1.2.3/32")}}, "10.1.2.4", "RFC 1918 private"},
		{"allow_cidrs for IPv6 unique local",
			AddressRules{Allow: []netip.Prefix{p("fd12:3456::/32")}}, "fd12:3456::1", ""},
		{"allow_cidrs can even expose cloud metadata (operator's explicit choice)",
			AddressRules{Allow: []netip.Prefix{p("169.254.169.254/32")}}, "169.254.169.254", ""},

		{"deny_cidrs beats allow_cidrs",
			AddressRules{Allow: []netip.Prefix{p("10.0.0.0/8")}, Deny: []netip.Prefix{p("10.1.2.3/32")}}, "10.1.2.3", "network.deny_cidrs"},
		{"deny_cidrs beats allow_cidrs for the same prefix",
			AddressRules{Allow: []netip.Prefix{p("8.8.8.0/24")}, Deny: []netip.Prefix{p("8.8.8.0/24")}}, "8.8.8.8", "network.deny_cidrs"},
		{"allow_cidrs around a deny_cidrs hole still allows the rest",
			AddressRules{Allow: []netip.Prefix{p("10.0.0.0/8")}, Deny: []netip.Prefix{p("10.1.2.3/32")}}, "10.1.2.4", ""},
		{"deny_cidrs blocks a public address",
			AddressRules{Deny: []netip.Prefix{p("8.8.8.0/24")}}, "8.8.8.8", "network.deny_cidrs"},
		{"deny_cidrs leaves other public addresses",
			AddressRules{Deny: []netip.Prefix{p("8.8.8.0/24")}}, "8.8.4.4", ""},
		{"deny_cidrs IPv4 blocks the IPv4-mapped form",
			AddressRules{Deny: []netip.Prefix{p("8.8.8.0/24")}}, "::ffff:8.8.8.8", "network.deny_cidrs"},
		{"deny_cidrs IPv4 blocks the NAT64 form",
			AddressRules{Deny: []netip.Prefix{p("8.8.8.0/24")}}, "64:ff9b::808:808", "network.deny_cidrs"},
		{"deny_cidrs IPv4 blocks the 6to4 form",
			AddressRules{Deny: []netip.Prefix{p("8.8.8.0/24")}}, "2002:808:808::1", "network.deny_cidrs"},
		{"deny_cidrs IPv4-mapped prefix blocks plain IPv4",
			AddressRules{Deny: []netip.Prefix{p("::ffff:8.8.8.0/120")}}, "8.8.8.8", "network.deny_cidrs"},
		{"deny_cidrs IPv6 blocks a public IPv6 address",
			AddressRules{Deny: []netip.Prefix{p("2606:4700::/32")}}, "2606:4700:4700::1111", "network.deny_cidrs"},
		{"deny_cidrs IPv6 blocks the NAT64 prefix itself",
			AddressRules{Deny: []netip.Prefix{p("64:ff9b::/96")}}, "64:ff9b::808:808", "network.deny_cidrs"},
		{"deny_cidrs on an already blocked address names deny_cidrs",
			AddressRules{Deny: []netip.Prefix{p("10.0.0.0/8")}}, "10.0.0.1", "network.deny_cidrs"},

		{"zoned address blocked even if allow_cidrs covers it",
			AddressRules{Allow: []netip.Prefix{p("fe80::/10")}}, "fe80::1%lo", "zoned address"},
		{"zoned public address blocked even with allow_cidrs ::/0",
			AddressRules{Allow: []netip.Prefix{p("::/0")}}, "2606:4700:4700::1111%eth0", "zoned address"},
		{"zoned IPv4-mapped address blocked even if allow_cidrs covers its IPv4", loopbackException, "::ffff:127.0.0.1%lo", "zoned address"},
		{"zero address blocked even with allow_cidrs everything",
			AddressRules{Allow: []netip.Prefix{p("0.0.0.0/0"), p("::/0")}}, "", "invalid address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a netip.Addr
			if tt.addr != "" {
				a = netip.MustParseAddr(tt.addr)
			}
			err := tt.rules.Check(a)
			if tt.wantWhy == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want allowed", a, err)
				}
				return
			}
			var be *BlockedAddrError
			if !errors.As(err, &be) {
				t.Fatalf("Check(%s) = %v, want *BlockedAddrError %q", a, err, tt.wantWhy)
			}
			if be.Addr != a || be.Why != tt.wantWhy {
				t.Errorf("Check(%s) = {Addr: %s, Why: %q}, want {Addr: %s, Why: %q}", a, be.Addr, be.Why, a, tt.wantWhy)
			}
		})
	}
}

func TestAddrClassifySpecialReasons(t *testing.T) {
	tests := []struct {
		addr    string
		wantWhy string // "" = not special
	}{
		{"10.0.0.1", "RFC 1918 private"},
		{"127.0.0.1", "loopback (RFC 1122)"},
		{"0.0.0.0", `"this host on this network" (RFC 1122); connects to the local host`},
		{"100.64.0.1", "shared address space, CGNAT (RFC 6598)"},
		{"169.254.169.254", "cloud instance metadata (AWS, GCP, Azure, OCI, OpenStack)"},
		{"169.254.170.2", "cloud instance metadata (AWS ECS task credentials)"},
		{"100.100.100.200", "cloud instance metadata (Alibaba Cloud)"},
		{"168.63.129.16", "cloud instance metadata (Azure WireServer)"},
		{"168.63.129.17", ""},
		{"192.0.0.192", "cloud instance metadata (Oracle Cloud)"},
		{"255.255.255.255", "limited broadcast (RFC 919, RFC 8190)"},
		{"240.0.0.1", "reserved (RFC 1112)"},
		{"::ffff:10.0.0.1", "IPv4-mapped 10.0.0.1: RFC 1918 private"},
		{"::ffff:169.254.169.254", "IPv4-mapped 169.254.169.254: cloud instance metadata (AWS, GCP, Azure, OCI, OpenStack)"},
		{"64:ff9b::a00:1", "NAT64 10.0.0.1: RFC 1918 private"},
		{"2002:a00:1::1", "6to4 10.0.0.1: RFC 1918 private"},
		{"2002:7f00:1:ffff:ffff:ffff:ffff:ffff", "6to4 127.0.0.1: loopback (RFC 1122)"},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""},
		{"2002:808:808::1", ""},
		{"::", "unspecified (RFC 4291)"},
		{"::1", "loopback (RFC 4291)"},
		{"::127.0.0.1", "IPv4-compatible, deprecated (RFC 4291)"},
		{"::ffff:0:10.0.0.1", "IPv4-translated (RFC 2765)"},
		{"64:ff9b:1::1", "local-use NAT64 (RFC 8215)"},
		{"fd00:ec2::254", "cloud instance metadata (AWS IMDS over IPv6)"},
		{"fd00::1", "unique local (RFC 4193)"},
		{"fe80::1", "link-local (RFC 4291)"},
		{"4000::1", "outside IPv6 global unicast 2000::/3 (RFC 4291 §2.4, IANA IPv6 Address Space)"},
		{"2001:0:4136:e378:8000:63bf:3f57:fdf2", "Teredo (RFC 4380)"},
		{"2001:2::1", "IETF protocol assignments (RFC 2928)"},
		{"2001:200::1", ""}, // just above 2001::/23
		{"2001:db8::1", "documentation (RFC 3849)"},
		{"3fff:fff::1", "documentation (RFC 9637)"},
		{"3fff:1000::1", ""}, // just above 3fff::/20
		{"2620:4f:8000::1", "AS112 direct delegation (RFC 7534)"},
		{"8.8.8.8", ""},
		{"2606:4700:4700::1111", ""},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			why, special := ClassifySpecial(a)
			if why != tt.wantWhy || special != (tt.wantWhy != "") {
				t.Errorf("ClassifySpecial(%s) = %q, %v; want %q, %v", a, why, special, tt.wantWhy, tt.wantWhy != "")
			}
		})
	}
	if why, special := ClassifySpecial(netip.Addr{}); !special || why != "invalid address" {
		t.Errorf("ClassifySpecial(zero Addr) = %q, %v; want \"invalid address\", true", why, special)
	}
	if why, special := ClassifySpecial(netip.MustParseAddr("2606:4700:4700::1111%eth0")); !special || why != "zoned address" {
		t.Errorf("ClassifySpecial(zoned) = %q, %v; want \"zoned address\", true", why, special)
	}
}

// The built-in tables must hold only canonical prefixes of the right family,
// and no row may be unreachable behind an earlier, wider row (first match
// wins, so specific reasons must come first).
func TestAddrBuiltinTablesWellFormed(t *testing.T) {
	for name, table := range map[string][]specialRange{"specialIPv4": specialIPv4[:], "specialIPv6": specialIPv6[:]} {
		want4 := name == "specialIPv4"
		for i, r := range table {
			if !r.prefix.IsValid() || r.prefix != r.prefix.Masked() || r.prefix.Addr().Is4() != want4 || r.prefix.Addr().Is4In6() {
				t.Errorf("%s[%d] = %s: want a masked %s prefix", name, i, r.prefix, map[bool]string{true: "IPv4", false: "IPv6"}[want4])
			}
			if r.why == "" {
				t.Errorf("%s[%d] = %s: empty why", name, i, r.prefix)
			}
			for j := range i {
				if e := table[j].prefix; e.Bits() <= r.prefix.Bits() && e.Contains(r.prefix.Addr()) {
					t.Errorf("%s[%d] = %s is shadowed by earlier row %s", name, i, r.prefix, e)
				}
			}
		}
	}
}

func TestBlockedAddrErrorMessage(t *testing.T) {
	err := (*AddressRules)(nil).Check(netip.MustParseAddr("::ffff:10.0.0.1"))
	const want = "address ::ffff:10.0.0.1 is blocked: IPv4-mapped 10.0.0.1: RFC 1918 private"
	if err == nil || err.Error() != want {
		t.Errorf("nil rules Check error = %v, want %q", err, want)
	}
}

func TestAddressRulesCheckAllowedPathDoesNotAllocate(t *testing.T) {
	rules := &AddressRules{
		Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32"), netip.MustParsePrefix("::ffff:127.0.0.1/128")},
		Deny:  []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/32")},
	}
	for _, s := range []string{"8.8.8.8", "2606:4700:4700::1111", "::ffff:1.1.1.1", "64:ff9b::808:808", "2002:808:808::1", "10.1.2.3", "127.0.0.1"} {
		a := netip.MustParseAddr(s)
		if err := rules.Check(a); err != nil {
			t.Fatalf("Check(%s) = %v, want allowed", a, err)
		}
		for _, r := range []*AddressRules{nil, {}, rules} {
			if r.Check(a) != nil {
				continue // blocked without rules; only the allowed path must not allocate
			}
			if n := testing.AllocsPerRun(100, func() { _ = r.Check(a) }); n != 0 {
				t.Errorf("Check(%s) allocates %v times, want 0", a, n)
			}
		}
	}
}

func BenchmarkAddressRulesCheck(b *testing.B) {
	rules := &AddressRules{
		Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")},
		Deny:  []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
	}
	for _, bc := range []struct {
		name  string
		rules *AddressRules
		addr  string
	}{
		{"public-v4", &AddressRules{}, "8.8.8.8"},
		{"public-v4-with-rules", rules, "8.8.8.8"},
		{"public-v6", &AddressRules{}, "2606:4700:4700::1111"},
		{"public-v4-mapped", &AddressRules{}, "::ffff:8.8.8.8"},
	} {
		a := netip.MustParseAddr(bc.addr)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.rules.Check(a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzAddressRulesCheck checks invariants over arbitrary address text: Check
// never panics; a blocked address carries its reason; an IPv4 address and
// its IPv4-mapped, NAT64 and 6to4 forms get the same verdict; nothing in
// 127.0.0.0/8 is dialable except what allow_cidrs names; zoned and invalid
// addresses are always blocked; ClassifySpecial agrees with Check without
// rules.
func FuzzAddressRulesCheck(f *testing.F) {
	for _, c := range readAddressCorpus(f) {
		f.Add(c.addr)
	}
	for _, s := range []string{"", "fe80::1%lo", "::ffff:127.0.0.1%1", "127.1", "1.2.3.4.5", "2002:7f00:1::", "64:ff9b::7f00:2", "::ffff:0:0"} {
		f.Add(s)
	}
	p := netip.MustParsePrefix
	loopbackOnly := netip.MustParseAddr("127.0.0.1")
	ruleSets := []*AddressRules{
		nil,
		{Allow: []netip.Prefix{p("127.0.0.1/32")}},
		{Allow: []netip.Prefix{p("10.0.0.0/8")}, Deny: []netip.Prefix{p("10.9.0.0/16"), p("8.8.8.0/24"), p("127.0.0.0/8")}},
		{Deny: []netip.Prefix{p("0.0.0.0/0")}},
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		why, special := ClassifySpecial(a)
		if special == (why == "") {
			t.Fatalf("ClassifySpecial(%s) = %q, %v", a, why, special)
		}
		if err := (*AddressRules)(nil).Check(a); (err != nil) != special {
			t.Fatalf("Check(%s) = %v but ClassifySpecial = %q, %v", a, err, why, special)
		}
		// The IPv4 address a stands for, if any.
		v4, _, embeds := embeddedIPv4(a)
		if a.Is4() {
			v4, embeds = a, true
		}
		for ri, r := range ruleSets {
			err := r.Check(a)
			if err != nil {
				var be *BlockedAddrError
				if !errors.As(err, &be) || be.Addr != a || be.Why == "" {
					t.Fatalf("rules[%d].Check(%s) = %#v, want *BlockedAddrError with Addr and Why", ri, a, err)
				}
			}
			if a.Zone() != "" && err == nil {
				t.Fatalf("rules[%d].Check(%s) allowed a zoned address", ri, a)
			}
			if !embeds || a.Zone() != "" {
				continue
			}
			if v4.Is4() && netip.MustParsePrefix("127.0.0.0/8").Contains(v4) && err == nil &&
				(r == nil || len(r.Allow) == 0 || v4 != loopbackOnly) {
				t.Fatalf("rules[%d].Check(%s) allowed loopback %s", ri, a, v4)
			}
			b16 := v4.As16()
			var nat64, sixToFour [16]byte
			copy(nat64[:], netip.MustParseAddr("64:ff9b::").AsSlice())
			copy(nat64[12:], b16[12:])
			sixToFour[0], sixToFour[1] = 0x20, 0x02
			copy(sixToFour[2:6], b16[12:])
			copy(sixToFour[6:], b16[:10]) // arbitrary subnet and interface bits
			want := r.Check(v4) == nil
			for _, form := range []netip.Addr{netip.AddrFrom16(b16), netip.AddrFrom16(nat64)} {
				if got := r.Check(form) == nil; got != want {
					t.Fatalf("rules[%d]: Check(%s) allowed=%v but Check(%s) allowed=%v", ri, form, got, v4, want)
				}
			}
			// An exception never extends to the 6to4 /48 of an address, but
			// whatever blocks the IPv4 address blocks its 6to4 form.
			if form := netip.AddrFrom16(sixToFour); r.Check(form) == nil && !want {
				t.Fatalf("rules[%d]: Check(%s) allowed but Check(%s) blocked", ri, form, v4)
			}
		}
	})
}

package policy

import (
	"bufio"
	"errors"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
)

// hostsCorpusPath is the shared host corpus (see corpusPath).
var hostsCorpusPath = corpusPath("hosts.tsv")

type hostCorpusRow struct {
	line              int
	host, expect, why string
}

// loadHostsCorpus reads hosts.tsv as is. A missing corpus fails the test:
// the corpus is the spec, and skipping it would pass silently.
func loadHostsCorpus(tb testing.TB) []hostCorpusRow {
	tb.Helper()
	f, err := os.Open(hostsCorpusPath)
	if err != nil {
		tb.Fatalf("host corpus is required: %v", err)
	}
	defer f.Close()
	var rows []hostCorpusRow
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 3 {
			tb.Fatalf("%s:%d: want 3 tab-separated columns, got %d", hostsCorpusPath, n, len(cols))
		}
		// The four characters \x00 stand for a NUL byte.
		host := strings.ReplaceAll(cols[0], `\x00`, "\x00")
		rows = append(rows, hostCorpusRow{line: n, host: host, expect: cols[1], why: cols[2]})
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("reading %s: %v", hostsCorpusPath, err)
	}
	if len(rows) == 0 {
		tb.Fatalf("%s has no rows", hostsCorpusPath)
	}
	return rows
}

// isInternalHostAddr reports whether a is loopback, unspecified, link-local or
// private, also when wrapped as IPv4-mapped or IPv4-compatible IPv6.
func isInternalHostAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		if [12]byte(b[:12]) == [12]byte{} { // IPv4-compatible ::a.b.c.d (RFC 4291 §2.5.5.1)
			v4 := netip.AddrFrom4([4]byte(b[12:]))
			if isInternalHostAddr(v4) {
				return true
			}
		}
	}
	return a.IsLoopback() || a.IsUnspecified() || a.IsLinkLocalUnicast() || a.IsPrivate()
}

func TestParseHostCorpus(t *testing.T) {
	for _, r := range loadHostsCorpus(t) {
		t.Run(strconv.Itoa(r.line), func(t *testing.T) {
			h, err := ParseHost(r.host)
			switch {
			case r.expect == "invalid":
				if !errors.Is(err, ErrInvalidHost) {
					t.Fatalf("ParseHost(%q) = %v, %v; want ErrInvalidHost (%s)", r.host, h, err, r.why)
				}
			case r.expect == "blocked":
				if strings.Contains(r.host, "%") && err == nil {
					t.Fatalf("ParseHost(%q) = %v; a zoned or percent-encoded host must be rejected (%s)", r.host, h, r.why)
				}
				switch {
				case err != nil:
					if !errors.Is(err, ErrInvalidHost) {
						t.Fatalf("ParseHost(%q) error %v does not wrap ErrInvalidHost", r.host, err)
					}
				case h.IsIP():
					if !isInternalHostAddr(h.Addr()) {
						t.Fatalf("ParseHost(%q) = IP %v, not an internal address (%s)", r.host, h.Addr(), r.why)
					}
				case !h.IsLocalhost():
					t.Fatalf("ParseHost(%q) = name %q, neither an IP nor localhost (%s)", r.host, h.Name(), r.why)
				}
			case strings.HasPrefix(r.expect, "same-as:"):
				want := strings.TrimPrefix(r.expect, "same-as:")
				if err != nil || h.IsIP() || h.Name() != want {
					t.Fatalf("ParseHost(%q) = %v (IP %v), %v; want name %q (%s)", r.host, h, h.IsIP(), err, want, r.why)
				}
			default:
				t.Fatalf("%s:%d: unknown expectation %q", hostsCorpusPath, r.line, r.expect)
			}
		})
	}
}

func TestParseHostNumericFormsAreIPv4(t *testing.T) {
	tests := []struct {
		in   string
		want string // IP address, "name:NAME", or "invalid"
	}{
		{"1.2.3.4", "1.2.3.4"},
		{"1.2.3.4.", "1.2.3.4"},
		{"2130706433", "127.0.0.1"},
		{"3232235521", "192.168.0.1"},
		{"4294967295", "255.255.255.255"},
		{"0", "0.0.0.0"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F000001", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0x7f.0x0.0x0.0x1", "127.0.0.1"},
		{"0xA9.0xFE.0xA9.0xFE", "169.254.169.254"},
		{"0177.0.0.1", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0251.0376.0251.0376", "169.254.169.254"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"10.65535", "10.0.255.255"},
		{"10.1.65535", "10.1.255.255"}, // the last of three parts fills two bytes
		{"10.1.65536", "invalid"},
		{"1.2.3.0x4", "1.2.3.4"},
		{"000000000000000000000177.1", "127.0.0.1"}, // leading zeros: octal, any number
		{"0x00000000000000007f.1", "127.0.0.1"},
		{"１２７.０.０.１", "127.0.0.1"}, // full-width digits
		{"127。0。0。1", "127.0.0.1"}, // ideographic full stop
		{"1.2.3.4.5", "invalid"},
		{"foo.123", "invalid"},
		{"foo.0x1", "invalid"},
		{"256.0.0.1", "invalid"},
		{"256.1.1.1", "invalid"},
		{"1.256.1.1", "invalid"},
		{"1.2.3.256", "invalid"},
		{"1.16777216", "invalid"},
		{"4294967296", "invalid"},
		{"0x100000000", "invalid"},
		{"99999999999999999999999", "invalid"},
		{"08.0.0.1", "invalid"},
		{"08.1.1.1", "invalid"},
		{"09", "invalid"},
		{"0x", "invalid"}, // ends in a number (WHATWG) but glibc rejects a bare 0x
		{"1.0x", "invalid"},
		{"0x.1", "invalid"},
		{"1.2.3.04", "1.2.3.4"},
		{"example.com", "name:example.com"},
		{"123abc.com", "name:123abc.com"},
		{"1.2.3.com", "name:1.2.3.com"},
		{"a.0x7g", "name:a.0x7g"},
		{"a.1a", "name:a.1a"},
		{"0xg", "name:0xg"},
	}
	for _, tt := range tests {
		h, err := ParseHost(tt.in)
		switch {
		case tt.want == "invalid":
			if !errors.Is(err, ErrInvalidHost) {
				t.Errorf("ParseHost(%q) = %v, %v; want ErrInvalidHost", tt.in, h, err)
			}
		case strings.HasPrefix(tt.want, "name:"):
			if want := strings.TrimPrefix(tt.want, "name:"); err != nil || h.Name() != want {
				t.Errorf("ParseHost(%q) = %v, %v; want name %q", tt.in, h, err, want)
			}
		default:
			want := netip.MustParseAddr(tt.want)
			if err != nil || !h.IsIP() || h.Addr() != want {
				t.Errorf("ParseHost(%q) = %v, %v; want IP %v", tt.in, h, err, want)
			}
		}
	}
}

func TestParseHostCanonicalises(t *testing.T) {
	tests := []struct{ in, want string }{
		{"allowed.test", "allowed.test"},
		{"ALLOWED.TEST.", "allowed.test"},
		{"Allowed.Test", "allowed.test"},
		{"a-b.c-d.test", "a-b.c-d.test"},
		{"xn--jv8h.allowed.test", "xn--jv8h.allowed.test"},
		{"XN--JV8H.allowed.test", "xn--jv8h.allowed.test"},
		{"🔐.allowed.test", "xn--jv8h.allowed.test"},
		{"ⓛⓞⓒⓐⓛⓗⓞⓢⓣ", "localhost"},
		{"ＡＬＬＯＷＥＤ．ＴＥＳＴ", "allowed.test"}, // full-width letters and full stop
		{"allowed。test", "allowed.test"},
		{"bücher.example", "xn--bcher-kva.example"},
		{"faß.de", "xn--fa-hia.de"},            // non-transitional: ß is kept
		{"allowed.test\u00ad", "allowed.test"}, // soft hyphen is ignored by UTS #46
		{strings.Repeat("a", 63) + ".test", strings.Repeat("a", 63) + ".test"},
		{strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 126) + "a"}, // 253 bytes
	}
	for _, tt := range tests {
		h, err := ParseHost(tt.in)
		if err != nil || h.IsIP() || h.Name() != tt.want || h.String() != tt.want {
			t.Errorf("ParseHost(%q) = %v, %v; want name %q", tt.in, h, err, tt.want)
		}
	}
}

func TestParseHostIPv6Literals(t *testing.T) {
	tests := []struct{ in, want string }{
		{"[::1]", "::1"},
		{"[0000::1]", "::1"},
		{"[2001:DB8::1]", "2001:db8::1"},
		{"[::ffff:127.0.0.1]", "::ffff:127.0.0.1"}, // kept mapped; the classifier unwraps
		{"[::fFFf:169.254.169.254]", "::ffff:169.254.169.254"},
		{"[::127.0.0.1]", "::7f00:1"},
	}
	for _, tt := range tests {
		h, err := ParseHost(tt.in)
		if want := netip.MustParseAddr(tt.want); err != nil || !h.IsIP() || h.Addr() != want || h.Name() != "" {
			t.Errorf("ParseHost(%q) = %v, %v; want IP %v", tt.in, h, err, want)
		}
	}
}

func TestParseHostRejects(t *testing.T) {
	tests := []struct {
		in, why string // why: a substring of the error message
	}{
		{"", "empty"},
		{".", "empty name"},
		{"..", "empty label"},
		{"a..b", "empty label"},
		{".a", "empty label"},
		{"allowed.test..", "empty label"},
		{"allowed。test。", "empty label"},
		{strings.Repeat("a", MaxHostInput+1), "longer than 1024"},
		{"a%00b", "percent-encoding"},
		{"%31%32%37.0.0.1", "percent-encoding"},
		{"a\x00b", "control character"},
		{"a b", "control character or space"},
		{"a\tb", "control character"},
		{"a\x7fb", "control character"},
		{"a/b", `'/'`},
		{`a\b`, `'\\'`},
		{"a?b", `'?'`},
		{"a#b", `'#'`},
		{"user@allowed.test", `'@'`},
		{"allowed.test:443", "':' is allowed only in a bracketed IPv6"},
		{"::1", "':'"},
		{"2001:db8::1", "':'"},
		{"[allowed.test]", "not around a name"},
		{"[1.2.3.4]", "IPv4 address must not be in brackets"},
		{"[::ffff:127.0.0.01]", "not a valid IPv6"},
		{"[fe80::1%lo]", "percent"},
		{"[fe80::1%25lo]", "percent"},
		{"[::1", "brackets"},
		{"::1]", "brackets"},
		{"[[::1]]", "brackets"},
		{"[]", "not around a name"},
		{"[::1].", "brackets"},
		{"a[::1]", "brackets"},
		{"-allowed.test", "starts or ends with '-'"},
		{"allowed-.test", "starts or ends with '-'"},
		{"ab--c.test", "3rd and 4th"},
		{"foo_bar.test", "'_'"},
		{"*.allowed.test", `'*'`},
		{"a!b", `'!'`},
		{strings.Repeat("a", 64) + ".test", "label longer than 63"},
		{strings.Repeat("a.", 127) + "a", "longer than 253"},
		{"xn--abc-.test", "xn--"},      // decodes to plain ASCII: ambiguous with abc.test
		{"xn--.test", "xn--"},          // empty A-label
		{"xn--a.test", "xn--"},         // decodes to U+0080, a control
		{"\xff.test", "UTF-8"},         // x/net/idna would map it to U+FFFD
		{"\xed\xa0\x80.test", "UTF-8"}, // surrogate
		{"\ufffd.test", "internationalised"},
		{"-🔐.test", "internationalised"},
		{"１２７.０.０.１\u3002\u3002", "empty label"},
		{"a\uff0fb", "internationalised"}, // full-width solidus maps to '/'
		{"a\uff05b", "internationalised"}, // full-width percent
		{"a\u2100b", "internationalised"}, // ℀ maps to "a/c"
		{"\u0627.1", "invalid"},           // RTL label then number: invalid either way
	}
	for _, tt := range tests {
		h, err := ParseHost(tt.in)
		if !errors.Is(err, ErrInvalidHost) {
			t.Errorf("ParseHost(%q) = %v, %v; want ErrInvalidHost", tt.in, h, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.why) {
			t.Errorf("ParseHost(%q) error %q does not say %q", tt.in, err, tt.why)
		}
	}
}

func TestParseHostErrorQuotesAtMost64Bytes(t *testing.T) {
	if _, err := ParseHost("a%00b"); err == nil || err.Error() != `invalid host "a%00b": percent-encoding and zone IDs ('%') are not allowed` {
		t.Errorf("ParseHost(a%%00b) error = %v", err)
	}
	long := strings.Repeat("x", 200) + "%"
	_, err := ParseHost(long)
	if err == nil {
		t.Fatal("ParseHost(long) succeeded")
	}
	msg := err.Error()
	if want := `invalid host "` + strings.Repeat("x", 64) + `"...: `; !strings.HasPrefix(msg, want) {
		t.Errorf("error %q does not start with %q", msg, want)
	}
	// Truncation does not split a multi-byte rune.
	_, err = ParseHost(strings.Repeat("x", 63) + strings.Repeat("é", 100) + "%")
	if err == nil || !strings.Contains(err.Error(), `"`+strings.Repeat("x", 63)+`"...`) {
		t.Errorf("error = %v; want the input cut before the split rune", err)
	}
}

func TestParseAuthority(t *testing.T) {
	tests := []struct {
		in          string
		defaultPort uint16
		host        string // "" = want an error
		port        uint16
		why         string // for errors: a substring of the message
	}{
		{"allowed.test:443", 0, "allowed.test", 443, ""},
		{"ALLOWED.TEST.:443", 0, "allowed.test", 443, ""},
		{"allowed.test:80", 443, "allowed.test", 80, ""},
		{"allowed.test:65535", 0, "allowed.test", 65535, ""},
		{"allowed.test:1", 0, "allowed.test", 1, ""},
		{"allowed.test:00443", 0, "allowed.test", 443, ""},
		{"[::1]:443", 0, "::1", 443, ""},
		{"[::ffff:127.0.0.1]:80", 0, "::ffff:127.0.0.1", 80, ""},
		{"1.2.3.4:8080", 0, "1.2.3.4", 8080, ""},
		{"2130706433:80", 0, "127.0.0.1", 80, ""},
		{"🔐.allowed.test:443", 0, "xn--jv8h.allowed.test", 443, ""},
		{"allowed.test", 80, "allowed.test", 80, ""},
		{"[::1]", 443, "::1", 443, ""},
		{"allowed.test", 0, "", 0, "a port is required"},
		{"[::1]", 0, "", 0, "a port is required"},
		{"[allowed.test]:443", 0, "", 0, "not around a name"},
		{"[allowed.test]", 443, "", 0, "not around a name"},
		{"allowed.test:", 0, "", 0, "empty port"},
		{"allowed.test:", 443, "", 0, "empty port"},
		{"allowed.test:0", 0, "", 0, "out of range"},
		{"allowed.test:65536", 0, "", 0, "out of range"},
		{"allowed.test:99999", 0, "", 0, "out of range"},
		{"allowed.test:100000", 0, "", 0, "more than 5 digits"},
		{"allowed.test:+443", 0, "", 0, "decimal digits"},
		{"allowed.test:-1", 0, "", 0, "decimal digits"},
		{"allowed.test: 443", 0, "", 0, "decimal digits"},
		{"allowed.test:0x1bb", 0, "", 0, "decimal digits"},
		{"allowed.test:443:443", 0, "", 0, "':'"},
		{"::1:443", 0, "", 0, "':'"},
		{"[::1]443", 0, "", 0, "only \":port\""},
		{"[::1]:", 0, "", 0, "empty port"},
		{"[::1", 443, "", 0, "without a closing"},
		{":443", 0, "", 0, "empty"},
		{"", 443, "", 0, "empty"},
		{"user@allowed.test:443", 0, "", 0, "'@'"},
		{"allowed.test%00:443", 0, "", 0, "percent"},
		{"[fe80::1%25lo]:443", 0, "", 0, "percent"},
		{strings.Repeat("a", 2000) + ":443", 0, "", 0, "longer than"},
	}
	for _, tt := range tests {
		h, p, err := ParseAuthority(tt.in, tt.defaultPort)
		if tt.host == "" {
			if !errors.Is(err, ErrInvalidHost) {
				t.Errorf("ParseAuthority(%q, %d) = %v, %d, %v; want ErrInvalidHost", tt.in, tt.defaultPort, h, p, err)
			} else if !strings.Contains(err.Error(), tt.why) {
				t.Errorf("ParseAuthority(%q, %d) error %q does not say %q", tt.in, tt.defaultPort, err, tt.why)
			}
			continue
		}
		if err != nil || h.String() != tt.host || p != tt.port {
			t.Errorf("ParseAuthority(%q, %d) = %v, %d, %v; want %s, %d", tt.in, tt.defaultPort, h, p, err, tt.host, tt.port)
		}
	}
}

func TestParseHostPattern(t *testing.T) {
	tests := []struct {
		in       string
		host     string // String() of the result; "" = want an error
		wildcard bool
	}{
		{"api.github.com", "api.github.com", false},
		{"API.GitHub.com.", "api.github.com", false},
		{"*.pythonhosted.org", "pythonhosted.org", true},
		{"*.PythonHosted.org.", "pythonhosted.org", true},
		{"*.🔐.allowed.test", "xn--jv8h.allowed.test", true},
		{"*.com", "com", true}, // the public suffix check is the config loader's job
		{"10.1.2.3", "10.1.2.3", false},
		{"2130706433", "127.0.0.1", false},
		{"::1", "::1", false},
		{"2001:db8::1", "2001:db8::1", false},
		{"2001:DB8::1", "2001:db8::1", false},
		{"::ffff:10.1.2.3", "::ffff:10.1.2.3", false},
		{"[2001:db8::1]", "2001:db8::1", false},
		{"a.*.com", "", false},
		{"*foo.com", "", false},
		{"*", "", false},
		{"*.", "", false},
		{"**.com", "", false},
		{"*.*.com", "", false},
		{"foo.*", "", false},
		{"*.1.2.3.4", "", false},
		{"*.2130706433", "", false},
		{"*.[::1]", "", false},
		{"*.::1", "", false},
		{"*::1", "", false},
		{"1.2.3.4", "1.2.3.4", false},
		{"1.2.3.4:80", "", false},
		{"fe80::1%eth0", "", false},
		{"[fe80::1%eth0]", "", false},
		{"::1%25", "", false},
		{"1.2.3.4.5", "", false},
		{"[allowed.test]", "", false},
		{"allowed.test:443", "", false},
		{"", "", false},
		{"-bad.test", "", false},
		{"*.-bad.test", "", false},
	}
	for _, tt := range tests {
		h, wild, err := ParseHostPattern(tt.in)
		if tt.host == "" {
			if !errors.Is(err, ErrInvalidHost) {
				t.Errorf("ParseHostPattern(%q) = %v, %v, %v; want ErrInvalidHost", tt.in, h, wild, err)
			}
			continue
		}
		if err != nil || h.String() != tt.host || wild != tt.wildcard {
			t.Errorf("ParseHostPattern(%q) = %v, %v, %v; want %s, %v", tt.in, h, wild, err, tt.host, tt.wildcard)
		}
	}
}

func TestHostIsLocalhost(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"localhost", true},
		{"LOCALHOST.", true},
		{"ⓛⓞⓒⓐⓛⓗⓞⓢⓣ", true},
		{"foo.localhost", true},
		{"a.b.localhost", true},
		{"Foo.LocalHost", true},
		{"localhost.test", false},
		{"notlocalhost", false},
		{"xlocalhost", false},
		{"localhost-1", false},
		{"127.0.0.1", false}, // an IP; the address check blocks it
		{"[::1]", false},
		{"allowed.test", false},
	}
	for _, tt := range tests {
		h, err := ParseHost(tt.in)
		if err != nil {
			t.Fatalf("ParseHost(%q): %v", tt.in, err)
		}
		if got := h.IsLocalhost(); got != tt.want {
			t.Errorf("ParseHost(%q).IsLocalhost() = %v, want %v", tt.in, got, tt.want)
		}
	}
	if (Host{}).IsLocalhost() {
		t.Error("zero Host IsLocalhost")
	}
}

func TestHostZeroValue(t *testing.T) {
	var h Host
	if !h.IsZero() || h.IsIP() || h.Name() != "" || h.Addr().IsValid() || h.String() != "" {
		t.Errorf("zero Host: IsZero %v IsIP %v Name %q Addr %v String %q", h.IsZero(), h.IsIP(), h.Name(), h.Addr(), h.String())
	}
	for _, s := range []string{"allowed.test", "1.2.3.4", "[::1]"} {
		if h, err := ParseHost(s); err != nil || h.IsZero() {
			t.Errorf("ParseHost(%q) = %v, %v; want a non-zero Host", s, h, err)
		}
	}
}

// hostLiteral writes h the way a client would put it in an authority.
func hostLiteral(h Host) string {
	if h.IsIP() && h.Addr().Is6() {
		return "[" + h.String() + "]"
	}
	return h.String()
}

// checkParsedHost asserts the invariants of an accepted host: canonical
// form, idempotence, and agreement of the fast path with full IDNA.
func checkParsedHost(t *testing.T, in string, h Host) {
	t.Helper()
	if h.IsZero() {
		t.Fatalf("ParseHost(%q) returned the zero Host without error", in)
	}
	if h.IsIP() {
		if h.Name() != "" || h.Addr().Zone() != "" {
			t.Fatalf("ParseHost(%q) = %v: IP host with name %q or zone %q", in, h, h.Name(), h.Addr().Zone())
		}
	} else {
		n := h.Name()
		if n == "" || h.Addr().IsValid() || n != h.String() {
			t.Fatalf("ParseHost(%q): inconsistent name host %#v", in, h)
		}
		if len(n) > MaxNameLen || strings.HasSuffix(n, ".") || checkLDHName(n) != "" {
			t.Fatalf("ParseHost(%q) = %q: not a canonical lower-case LDH name (%s)", in, n, checkLDHName(n))
		}
		if endsInNumber(n) {
			t.Fatalf("ParseHost(%q) = name %q that ends in a number", in, n)
		}
	}
	again, err := ParseHost(hostLiteral(h))
	if err != nil || again != h {
		t.Fatalf("ParseHost(%q) = %v, but re-parsing %q gives %v, %v", in, h, hostLiteral(h), again, err)
	}
}

func addHostSeeds(f *testing.F) {
	for _, r := range loadHostsCorpus(f) {
		f.Add(r.host)
	}
	for _, s := range []string{
		"allowed.test", "ALLOWED.TEST.", "[::1]", "[::ffff:127.0.0.1]", "0x7f.1", "1.2.3.0x4",
		"08.0.0.1", "foo.123", "1.2.3.4.5", "0x", "xn--abc-.test", "a\u3002", "faß.de",
		"ＡＬＬＯＷＥＤ．ＴＥＳＴ", "allowed.test\u00ad", "ab--c.test", "::1", "*.example.com",
		strings.Repeat("a.", 126) + "a", "\u0627\u0628.test", "\u0915\u094d\u200d.test", "𝟏𝟐𝟕.0.0.1",
		"xn--zn7c.test", "\xff.test",
	} {
		f.Add(s)
	}
}

func FuzzParseHost(f *testing.F) {
	addHostSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHost(s)
		slow, slowErr := parseHost(s, false, false)
		if (err == nil) != (slowErr == nil) || h != slow {
			t.Fatalf("ParseHost(%q): fast path %v, %v; full IDNA %v, %v", s, h, err, slow, slowErr)
		}
		pat, wild, patErr := ParseHostPattern(s)
		if err == nil && (patErr != nil || wild || pat != h) {
			t.Fatalf("ParseHost(%q) = %v, but ParseHostPattern = %v, %v, %v", s, h, pat, wild, patErr)
		}
		if patErr == nil {
			checkParsedHost(t, s, pat)
		} else if !errors.Is(patErr, ErrInvalidHost) {
			t.Fatalf("ParseHostPattern(%q) error %v does not wrap ErrInvalidHost", s, patErr)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidHost) {
				t.Fatalf("ParseHost(%q) error %v does not wrap ErrInvalidHost", s, err)
			}
			if len(err.Error()) > 512 {
				t.Fatalf("ParseHost(%q) error is %d bytes long", s, len(err.Error()))
			}
			return
		}
		checkParsedHost(t, s, h)
	})
}

func FuzzParseAuthority(f *testing.F) {
	for _, r := range loadHostsCorpus(f) {
		f.Add(r.host+":443", uint16(0))
		f.Add(r.host, uint16(80))
	}
	for _, s := range []string{
		"allowed.test:443", "[::1]:443", "[allowed.test]:443", "allowed.test:", "allowed.test:0",
		"allowed.test:65536", "allowed.test:+443", "[::1]", "::1:443", "[::1]443", ":443",
	} {
		f.Add(s, uint16(0))
		f.Add(s, uint16(443))
	}
	f.Fuzz(func(t *testing.T, s string, defaultPort uint16) {
		h, p, err := ParseAuthority(s, defaultPort)
		if err != nil {
			if !errors.Is(err, ErrInvalidHost) {
				t.Fatalf("ParseAuthority(%q, %d) error %v does not wrap ErrInvalidHost", s, defaultPort, err)
			}
			if len(err.Error()) > 512 {
				t.Fatalf("ParseAuthority(%q) error is %d bytes long", s, len(err.Error()))
			}
			return
		}
		if p == 0 {
			t.Fatalf("ParseAuthority(%q, %d) returned port 0", s, defaultPort)
		}
		checkParsedHost(t, s, h)
		canon := hostLiteral(h) + ":" + strconv.Itoa(int(p))
		h2, p2, err := ParseAuthority(canon, 0)
		if err != nil || h2 != h || p2 != p {
			t.Fatalf("ParseAuthority(%q, %d) = %v, %d, but re-parsing %q gives %v, %d, %v", s, defaultPort, h, p, canon, h2, p2, err)
		}
	})
}

func BenchmarkParseHost(b *testing.B) {
	for _, bm := range []struct{ name, in string }{
		{"canonical", "files.pythonhosted.org"},
		{"uppercase", "Files.PythonHosted.org."},
		{"unicode", "🔐.bücher.example"},
		{"ipv4", "192.0.2.1"},
		{"ipv6", "[2001:db8::1]"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseHost(bm.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// ErrInvalidHost is wrapped by every error ParseHost and ParseAuthority
// return for malformed input; test for it with errors.Is.
var ErrInvalidHost = errors.New("invalid host")

// Host is a canonical destination host: either a DNS name in lower-case
// ASCII (A-labels, RFC 5891) without a trailing dot, or an IP address
// without a zone. The zero Host is invalid. Hosts are produced only by
// ParseHost and ParseAuthority, so nothing downstream can match an
// uncanonicalised string. Host is comparable and cheap to copy.
type Host struct {
	name   string     // canonical name; "" when the host is an address
	addr   netip.Addr // valid only when name == ""
	suffix uint8      // length of name's public suffix (Public Suffix List); 0 for addresses
}

// nameHost builds the Host for a canonical name. It looks up the name's
// public suffix once here, so that matching (Policy.Decide) needs no
// lookup and allocates nothing.
func nameHost(name string) Host {
	ps, _ := publicsuffix.PublicSuffix(name)
	return Host{name: name, suffix: uint8(len(ps))}
}

// PublicSuffix returns the public suffix of a name host ("co.uk" for
// a.example.co.uk, "s3.amazonaws.com" for bucket.s3.amazonaws.com; the
// last label when no Public Suffix List rule matches), or "" for an IP host.
func (h Host) PublicSuffix() string { return h.name[len(h.name)-int(h.suffix):] }

// Limits on host text, in bytes.
const (
	// MaxHostInput is the longest host text ParseHost looks at; longer
	// input is rejected before any other check.
	MaxHostInput = 1024
	// MaxNameLen is the longest canonical name: 253 bytes without the
	// trailing dot (RFC 1035 §2.3.4, RFC 5891 §4.2.4 via UTS #46
	// VerifyDnsLength).
	MaxNameLen = 253
	// MaxLabelLen is the longest label of a canonical name (RFC 1035 §2.3.4).
	MaxLabelLen = 63

	maxErrInput = 64 // input bytes echoed in an error message
)

// lookupProfile is the UTS #46 processing used for every name that is not
// already plain ASCII: lookup mapping (case folding, full-width forms, the
// ideographic full stop, enclosed alphanumerics), RFC 5891 label validation,
// RFC 5893 Bidi rule, STD3 (letters, digits, hyphen only), DNS lengths and
// non-transitional processing (IDNA2008: ß and ς are kept, not mapped).
var lookupProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.ValidateLabels(true),
	idna.StrictDomainName(true),
	idna.VerifyDNSLength(true),
	idna.Transitional(false),
)

// ParseHost canonicalises a host as a client writes it in a URL authority
// or CONNECT target, without the port. It fails closed: anything that is
// not unambiguously one DNS name or one IP address is an error wrapping
// ErrInvalidHost, whose message names what was wrong.
//
// The rules, in order:
//
//   - Input longer than MaxHostInput bytes, empty input, control bytes,
//     space, DEL, '%' (percent-encoding and zone IDs), any of / \ ? # @, and
//     ':' or brackets outside the IPv6 literal form are rejected.
//   - "[v6]" is an IPv6 literal (RFC 3986 §3.2.2). The inside must be an
//     IPv6 address without zone; names and IPv4 addresses in brackets are
//     rejected (the CVE-2022-29188 class). IPv4-mapped addresses are kept as
//     they are; address classification unwraps them.
//   - One trailing '.' is removed.
//   - The name is converted with UTS #46 lookup processing (IDNA2008,
//     non-transitional, STD3 rules, Bidi rule, DNS lengths): lower-case
//     A-labels, at most MaxLabelLen bytes per label and MaxNameLen in all.
//   - If the last label is a number (all decimal digits, or "0x" followed
//     by hex digits), the whole host must be an IPv4 address in one of the
//     forms the C resolver accepts (inet_aton(3): one to four parts, each
//     decimal, octal with a leading 0, or hex with 0x; the last part fills
//     the remaining bytes), and the result is that address; otherwise it is
//     an error. This is the WHATWG URL "ends in a number" rule, so a numeric
//     form such as 2130706433 or 0x7f.1 is always an IP, never a name.
//   - Anything else is a name.
func ParseHost(s string) (Host, error) {
	return parseHost(s, false, true)
}

// parseHost implements ParseHost. bareV6 additionally accepts an IPv6
// address without brackets (config files). fast allows the ASCII path that
// avoids IDNA processing; the fuzz tests check it against fast == false.
func parseHost(s string, bareV6, fast bool) (Host, error) {
	if len(s) > MaxHostInput {
		return Host{}, hostErr(s, fmt.Sprintf("longer than %d bytes", MaxHostInput))
	}
	if s == "" {
		return Host{}, hostErr(s, "empty")
	}
	ascii, colon, brackets := true, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x21 || c == 0x7f:
			return Host{}, hostErr(s, fmt.Sprintf("control character or space %q at byte %d is not allowed", c, i))
		case c >= utf8.RuneSelf:
			ascii = false
		case c == '%':
			return Host{}, hostErr(s, "percent-encoding and zone IDs ('%') are not allowed")
		case c == '/' || c == '\\' || c == '?' || c == '#' || c == '@':
			return Host{}, hostErr(s, fmt.Sprintf("%q is not allowed in a host", c))
		case c == '[' || c == ']':
			brackets++
		case c == ':':
			colon = true
		}
	}
	if brackets > 0 {
		if brackets != 2 || s[0] != '[' || s[len(s)-1] != ']' {
			return Host{}, hostErr(s, "brackets are allowed only around a whole IPv6 address, as in [2001:db8::1]")
		}
		return parseBracketed(s)
	}
	if !ascii && !utf8.ValidString(s) {
		// x/net/idna maps invalid UTF-8 to U+FFFD without an error.
		return Host{}, hostErr(s, "not valid UTF-8")
	}
	if colon {
		if !bareV6 {
			return Host{}, hostErr(s, "':' is allowed only in a bracketed IPv6 address; a port does not belong here")
		}
		return parseBareV6(s)
	}

	// RFC 3986 §3.2.2 / RFC 1034 §3.1: one trailing dot marks an absolute
	// name and is not significant.
	name := strings.TrimSuffix(s, ".")
	if name == "" {
		return Host{}, hostErr(s, "empty name")
	}
	var err error
	if fast && ascii && !hasACELabel(name) {
		name, err = lowerASCIIName(s, name)
	} else {
		name, err = idnaName(s, name)
	}
	if err != nil {
		return Host{}, err
	}
	if endsInNumber(name) {
		a, ok := parseIPv4(name)
		if !ok {
			return Host{}, hostErr(s, "ends in a number but is not an IPv4 address (inet_aton forms: 1 to 4 parts, decimal, 0-prefixed octal or 0x hex)")
		}
		return Host{addr: a}, nil
	}
	return nameHost(name), nil
}

// parseBracketed parses "[v6]" (RFC 3986 IP-literal, without IPvFuture);
// s has passed the byte checks of parseHost and has no other brackets.
func parseBracketed(s string) (Host, error) {
	inner := s[1 : len(s)-1]
	a, err := netip.ParseAddr(inner)
	switch {
	case err != nil && !strings.Contains(inner, ":"):
		return Host{}, hostErr(s, "brackets are allowed only around an IPv6 address, not around a name")
	case err != nil:
		return Host{}, hostErr(s, "not a valid IPv6 address in brackets")
	case !a.Is6():
		return Host{}, hostErr(s, "an IPv4 address must not be in brackets")
	case a.Zone() != "":
		return Host{}, hostErr(s, "zone IDs are not allowed")
	}
	return Host{addr: a}, nil
}

// parseBareV6 parses an IPv6 address written without brackets (config only).
func parseBareV6(s string) (Host, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return Host{}, hostErr(s, "contains ':' but is not a valid IPv6 address")
	case !a.Is6():
		return Host{}, hostErr(s, "contains ':' but is not an IPv6 address")
	case a.Zone() != "":
		return Host{}, hostErr(s, "zone IDs are not allowed")
	}
	return Host{addr: a}, nil
}

// hasACELabel reports whether any label of the ASCII name s starts with the
// ACE prefix "xn--" in any case; such labels need punycode validation.
func hasACELabel(s string) bool {
	for len(s) >= 4 {
		if (s[0]|0x20) == 'x' && (s[1]|0x20) == 'n' && s[2] == '-' && s[3] == '-' {
			return true
		}
		i := strings.IndexByte(s, '.')
		if i < 0 {
			return false
		}
		s = s[i+1:]
	}
	return false
}

// lowerASCIIName canonicalises an ASCII name without "xn--" labels. For such
// names UTS #46 lookup processing is exactly: fold A-Z to lower case, then
// require letters, digits and hyphens (STD3), no hyphen at the start or end
// of a label or in the 3rd and 4th positions (RFC 5891 §4.2.3.1), no empty
// label and the DNS lengths. It allocates only when s has upper case.
// orig is the input as written, for error messages.
func lowerASCIIName(orig, s string) (string, error) {
	upper := false
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			upper = true
			break
		}
	}
	if upper {
		s = strings.ToLower(s)
	}
	if reason := checkLDHName(s); reason != "" {
		return "", hostErr(orig, reason)
	}
	return s, nil
}

// idnaName runs UTS #46 lookup processing on s and checks that the result
// is a canonical lower-case LDH name. orig is the input as written.
func idnaName(orig, s string) (string, error) {
	out, err := lookupProfile.ToASCII(s)
	if err != nil {
		// The idna error echoes the whole input; say what it means instead.
		if isASCII(s) {
			if reason := checkLDHName(strings.ToLower(s)); reason != "" {
				return "", hostErr(orig, reason)
			}
			return "", hostErr(orig, "an xn-- label is not valid punycode or not a valid IDNA2008 label")
		}
		return "", hostErr(orig, "not a valid internationalised domain name (UTS #46 lookup, IDNA2008)")
	}
	// Defence in depth: whatever the mapping did, the result must be a
	// plain LDH name with no empty label (for example "a\u3002" maps to
	// "a.").
	if reason := checkLDHName(out); reason != "" {
		return "", hostErr(orig, "after IDNA mapping, "+reason)
	}
	return out, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// checkLDHName returns "" if s is a lower-case LDH name that UTS #46 lookup
// processing leaves unchanged apart from "xn--" labels, else the reason it
// is not.
func checkLDHName(s string) string {
	if s == "" {
		return "empty name"
	}
	if len(s) > MaxNameLen {
		return fmt.Sprintf("name is longer than %d bytes", MaxNameLen)
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			c := s[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				if c == '_' {
					return "'_' is not allowed in a host name"
				}
				return fmt.Sprintf("%q is not allowed in a host name (letters, digits and '-' only)", c)
			}
			continue
		}
		label := s[start:i]
		switch {
		case label == "":
			return "empty label"
		case len(label) > MaxLabelLen:
			return fmt.Sprintf("label longer than %d bytes", MaxLabelLen)
		case label[0] == '-' || label[len(label)-1] == '-':
			return "label starts or ends with '-'"
		case len(label) > 4 && label[2] == '-' && label[3] == '-' && !strings.HasPrefix(label, "xn--"):
			return "label has '--' in the 3rd and 4th positions (reserved, RFC 5891 §4.2.3.1)"
		}
		start = i + 1
	}
	return ""
}

// endsInNumber reports whether the last label of the lower-case name s is
// all decimal digits or "0x" followed by hex digits (WHATWG URL Standard,
// "ends in a number").
func endsInNumber(s string) bool {
	last := s[strings.LastIndexByte(s, '.')+1:]
	if last == "" {
		return false
	}
	if allDigits(last, 10) {
		return true
	}
	return len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') && allDigits(last[2:], 16)
}

func allDigits(s string, base int) bool {
	for i := 0; i < len(s); i++ {
		if digitVal(s[i]) >= base {
			return false
		}
	}
	return true
}

func digitVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return 99
}

// parseIPv4 parses s with the rules of inet_aton(3) as in glibc: one to four
// parts separated by '.', each a decimal number, an octal number with a
// leading '0', or a hex number with a leading "0x"/"0X" and at least one hex
// digit. All parts but the last are one byte each; the last fills the
// remaining bytes (so "127.1" is 127.0.0.1 and "2130706433" is 127.0.0.1).
func parseIPv4(s string) (netip.Addr, bool) {
	var parts [4]uint64
	n := 0
	for {
		if n == 4 {
			return netip.Addr{}, false
		}
		i := strings.IndexByte(s, '.')
		part := s
		if i >= 0 {
			part = s[:i]
		}
		v, ok := parseIPv4Part(part)
		if !ok {
			return netip.Addr{}, false
		}
		parts[n] = v
		n++
		if i < 0 {
			break
		}
		s = s[i+1:]
	}
	var ip uint32
	for i := 0; i < n-1; i++ {
		if parts[i] > 0xff {
			return netip.Addr{}, false
		}
		ip |= uint32(parts[i]) << (24 - 8*i)
	}
	lastBits := 32 - 8*(n-1)
	last := parts[n-1]
	if last >= 1<<lastBits {
		return netip.Addr{}, false
	}
	ip |= uint32(last)
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}

// parseIPv4Part parses one inet_aton part. Values above 32 bits saturate,
// so any number of leading zeros is accepted and overflow is rejected.
func parseIPv4Part(s string) (uint64, bool) {
	base := 10
	switch {
	case s == "":
		return 0, false
	case len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
		base = 16
		s = s[2:]
		if s == "" {
			return 0, false // glibc rejects a bare "0x"
		}
	case s[0] == '0':
		base = 8
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		d := digitVal(s[i])
		if d >= base {
			return 0, false
		}
		v = v*uint64(base) + uint64(d)
		if v > 0xffffffff {
			v = 1 << 32 // saturate: out of range for any part
		}
	}
	return v, true
}

// ParseAuthority splits and canonicalises an authority as a client writes
// it in an absolute-URI or a CONNECT target (RFC 9110 §7.2, §9.3.6):
// "host:port", "[v6]:port" or, when defaultPort is not 0, a bare "host" or
// "[v6]", which then gets defaultPort. The port is 1 to 5 ASCII digits with
// a value from 1 to 65535; "host:" is an error. With defaultPort 0 a
// missing port is an error (CONNECT targets always name one). The host part
// is canonicalised by ParseHost, brackets included, so "[name]:443" is
// rejected rather than silently unbracketed as net.SplitHostPort would.
// Every error wraps ErrInvalidHost.
func ParseAuthority(s string, defaultPort uint16) (Host, uint16, error) {
	if len(s) > MaxHostInput+6 {
		return Host{}, 0, hostErr(s, fmt.Sprintf("authority longer than %d bytes", MaxHostInput+6))
	}
	host, port, hasPort := s, "", false
	if strings.HasPrefix(s, "[") {
		i := strings.IndexByte(s, ']')
		if i < 0 {
			return Host{}, 0, hostErr(s, "'[' without a closing ']'")
		}
		host = s[:i+1]
		switch rest := s[i+1:]; {
		case rest == "":
		case rest[0] == ':':
			port, hasPort = rest[1:], true
		default:
			return Host{}, 0, hostErr(s, "only \":port\" may follow a bracketed IPv6 address")
		}
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, port, hasPort = s[:i], s[i+1:], true
	}
	var p uint16
	switch {
	case hasPort:
		var reason string
		if p, reason = parsePort(port); reason != "" {
			return Host{}, 0, hostErr(s, reason)
		}
	case defaultPort == 0:
		return Host{}, 0, hostErr(s, "a port is required (host:port)")
	default:
		p = defaultPort
	}
	h, err := ParseHost(host)
	if err != nil {
		return Host{}, 0, err
	}
	return h, p, nil
}

// parsePort parses a port of 1 to 5 ASCII digits with a value from 1 to
// 65535, or returns why it is not one.
func parsePort(s string) (uint16, string) {
	if s == "" {
		return 0, "empty port after ':'"
	}
	if len(s) > 5 {
		return 0, "port has more than 5 digits"
	}
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, "port must be decimal digits only"
		}
		v = v*10 + int(c-'0')
	}
	if v < 1 || v > 65535 {
		return 0, "port " + strconv.Itoa(v) + " is out of range 1-65535"
	}
	return uint16(v), ""
}

// ParseHostPattern parses a host as written in a configuration file. It
// accepts everything ParseHost accepts, an IPv6 address without brackets
// ("2001:db8::1"), and a leading "*." on a name: "*.example.com" returns
// the Host "example.com" with wildcard true, meaning any name strictly below
// it. Any other '*' is an error, as is a wildcard on an IP address. It does
// not check the public suffix list; the config loader does. Errors wrap
// ErrInvalidHost.
func ParseHostPattern(s string) (h Host, wildcard bool, err error) {
	if len(s) > MaxHostInput {
		return Host{}, false, hostErr(s, fmt.Sprintf("longer than %d bytes", MaxHostInput))
	}
	rest, wildcard := strings.CutPrefix(s, "*.")
	if strings.Contains(rest, "*") {
		return Host{}, false, hostErr(s, "'*' is allowed only as a whole leading label, as in *.example.com")
	}
	if !wildcard {
		h, err := parseHost(s, true, true)
		return h, false, err
	}
	h, err = parseHost(rest, false, true)
	if err != nil {
		return Host{}, false, err
	}
	if h.IsIP() {
		return Host{}, false, hostErr(s, "a wildcard must be followed by a name, not an IP address")
	}
	return h, true, nil
}

// hostErr returns an error wrapping ErrInvalidHost that quotes at most
// maxErrInput bytes of s and says why it was rejected.
func hostErr(s, reason string) error {
	return fmt.Errorf("%w %s: %s", ErrInvalidHost, quoteInput(s), reason)
}

// quoteInput quotes s for an error message, truncated to maxErrInput bytes
// (at a rune boundary) followed by "..." when longer.
func quoteInput(s string) string {
	if len(s) <= maxErrInput {
		return strconv.Quote(s)
	}
	n := maxErrInput
	for n > maxErrInput-utf8.UTFMax && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "..."
}

// IsIP reports whether h is an IP address rather than a name.
func (h Host) IsIP() bool { return h.name == "" && h.addr.IsValid() }

// Addr returns the address of an IP host, or the zero Addr for a name.
func (h Host) Addr() netip.Addr {
	if h.name != "" {
		return netip.Addr{}
	}
	return h.addr
}

// Name returns the canonical DNS name, or "" for an IP host.
func (h Host) Name() string { return h.name }

// IsZero reports whether h is the zero (invalid) Host.
func (h Host) IsZero() bool { return h.name == "" && !h.addr.IsValid() }

// String returns the canonical name, or the address in its canonical text
// form (IPv6 without brackets); "" for the zero Host.
func (h Host) String() string {
	if h.name != "" {
		return h.name
	}
	if h.addr.IsValid() {
		return h.addr.String()
	}
	return ""
}

// IsLocalhost reports whether h is one of the special-use names that always
// mean the local host: "localhost" and any name below ".localhost"
// (RFC 6761 §6.3). Such names are blocked before any DNS lookup.
func (h Host) IsLocalhost() bool {
	return h.name == "localhost" || strings.HasSuffix(h.name, ".localhost")
}

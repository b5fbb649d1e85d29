package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// AddressRules decides which destination addresses may be dialled. The zero
// value (and a nil *AddressRules) applies only the built-in special-purpose
// list; see ClassifySpecial for what it contains.
//
// Prefixes are matched with netip.Prefix.Contains, so host bits below the
// prefix length are ignored. An IPv4-mapped prefix (::ffff:a.b.c.d/n with
// n >= 96) is read as the IPv4 prefix a.b.c.d/(n-96), because an
// IPv4-mapped address is judged exactly as the IPv4 address it maps.
// AddressRules is safe for concurrent use as long as the slices are not
// modified.
type AddressRules struct {
	Allow []netip.Prefix // network.allow_cidrs: explicit exceptions to the built-in list
	Deny  []netip.Prefix // network.deny_cidrs: added to the built-in list; always wins
}

// BlockedAddrError is returned by AddressRules.Check for an address that must
// not be dialled.
type BlockedAddrError struct {
	Addr netip.Addr // the address as passed to Check, zone included
	Why  string     // short human reason, e.g. "loopback (RFC 1122)"
}

// Error returns "address A is blocked: WHY". The text is meant for logs and
// operators; code should use errors.As and the fields.
func (e *BlockedAddrError) Error() string {
	return "address " + e.Addr.String() + " is blocked: " + e.Why
}

// Reasons that do not come from the built-in tables.
const (
	whyAddrInvalid = "invalid address"
	whyAddrZoned   = "zoned address"
	whyAddrDenied  = "network.deny_cidrs"
	whyAddrNotGUA  = "outside IPv6 global unicast 2000::/3 (RFC 4291 §2.4, IANA IPv6 Address Space)"
)

// Check reports whether a may be dialled: it returns nil if so, else a
// *BlockedAddrError naming a and the reason. It is meant to run on every
// resolved address and again on the address actually connected, and it does
// not allocate when it returns nil.
//
// The order is, first match wins (fail closed):
//  1. an invalid (zero) address or one with an IPv6 zone is blocked;
//  2. an address in r.Deny is blocked ("network.deny_cidrs");
//  3. an address in r.Allow is allowed, even if the built-in list covers it;
//  4. an address in the built-in special-purpose list is blocked (see
//     ClassifySpecial);
//  5. anything else is allowed.
//
// In steps 2 and 3 an IPv4-mapped address (::ffff:a.b.c.d) is matched as the
// IPv4 address it maps; a NAT64 well-known-prefix (64:ff9b::/96) address
// matches if either it or the IPv4 address it embeds is in the list; a 6to4
// (2002::/16) address matches Deny through the IPv4 it embeds, but Allow
// only by itself. So allow_cidrs 127.0.0.1/32 makes both 127.0.0.1 and
// ::ffff:127.0.0.1 dialable.
func (r *AddressRules) Check(a netip.Addr) error {
	if !a.IsValid() {
		return &BlockedAddrError{Addr: a, Why: whyAddrInvalid}
	}
	if a.Zone() != "" {
		return &BlockedAddrError{Addr: a, Why: whyAddrZoned}
	}
	if u := a.Unmap(); u.IsUnspecified() {
		// connect(2) to 0.0.0.0 or :: reaches this machine: no exception
		// may make it dialable.
		return &BlockedAddrError{Addr: a, Why: "unspecified address: connects to this machine"}
	}
	if r != nil && (len(r.Deny) > 0 || len(r.Allow) > 0) {
		key, v4, allowV4 := a, netip.Addr{}, netip.Addr{}
		if a.Is4In6() {
			key = a.Unmap()
		} else if e, form, ok := embeddedIPv4(a); ok {
			v4 = e
			// An exception for an IPv4 address extends to its NAT64 form
			// (the same host through a translator), not to the 6to4 /48,
			// which is a whole site's network behind that address.
			if form == "NAT64" {
				allowV4 = e
			}
		}
		if prefixesContain(r.Deny, key, v4) {
			return &BlockedAddrError{Addr: a, Why: whyAddrDenied}
		}
		if prefixesContain(r.Allow, key, allowV4) {
			return nil
		}
	}
	if why, special := ClassifySpecial(a); special {
		return &BlockedAddrError{Addr: a, Why: why}
	}
	return nil
}

// ClassifySpecial applies only the built-in special-purpose list to a,
// ignoring any allow_cidrs or deny_cidrs. It returns special == true and a
// short reason if a must not be dialled by default, and ("", false) if a is
// ordinary public unicast. An invalid address or one with a zone is always
// special. It allocates only when a is special and embeds an IPv4 address.
//
// The list is the IANA IPv4 and IPv6 Special-Purpose Address Registries
// (RFC 6890), tightened to fail closed, plus cloud metadata endpoints:
//   - IPv4: "this network" 0.0.0.0/8, RFC 1918 private, CGNAT
//     100.64.0.0/10, loopback, link-local, IETF protocol assignments
//     192.0.0.0/24, documentation, AS112, AMT, 6to4 relay anycast,
//     benchmarking, multicast, reserved 240.0.0.0/4 and broadcast, and cloud
//     metadata endpoints, including 168.63.129.16 (Azure WireServer) in
//     otherwise public space;
//   - IPv6: everything outside global unicast 2000::/3 (loopback,
//     unspecified, IPv4-compatible, IPv4-translated, local-use NAT64,
//     discard-only, SRv6, unique local, link-local, site-local, multicast,
//     unassigned), and inside it 2001::/23 (IETF protocol assignments,
//     including Teredo 2001::/32), documentation 2001:db8::/32 and
//     3fff::/20, and AS112 2620:4f:8000::/48;
//   - IPv4-mapped (::ffff:0:0/96, RFC 4291), NAT64 well-known-prefix
//     (64:ff9b::/96, RFC 6052) and 6to4 (2002::/16, RFC 3056) addresses are
//     judged by the IPv4 address they embed, and the reason says so, e.g.
//     "IPv4-mapped 10.0.0.1: RFC 1918 private".
func ClassifySpecial(a netip.Addr) (why string, special bool) {
	switch {
	case !a.IsValid():
		return whyAddrInvalid, true
	case a.Zone() != "":
		return whyAddrZoned, true
	case a.Is4():
		return lookupSpecial(specialIPv4[:], a)
	}
	if v4, form, ok := embeddedIPv4(a); ok {
		if why, special := lookupSpecial(specialIPv4[:], v4); special {
			return form + " " + v4.String() + ": " + why, true
		}
		return "", false
	}
	if why, special := lookupSpecial(specialIPv6[:], a); special {
		return why, true
	}
	if !globalUnicast.Contains(a) {
		return whyAddrNotGUA, true
	}
	return "", false
}

// specialRange is one row of a built-in table: addresses in prefix are
// blocked by default, for the reason why.
type specialRange struct {
	prefix netip.Prefix
	why    string
}

// lookupSpecial returns the reason of the first row of table containing a.
func lookupSpecial(table []specialRange, a netip.Addr) (string, bool) {
	for i := range table {
		if table[i].prefix.Contains(a) {
			return table[i].why, true
		}
	}
	return "", false
}

// prefixesContain reports whether a prefix in ps contains key or v4 (an
// address key embeds; invalid if none). IPv4-mapped prefixes are read as the
// IPv4 prefixes they map, so they match plain IPv4 addresses.
func prefixesContain(ps []netip.Prefix, key, v4 netip.Addr) bool {
	for _, p := range ps {
		if pa := p.Addr(); pa.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(pa.Unmap(), p.Bits()-96)
		}
		if p.Contains(key) || p.Contains(v4) {
			return true
		}
	}
	return false
}

// Prefixes whose addresses embed an IPv4 address, and IPv6 global unicast.
var (
	nat64WKP      = netip.MustParsePrefix("64:ff9b::/96") // NAT64 well-known prefix, RFC 6052 §2.1; IPv4 in bits 96..127
	sixToFour     = netip.MustParsePrefix("2002::/16")    // 6to4, RFC 3056 §2; IPv4 in bits 16..47
	globalUnicast = netip.MustParsePrefix("2000::/3")     // IANA IPv6 Address Space: global unicast, RFC 4291 §2.4
)

// embeddedIPv4 returns the IPv4 address an IPv4-mapped, NAT64
// well-known-prefix or 6to4 address stands for, and the name of the form.
// It reports false for every other address, including plain IPv4.
func embeddedIPv4(a netip.Addr) (v4 netip.Addr, form string, ok bool) {
	if !a.Is6() || a.Zone() != "" {
		return netip.Addr{}, "", false
	}
	if a.Is4In6() {
		return a.Unmap(), "IPv4-mapped", true // ::ffff:0:0/96, RFC 4291 §2.5.5.2
	}
	b := a.As16()
	switch {
	case nat64WKP.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64", true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	}
	return netip.Addr{}, "", false
}

func specialPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// Cloud metadata reasons share this prefix so that logs can be grepped.
const whyMetadata = "cloud instance metadata"

// specialIPv4 is the built-in IPv4 block list, first match wins, so more
// specific rows come first. Sources: the IANA IPv4 Special-Purpose Address
// Registry (RFC 6890, every row is blocked regardless of its "globally
// reachable" column), multicast and reserved space from the IANA IPv4
// Address Space registry, and cloud vendors' documentation for metadata
// endpoints.
var specialIPv4 = [...]specialRange{
	// Cloud metadata and credential endpoints (vendor documentation). Most lie
	// in ranges blocked below; they are listed so that logs say what they are.
	{specialPrefix("169.254.169.254/32"), whyMetadata + " (AWS, GCP, Azure, OCI, OpenStack)"}, // AWS IMDS, GCE metadata server, Azure IMDS, OCI IMDS, OpenStack metadata
	{specialPrefix("169.254.170.2/32"), whyMetadata + " (AWS ECS task credentials)"},          // AWS ECS task metadata and credentials endpoint
	{specialPrefix("169.254.170.23/32"), whyMetadata + " (AWS EKS Pod Identity Agent)"},       // AWS EKS Pod Identity Agent
	{specialPrefix("100.100.100.200/32"), whyMetadata + " (Alibaba Cloud)"},                   // Alibaba Cloud ECS metadata, inside 100.64.0.0/10
	{specialPrefix("168.63.129.16/32"), whyMetadata + " (Azure WireServer)"},                  // Azure WireServer/host DNS; public space, so listed explicitly
	{specialPrefix("192.0.0.192/32"), whyMetadata + " (Oracle Cloud)"},                        // Oracle Cloud legacy metadata, inside 192.0.0.0/24
	{specialPrefix("169.254.0.23/32"), whyMetadata + " (Tencent Cloud)"},                      // Tencent Cloud CVM metadata (metadata.tencentyun.com)

	{specialPrefix("0.0.0.0/32"), `"this host on this network" (RFC 1122); connects to the local host`}, // IANA: RFC 1122 §3.2.1.3
	{specialPrefix("0.0.0.0/8"), `"this network" (RFC 791)`},                                            // IANA: RFC 791 §3.2
	{specialPrefix("10.0.0.0/8"), "RFC 1918 private"},                                                   // IANA: private-use, RFC 1918
	{specialPrefix("100.64.0.0/10"), "shared address space, CGNAT (RFC 6598)"},                          // IANA: shared address space, RFC 6598
	{specialPrefix("127.0.0.0/8"), "loopback (RFC 1122)"},                                               // IANA: loopback, RFC 1122 §3.2.1.3
	{specialPrefix("169.254.0.0/16"), "link-local (RFC 3927)"},                                          // IANA: link local, RFC 3927
	{specialPrefix("172.16.0.0/12"), "RFC 1918 private"},                                                // IANA: private-use, RFC 1918
	{specialPrefix("192.0.0.0/24"), "IETF protocol assignments (RFC 6890)"},                             // IANA: RFC 6890 §2.1; includes DS-Lite, PCP/TURN anycast, NAT64 discovery
	{specialPrefix("192.0.2.0/24"), "documentation TEST-NET-1 (RFC 5737)"},                              // IANA: documentation, RFC 5737
	{specialPrefix("192.31.196.0/24"), "AS112-v4 (RFC 7535)"},                                           // IANA: AS112-v4, RFC 7535
	{specialPrefix("192.52.193.0/24"), "AMT (RFC 7450)"},                                                // IANA: AMT, RFC 7450
	{specialPrefix("192.88.99.0/24"), "deprecated 6to4 relay anycast (RFC 7526)"},                       // IANA: RFC 3068, deprecated by RFC 7526
	{specialPrefix("192.168.0.0/16"), "RFC 1918 private"},                                               // IANA: private-use, RFC 1918
	{specialPrefix("192.175.48.0/24"), "AS112 direct delegation (RFC 7534)"},                            // IANA: direct delegation AS112 service, RFC 7534
	{specialPrefix("198.18.0.0/15"), "benchmarking (RFC 2544)"},                                         // IANA: benchmarking, RFC 2544
	{specialPrefix("198.51.100.0/24"), "documentation TEST-NET-2 (RFC 5737)"},                           // IANA: documentation, RFC 5737
	{specialPrefix("203.0.113.0/24"), "documentation TEST-NET-3 (RFC 5737)"},                            // IANA: documentation, RFC 5737
	{specialPrefix("224.0.0.0/4"), "multicast (RFC 5771)"},                                              // IANA IPv4 Address Space / Multicast Address Space, RFC 5771
	{specialPrefix("255.255.255.255/32"), "limited broadcast (RFC 919, RFC 8190)"},                      // IANA: limited broadcast, RFC 8190, RFC 919 §7
	{specialPrefix("240.0.0.0/4"), "reserved (RFC 1112)"},                                               // IANA: reserved, RFC 1112 §4
}

// specialIPv6 is the built-in IPv6 block list, first match wins. It is
// consulted after the IPv4-embedding forms (IPv4-mapped, NAT64 64:ff9b::/96,
// 6to4 2002::/16) have been unwrapped; everything it does not list that lies
// outside 2000::/3 is blocked as well (whyAddrNotGUA), so the rows outside
// 2000::/3 only give specific reasons. Sources: the IANA IPv6
// Special-Purpose Address Registry (RFC 6890) and IANA IPv6 Address Space
// registry, and cloud vendors' documentation for metadata endpoints.
var specialIPv6 = [...]specialRange{
	// Cloud metadata and credential endpoints (vendor documentation); all lie in
	// ranges blocked below and are listed so that logs say what they are.
	{specialPrefix("fd00:ec2::254/128"), whyMetadata + " (AWS IMDS over IPv6)"},        // AWS EC2 IMDS IPv6 endpoint
	{specialPrefix("fd00:ec2::23/128"), whyMetadata + " (AWS EKS Pod Identity Agent)"}, // AWS EKS Pod Identity Agent IPv6 endpoint
	{specialPrefix("fe80::a9fe:a9fe/128"), whyMetadata + " (OpenStack over IPv6)"},     // OpenStack Neutron metadata IPv6 endpoint
	{specialPrefix("fd20:ce::254/128"), whyMetadata + " (GCP over IPv6)"},              // Google Compute Engine metadata server, IPv6

	// Outside 2000::/3.
	{specialPrefix("::/128"), "unspecified (RFC 4291)"},                // IANA: unspecified address, RFC 4291 §2.5.2
	{specialPrefix("::1/128"), "loopback (RFC 4291)"},                  // IANA: loopback address, RFC 4291 §2.5.3
	{specialPrefix("::/96"), "IPv4-compatible, deprecated (RFC 4291)"}, // RFC 4291 §2.5.5.1; not unwrapped
	{specialPrefix("::ffff:0:0:0/96"), "IPv4-translated (RFC 2765)"},   // RFC 2765 §2.1 (obsoleted by RFC 6145); not unwrapped
	{specialPrefix("64:ff9b:1::/48"), "local-use NAT64 (RFC 8215)"},    // IANA: IPv4-IPv6 translation, RFC 8215
	{specialPrefix("100::/64"), "discard-only (RFC 6666)"},             // IANA: discard-only address block, RFC 6666
	{specialPrefix("5f00::/16"), "SRv6 SIDs (RFC 9602)"},               // IANA: segment routing (SRv6) SIDs, RFC 9602
	{specialPrefix("fc00::/7"), "unique local (RFC 4193)"},             // IANA: unique-local, RFC 4193, RFC 8190
	{specialPrefix("fe80::/10"), "link-local (RFC 4291)"},              // IANA: link-local unicast, RFC 4291 §2.5.6
	{specialPrefix("fec0::/10"), "deprecated site-local (RFC 3879)"},   // IANA IPv6 Address Space: site-local, deprecated by RFC 3879
	{specialPrefix("ff00::/8"), "multicast (RFC 4291)"},                // IANA IPv6 Address Space: multicast, RFC 4291 §2.7

	// Inside 2000::/3.
	{specialPrefix("2001::/32"), "Teredo (RFC 4380)"},                          // IANA: TEREDO, RFC 4380, RFC 8190; blocked, not unwrapped
	{specialPrefix("2001::/23"), "IETF protocol assignments (RFC 2928)"},       // IANA: IETF protocol assignments, RFC 2928; includes benchmarking, ORCHID, AMT, AS112-v6
	{specialPrefix("2001:db8::/32"), "documentation (RFC 3849)"},               // IANA: documentation, RFC 3849
	{specialPrefix("3fff::/20"), "documentation (RFC 9637)"},                   // IANA: documentation, RFC 9637
	{specialPrefix("2620:4f:8000::/48"), "AS112 direct delegation (RFC 7534)"}, // IANA: direct delegation AS112 service, RFC 7534
}

// CheckAllowCIDR reports an error if making p an exception (allow_cidrs,
// --allow-cidr) would make a cloud metadata endpoint dialable, in any of
// its forms (plain, IPv4-mapped, NAT64), unless p is exactly that one
// address or deny covers it. Metadata endpoints hand out the host's cloud
// credentials: an exception such as 0.0.0.0/0, 169.254.0.0/16 or fc00::/7
// must not open them by accident.
func CheckAllowCIDR(p netip.Prefix, deny []netip.Prefix) error {
	rules := AddressRules{Allow: []netip.Prefix{p}, Deny: deny}
	for _, m := range metadataAddrs {
		if p.Bits() == m.BitLen() && p.Addr() == m {
			continue // exactly that address: deliberate
		}
		forms := []netip.Addr{m}
		if m.Is4() {
			b := m.As4()
			forms = append(forms,
				netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}),                 // IPv4-mapped
				netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}), // NAT64
				netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: b[0], 3: b[1], 4: b[2], 5: b[3], 15: 1}),                // 6to4
				netip.AddrFrom16([16]byte{12: b[0], 13: b[1], 14: b[2], 15: b[3]}))                                     // IPv4-compatible
		}
		for _, f := range forms {
			if rules.Check(f) == nil {
				return fmt.Errorf("%s covers the cloud metadata address %s, which hands out the host's credentials; "+
					"narrow the range, or add %s to network.deny_cidrs", p, m, netip.PrefixFrom(m, m.BitLen()))
			}
		}
	}
	return nil
}

// metadataAddrs are the single cloud metadata addresses of the built-in
// lists.
var metadataAddrs = func() []netip.Addr {
	var out []netip.Addr
	for _, table := range [][]specialRange{specialIPv4[:], specialIPv6[:]} {
		for _, r := range table {
			if strings.HasPrefix(r.why, whyMetadata) && r.prefix.IsSingleIP() {
				out = append(out, r.prefix.Addr())
			}
		}
	}
	return out
}()

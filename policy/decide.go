package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Reason is the machine-readable cause of a Decision, as written to the
// audit log's "reason" field and the X-Airlock-Decision header.
type Reason string

// Reasons. The set only grows; each value is part of the audit schema.
const (
	Allowed              Reason = "allowed"               // an allow rule matched
	HostNotAllowed       Reason = "host_not_allowed"      // no allow rule names the host
	PortNotAllowed       Reason = "port_not_allowed"      // the host is allowed, not on this port
	MethodNotAllowed     Reason = "method_not_allowed"    // host and port allowed, not this method
	PathNotAllowed       Reason = "path_not_allowed"      // host, port and method allowed, not this path
	DeniedByRule         Reason = "denied_by_rule"        // a deny rule matched
	AddressBlocked       Reason = "address_blocked"       // a special-purpose or denied address, or localhost
	InterceptionRequired Reason = "interception_required" // method/path rules cannot be enforced in an opaque tunnel
	PathNotCanonical     Reason = "path_not_canonical"    // dot-segments, empty segments or encoded slashes
	NoPolicy             Reason = "no_policy"             // the sandbox has no policy
)

// Decision is the outcome of a policy check.
type Decision struct {
	Allow  bool
	Reason Reason
	// Rule is the configuration path of the rule that decided, such as
	// "policies.default.allow[2]"; empty when no rule matched.
	Rule string
	// Inspect is set on an allowed host-level decision when method, path
	// or credential rules apply to the host: they can be enforced on plain
	// HTTP requests, but not inside an opaque CONNECT tunnel, so such a
	// tunnel is intercepted.
	Inspect bool
	// Credential names the credential to inject, on an allowed
	// request-level decision by a rule that carries one.
	Credential string
}

// Policy is a compiled named policy. Lookups are by map, never by scanning
// the rule list: a decision costs a few map lookups per label of the host,
// whatever the number of rules.
type Policy struct {
	name  string
	exact map[string]*ruleSet     // names
	wild  map[string]*ruleSet     // "*.suffix" rules, keyed by suffix
	ips   map[netip.Addr]*ruleSet // IP literal rules
}

// Name returns the policy's name as configured.
func (p *Policy) Name() string { return p.name }

type ruleSet struct {
	allow []*compiledRule
	deny  []*compiledRule
}

type compiledRule struct {
	id         string // "policies.NAME.allow[i]"
	deny       bool   // deny rules match paths loosely (see segmentEqual)
	dnsTypes   DNSTypeSet
	credential string
	ports      []uint16
	methods    []string
	paths      [][]string
}

func (r *compiledRule) l7() bool { return len(r.methods) > 0 || len(r.paths) > 0 || r.credential != "" }

func (r *compiledRule) matchPort(port uint16) bool {
	if r.ports == nil { // deny rules without ports match every port
		return true
	}
	for _, p := range r.ports {
		if p == port {
			return true
		}
	}
	return false
}

func (r *compiledRule) matchMethod(m string) bool {
	if len(r.methods) == 0 {
		return true
	}
	for _, x := range r.methods {
		if x == m {
			return true
		}
	}
	return false
}

func (r *compiledRule) matchPath(segs []string) bool {
	if len(r.paths) == 0 {
		return true
	}
	for _, p := range r.paths {
		if matchSegments(p, segs, r.deny) {
			return true
		}
	}
	return false
}

// matchSegments matches path segments against a pattern where "*" is
// exactly one segment and "**" zero or more. It backtracks only to the
// most recent "**" (the linear glob algorithm), so a request path cannot
// make it take more than len(pat)*len(segs) steps, whatever the pattern.
//
// Segments are compared by segmentEqual: loosely for deny rules.
func matchSegments(pat, segs []string, loose bool) bool {
	px, sx := 0, 0
	starPx, starSx := -1, 0 // where the last "**" was, and how much it has eaten
	for px < len(pat) || sx < len(segs) {
		if px < len(pat) {
			switch pat[px] {
			case "**":
				starPx, starSx = px, sx
				px++
				continue
			case "*":
				if sx < len(segs) {
					px, sx = px+1, sx+1
					continue
				}
			default:
				if sx < len(segs) && segmentEqual(segs[sx], pat[px], loose) {
					px, sx = px+1, sx+1
					continue
				}
			}
		}
		// Mismatch: let the last "**" eat one more segment, if any remain.
		if starPx >= 0 && starSx < len(segs) {
			starSx++
			px, sx = starPx+1, starSx
			continue
		}
		return false
	}
	return true
}

// segmentEqual compares a request path segment with a pattern segment.
// The segment's ";parameters" never count: Tomcat, Jetty and Spring drop
// them, so /a;x/b is /a/b to them. For deny rules (loose) the comparison
// also ignores case and trailing dots and spaces, which servers such as
// IIS ignore: a deny rule must not be sidestepped by spelling.
func segmentEqual(seg, pat string, loose bool) bool {
	if i := strings.IndexByte(seg, ';'); i >= 0 {
		seg = seg[:i]
	}
	if !loose {
		return seg == pat
	}
	return strings.EqualFold(strings.TrimRight(seg, ". "), strings.TrimRight(pat, ". "))
}

// compilePolicy indexes a PolicySpec by host. defaultPorts applies to allow
// rules without ports.
func compilePolicy(name string, spec *PolicySpec, defaultPorts []uint16) *Policy {
	p := &Policy{
		name:  name,
		exact: make(map[string]*ruleSet),
		wild:  make(map[string]*ruleSet),
		ips:   make(map[netip.Addr]*ruleSet),
	}
	add := func(kind string, rules []Rule) {
		for i, r := range rules {
			cr := &compiledRule{id: fmt.Sprintf("policies.%s.%s[%d]", name, kind, i), deny: kind == "deny", credential: r.Credential}
			for _, t := range r.DNSTypes {
				cr.dnsTypes |= dnsTypeBits[t]
			}
			for _, port := range r.Ports {
				cr.ports = append(cr.ports, uint16(port))
			}
			if cr.ports == nil && kind == "allow" {
				cr.ports = defaultPorts
			}
			for _, m := range r.Methods {
				cr.methods = append(cr.methods, string(m))
			}
			for _, pp := range r.Paths {
				cr.paths = append(cr.paths, pp.segs)
			}
			var set *ruleSet
			switch {
			case r.Host.Host.IsIP():
				set = p.ips[r.Host.Host.Addr()]
				if set == nil {
					set = new(ruleSet)
					p.ips[r.Host.Host.Addr()] = set
				}
			case r.Host.Wildcard:
				set = p.wild[r.Host.Host.Name()]
				if set == nil {
					set = new(ruleSet)
					p.wild[r.Host.Host.Name()] = set
				}
			default:
				set = p.exact[r.Host.Host.Name()]
				if set == nil {
					set = new(ruleSet)
					p.exact[r.Host.Host.Name()] = set
				}
			}
			if kind == "allow" {
				set.allow = append(set.allow, cr)
			} else {
				set.deny = append(set.deny, cr)
			}
		}
	}
	add("allow", spec.Allow)
	add("deny", spec.Deny)
	return p
}

// request is what a decision looks at; method == "" means a host-level
// decision (CONNECT, or before a request is read).
type request struct {
	port   uint16
	method string
	segs   []string
}

// verdict accumulates matches over the rule sets that apply to a host,
// most specific set first.
type verdict struct {
	deny       *compiledRule
	allow      *compiledRule
	inspect    bool
	hostMatch  bool
	portMatch  bool
	methodOK   bool
	anyRuleSet bool
}

func (v *verdict) add(set *ruleSet, q *request) {
	if set == nil {
		return
	}
	v.anyRuleSet = true
	for _, r := range set.deny {
		if !r.matchPort(q.port) {
			continue
		}
		if q.method == "" {
			if r.l7() {
				v.inspect = true
				continue
			}
		} else if !r.matchMethod(q.method) || !r.matchPath(q.segs) {
			continue
		}
		if v.deny == nil {
			v.deny = r
		}
	}
	for _, r := range set.allow {
		v.hostMatch = true
		if !r.matchPort(q.port) {
			continue
		}
		v.portMatch = true
		if q.method == "" {
			if r.l7() {
				v.inspect = true
			}
		} else {
			if !r.matchMethod(q.method) {
				continue
			}
			v.methodOK = true
			if !r.matchPath(q.segs) {
				continue
			}
		}
		if v.allow == nil {
			v.allow = r
		}
	}
}

func (p *Policy) decide(h Host, q *request) Decision {
	if h.IsLocalhost() {
		return Decision{Reason: AddressBlocked}
	}
	var v verdict
	if h.IsIP() {
		v.add(p.ips[h.Addr()], q)
	} else {
		name := h.Name()
		v.add(p.exact[name], q)
		for i := strings.IndexByte(name, '.'); i >= 0; i = strings.IndexByte(name, '.') {
			name = name[i+1:]
			set := p.wild[name]
			if set == nil {
				continue
			}
			// A wildcard never reaches across a public suffix:
			// *.amazonaws.com must not match bucket.s3.amazonaws.com,
			// where s3.amazonaws.com is a public suffix anyone can
			// register names under (Public Suffix List).
			if len(name) <= int(h.suffix) {
				break
			}
			v.add(set, q)
		}
	}
	switch {
	case v.deny != nil:
		return Decision{Reason: DeniedByRule, Rule: v.deny.id}
	case v.allow != nil:
		d := Decision{Allow: true, Reason: Allowed, Rule: v.allow.id}
		if q.method == "" && v.inspect {
			d.Inspect = true
		}
		if q.method != "" {
			d.Credential = v.allow.credential
		}
		return d
	case !v.hostMatch:
		return Decision{Reason: HostNotAllowed}
	case !v.portMatch:
		return Decision{Reason: PortNotAllowed}
	case !v.methodOK:
		return Decision{Reason: MethodNotAllowed}
	default:
		return Decision{Reason: PathNotAllowed}
	}
}

// Decide makes the host-level decision for a connection to h on port: the
// one made for a CONNECT and before any DNS lookup. It never resolves
// names and never allocates. Deny rules win over allow rules; deny rules
// with methods or paths cannot be judged here and set Decision.Inspect on an
// allowed host instead. A nil Policy denies everything (NoPolicy).
func (p *Policy) Decide(h Host, port uint16) Decision {
	if p == nil {
		return Decision{Reason: NoPolicy}
	}
	q := request{port: port}
	return p.decide(h, &q)
}

// DecideRequest decides one HTTP request to h:port with method and path
// (the URL's path, percent-encoded as received). A path that is not
// canonical (dot-segments, empty segments, encoded "/" or "\", or a bad
// escape) is refused with PathNotCanonical rather than guessed at, but only
// when a method or path rule applies to the host. A nil Policy denies
// everything.
func (p *Policy) DecideRequest(h Host, port uint16, method, escapedPath string) Decision {
	if p == nil {
		return Decision{Reason: NoPolicy}
	}
	d := p.Decide(h, port)
	if !d.Allow || !d.Inspect {
		return d
	}
	segs, ok := splitPath(escapedPath)
	if !ok {
		return Decision{Reason: PathNotCanonical}
	}
	if method == "" {
		method = "GET"
	}
	if strings.ToUpper(method) != method {
		// Methods are case-sensitive (RFC 9110 §9.1), but some servers
		// are not: "delete" must not slip past a rule about DELETE.
		return Decision{Reason: MethodNotAllowed}
	}
	q := request{port: port, method: method, segs: segs}
	return p.decide(h, &q)
}

// splitPath splits an escaped absolute path into decoded segments, and
// reports false for a path a server might read differently from us.
func splitPath(escaped string) ([]string, bool) {
	if escaped == "" {
		escaped = "/"
	}
	if escaped[0] != '/' {
		return nil, false
	}
	if escaped == "/" {
		return nil, true
	}
	raw := strings.Split(escaped[1:], "/")
	segs := raw[:0]
	for i, s := range raw {
		if s == "" && i == len(raw)-1 {
			continue // one trailing slash: "/a/" is "/a"
		}
		dec, ok := unescapeSegment(s)
		if !ok || !canonicalSegment(dec) {
			return nil, false
		}
		segs = append(segs, dec)
	}
	return segs, true
}

// canonicalSegment reports whether a decoded segment means the same to
// every server: not empty, not a dot-segment, with no backslash or control
// character, and no dot-segment hidden before a ";" parameter ("..;"),
// which Tomcat, Jetty and Spring read as "..".
func canonicalSegment(seg string) bool {
	base, _, _ := strings.Cut(seg, ";")
	if base == "" || base == "." || base == ".." {
		return false
	}
	for i := 0; i < len(seg); i++ {
		if c := seg[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

// unescapeSegment percent-decodes one path segment, refusing encoded
// slashes and backslashes, NUL and malformed escapes.
func unescapeSegment(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
			return "", false
		}
		c := unhex(s[i+1])<<4 | unhex(s[i+2])
		if c == '/' || c == '\\' || c == 0 {
			return "", false
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), true
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// DNSTypeSet is a set of the DNS record types rules can opt into.
type DNSTypeSet uint8

// Record types rules may open with dns_types.
const (
	DNSTypeTXT DNSTypeSet = 1 << iota
	DNSTypeMX
	DNSTypeSRV
)

var dnsTypeBits = map[DNSType]DNSTypeSet{"TXT": DNSTypeTXT, "MX": DNSTypeMX, "SRV": DNSTypeSRV}

// NameDecision is the outcome of DecideName.
type NameDecision struct {
	Allow  bool
	Reason Reason
	Rule   string // the deciding rule's config path; "" when none matched
	// Wildcard is set when only wildcard rules allow the name: it was
	// chosen by whoever asks, so it can carry data (DNS exfiltration
	// checks apply). An exactly named host cannot.
	Wildcard bool
	// Types are the record types beyond A, AAAA, CNAME, HTTPS and SVCB
	// that the matching allow rules open.
	Types DNSTypeSet
}

// DecideName decides whether a DNS name may be resolved for a sandbox:
// when an allow rule names it (on any port) and no deny rule for every
// port does. Deny rules limited to ports, methods or paths leave the name
// resolvable; the proxy enforces them per connection. It never allocates.
// A nil Policy denies everything.
func (p *Policy) DecideName(h Host) NameDecision {
	if p == nil {
		return NameDecision{Reason: NoPolicy}
	}
	if h.IsLocalhost() {
		return NameDecision{Reason: AddressBlocked}
	}
	var d NameDecision
	exact := false
	add := func(set *ruleSet, isExact bool) bool {
		if set == nil {
			return false
		}
		for _, r := range set.deny {
			if r.ports == nil && !r.l7() {
				d = NameDecision{Reason: DeniedByRule, Rule: r.id}
				return true
			}
		}
		for _, r := range set.allow {
			if !d.Allow {
				d.Allow, d.Reason, d.Rule = true, Allowed, r.id
			}
			exact = exact || isExact
			d.Types |= r.dnsTypes
		}
		return false
	}
	if h.IsIP() {
		if add(p.ips[h.Addr()], true) {
			return d
		}
	} else {
		name := h.Name()
		if add(p.exact[name], true) {
			return d
		}
		for i := strings.IndexByte(name, '.'); i >= 0; i = strings.IndexByte(name, '.') {
			name = name[i+1:]
			if len(name) <= int(h.suffix) {
				break
			}
			if add(p.wild[name], false) {
				return d
			}
		}
	}
	if !d.Allow {
		return NameDecision{Reason: HostNotAllowed}
	}
	d.Wildcard = !exact
	return d
}

package audit

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/publicsuffix"
	"gopkg.in/yaml.v3"

	"github.com/airlockhq/airlock/policy"
)

// DefaultFoldMin is how many names under one registrable domain (on one
// port) a suggestion folds into a wildcard rule.
const DefaultFoldMin = 5

// SuggestOptions filter the events a Suggester reads and say when it
// folds names into wildcards.
type SuggestOptions struct {
	Since     time.Time // events before it are skipped; zero: none
	Sandboxes []string  // only these sandboxes; empty: all
	// FoldMin is the number of distinct names below one registrable
	// domain, on one port, that become one "*.domain" rule; 0 means
	// DefaultFoldMin, a negative value never folds.
	FoldMin int
}

// Suggester builds an allowlist policy from audit events, typically of
// report mode: one allow rule per host and port that was reached
// (decision allow or would_deny). It never suggests an internal address
// or name, a host seen only in refused requests, a host a deny rule
// names, or a host (on any port) with a refusal or alert that points at
// an attack (address_blocked, authority_mismatch,
// credential_host_mismatch, proxy_loop, any alert, DNS alerts included).
// Names fold into "*.domain" only when at least FoldMin of them share a
// registrable domain (never a public suffix) under which nothing was
// refused and no DNS alert was raised.
type Suggester struct {
	opts      SuggestOptions
	want      map[string]bool
	sandboxes map[string]*suggestAcc
	lines     int64
	from, to  time.Time
	keys      int      // distinct keys held, in every table of every sandbox
	badNames  []string // sandboxes left out: their names cannot name a policy
}

type suggestAcc struct {
	seen    map[hostKey]*seenHost
	denied  map[hostKey]bool           // refused by the policy (not in report mode) at least once
	l7      map[hostKey]int64          // requests refused by method or path rules
	tainted map[string]map[string]bool // host (any port) -> why it must not be suggested
	domains map[string]bool            // registrable domains with a DNS alert: never folded
	dropped int64                      // hosts past MaxKeys
}

type seenHost struct {
	requests, tunnels int64
	wouldDeny         int64
	l7Denied          int64 // refused by method or path rules (filled in by rules)
	first, last       time.Time
}

// NewSuggester returns an empty Suggester.
func NewSuggester(opts SuggestOptions) *Suggester {
	if opts.FoldMin == 0 {
		opts.FoldMin = DefaultFoldMin
	}
	z := &Suggester{opts: opts, sandboxes: make(map[string]*suggestAcc)}
	if len(opts.Sandboxes) > 0 {
		z.want = make(map[string]bool)
		for _, s := range opts.Sandboxes {
			z.want[s] = true
		}
	}
	return z
}

// taintReasons are refusals that mark a host, on every port, as a place
// the sandbox must not be sent, whatever else it did there: its name led
// to an internal address (DNS rebinding), a TLS name that was not its own
// (fronting), a credential's placeholder, or Airlock itself; or a deny
// rule names it, which report mode logs as would_deny.
var taintReasons = map[string]bool{
	string(policy.AddressBlocked): true,
	"authority_mismatch":          true,
	"credential_host_mismatch":    true,
	"proxy_loop":                  true,
	string(policy.DeniedByRule):   true,
}

// hostReasons are refusals of the destination itself by the policy.
var hostReasons = map[string]bool{
	string(policy.HostNotAllowed): true,
	string(policy.PortNotAllowed): true,
	string(policy.DeniedByRule):   true,
	string(policy.NoPolicy):       true,
}

// l7Reasons are refusals by method and path rules: the host itself was
// allowed.
var l7Reasons = map[string]bool{
	string(policy.MethodNotAllowed): true,
	string(policy.PathNotAllowed):   true,
	"path_not_canonical":            true,
}

// room reports whether one more key may be held.
func (z *Suggester) room() bool {
	if z.keys >= MaxKeys {
		return false
	}
	z.keys++
	return true
}

// Add reads one record. DNS queries matter only for their alerts: every
// host a sandbox reached through the proxy has a request or tunnel line.
func (z *Suggester) Add(r *Record) {
	if r.Time.Before(z.opts.Since) || (z.want != nil && !z.want[r.Sandbox]) {
		return
	}
	a := z.sandboxes[r.Sandbox]
	if a == nil {
		if !policy.ValidName(r.Sandbox) {
			if len(z.badNames) < 20 && !slices.Contains(z.badNames, r.Sandbox) {
				z.badNames = append(z.badNames, r.Sandbox)
			}
			return
		}
		if !z.room() {
			return
		}
		a = &suggestAcc{seen: map[hostKey]*seenHost{}, denied: map[hostKey]bool{}, l7: map[hostKey]int64{},
			tainted: map[string]map[string]bool{}, domains: map[string]bool{}}
		z.sandboxes[r.Sandbox] = a
	}
	z.lines++
	widen(&z.from, &z.to, r.Time)
	if r.Event == KindDNS {
		if r.Alert != "" {
			z.taint(a, r.QName, r.Alert)
			if d, err := publicsuffix.EffectiveTLDPlusOne(strings.TrimSuffix(r.QName, ".")); err == nil && !a.domains[d] && z.room() {
				a.domains[d] = true
			}
		}
		return
	}
	k := hostKey{r.Host, r.Port}
	switch {
	case r.Alert != "":
		z.taint(a, r.Host, r.Alert)
	case (r.Decision == "deny" || r.Decision == "would_deny") && taintReasons[r.Reason]:
		z.taint(a, r.Host, r.Reason)
	}
	switch r.Decision {
	case "deny":
		if l7Reasons[r.Reason] {
			if _, ok := a.l7[k]; ok || z.room() {
				a.l7[k]++
			}
			return
		}
		if hostReasons[r.Reason] && !a.denied[k] && z.room() {
			a.denied[k] = true
		}
		return
	case "allow", "would_deny":
	default:
		return
	}
	if r.Port == 0 || r.Host == "" {
		return
	}
	s := a.seen[k]
	if s == nil {
		if !z.room() {
			a.dropped++
			return
		}
		s = &seenHost{first: r.Time, last: r.Time}
		a.seen[k] = s
	}
	if r.Event == KindTunnel {
		s.tunnels++
	} else {
		s.requests++
	}
	if r.Decision == "would_deny" {
		s.wouldDeny++
	}
	widen(&s.first, &s.last, r.Time)
}

// taint marks host (any port) as one never to suggest, for why.
func (z *Suggester) taint(a *suggestAcc, host, why string) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	m := a.tainted[host]
	if m == nil {
		if !z.room() {
			return
		}
		m = map[string]bool{}
		a.tainted[host] = m
	}
	m[why] = true
}

// internalTLDs are top-level names that exist only inside networks
// (RFC 6761, RFC 6762, RFC 8375, ICANN's .internal) or by custom: a
// suggestion never allows a name under them, nor a single-label name.
var internalTLDs = map[string]bool{
	"internal": true, "local": true, "localhost": true, "localdomain": true, "lan": true,
	"home": true, "corp": true, "intranet": true, "private": true, "arpa": true,
}

// rule is one suggested allow rule.
type rule struct {
	host    string // a name, an IP literal or "*.domain"
	port    uint16
	comment string
}

// WriteYAML writes the suggested policy: a policy per sandbox (named
// after it, so that it applies to that sandbox) and a sandboxes entry for
// each sandbox but default. The output is sorted, so the same logs always
// give the same file, and policy.Parse accepts it.
func (z *Suggester) WriteYAML(w io.Writer) error {
	names := slices.Sorted(maps.Keys(z.sandboxes))
	if !slices.Contains(names, policy.DefaultSandbox) && z.want == nil {
		names = append([]string{policy.DefaultSandbox}, names...)
	}
	policies := &yaml.Node{Kind: yaml.MappingNode}
	var sandboxes []*yaml.Node
	for _, name := range names {
		a := z.sandboxes[name]
		if a == nil {
			a = &suggestAcc{}
		}
		rules, notes := a.rules(z.opts.FoldMin)
		pol := &yaml.Node{Kind: yaml.MappingNode, Style: 0}
		if len(rules) > 0 {
			allow := &yaml.Node{Kind: yaml.SequenceNode}
			for _, r := range rules {
				allow.Content = append(allow.Content, &yaml.Node{Kind: yaml.MappingNode, HeadComment: r.comment, Content: []*yaml.Node{
					str("host"), str(r.host),
					str("ports"), {Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(r.port)}}},
				}})
			}
			pol.Content = append(pol.Content, str("allow"), allow)
		} else {
			pol.Style = yaml.FlowStyle
		}
		key := str(name)
		key.HeadComment = strings.Join(notes, "\n")
		policies.Content = append(policies.Content, key, pol)
		if name != policy.DefaultSandbox {
			sb := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{str("name"), str(name)}}
			sb.Content[1].LineComment = "uses policy " + name + "; add clients: or give it session tokens"
			sandboxes = append(sandboxes, sb)
		}
	}
	doc := &yaml.Node{Kind: yaml.MappingNode}
	doc.HeadComment = fmt.Sprintf("Suggested by `airlock audit suggest` from %d audit lines", z.lines)
	if z.lines > 0 {
		doc.HeadComment += fmt.Sprintf(", %s to %s", z.from.UTC().Format(time.RFC3339), z.to.UTC().Format(time.RFC3339))
	}
	doc.HeadComment += ".\nEach rule allows a host and port the log shows was reached; review it before use."
	if len(z.badNames) > 0 {
		doc.HeadComment += "\nLeft out: sandboxes whose names cannot name a policy: " + strings.Join(z.badNames, ", ")
	}
	doc.Content = append(doc.Content, str("policies"), policies)
	if len(sandboxes) > 0 {
		doc.Content = append(doc.Content, str("sandboxes"), &yaml.Node{Kind: yaml.SequenceNode, Content: sandboxes})
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{doc}}); err != nil {
		return err
	}
	return enc.Close()
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// rules returns a sandbox's suggested rules, sorted by host and port,
// and notes on what was left out.
func (a *suggestAcc) rules(foldMin int) ([]rule, []string) {
	var notes []string
	var out []rule
	type group struct {
		domain string
		port   uint16
	}
	groups := map[group][]hostKey{}
	excluded := map[string][]string{}
	for k, s := range a.seen {
		s.l7Denied = a.l7[k]
		h, wildcard, err := policy.ParseHostPattern(k.host)
		switch {
		case err != nil || wildcard || h.String() != k.host:
			excluded["not a canonical host"] = append(excluded["not a canonical host"], k.host)
			continue
		case h.IsLocalhost() || isInternalName(h):
			excluded["internal name"] = append(excluded["internal name"], k.host)
			continue
		case h.IsIP():
			if why, special := policy.ClassifySpecial(h.Addr()); special {
				excluded["internal ("+why+")"] = append(excluded["internal ("+why+")"], k.host)
				continue
			}
		}
		if whys, ok := a.tainted[k.host]; ok {
			why := strings.Join(slices.Sorted(maps.Keys(whys)), ", ")
			excluded[why] = append(excluded[why], fmt.Sprintf("%s:%d", k.host, k.port))
			continue
		}
		if !h.IsIP() && foldMin > 0 {
			if d, err := publicsuffix.EffectiveTLDPlusOne(k.host); err == nil && d != k.host {
				groups[group{d, k.port}] = append(groups[group{d, k.port}], k)
				continue
			}
		}
		out = append(out, rule{host: k.host, port: k.port, comment: describe(s)})
	}
	for g, ks := range groups {
		if len(ks) >= foldMin && a.foldable(g.domain, g.port) {
			total := &seenHost{}
			names := make([]string, 0, len(ks))
			for _, k := range ks {
				total.merge(a.seen[k])
				names = append(names, k.host)
			}
			slices.Sort(names)
			shown := names
			if len(shown) > 5 {
				shown = append(slices.Clip(shown[:5]), fmt.Sprintf("and %d more", len(names)-5))
			}
			out = append(out, rule{host: "*." + g.domain, port: g.port,
				comment: fmt.Sprintf("%d names: %s\n%s", len(names), strings.Join(shown, ", "), describe(total))})
			continue
		}
		for _, k := range ks {
			out = append(out, rule{host: k.host, port: k.port, comment: describe(a.seen[k])})
		}
	}
	slices.SortFunc(out, func(x, y rule) int {
		return cmp.Or(cmp.Compare(strings.TrimPrefix(x.host, "*."), strings.TrimPrefix(y.host, "*.")), cmp.Compare(x.host, y.host), cmp.Compare(x.port, y.port))
	})
	for _, why := range slices.Sorted(maps.Keys(excluded)) {
		hosts := excluded[why]
		slices.Sort(hosts)
		notes = append(notes, fmt.Sprintf("left out (%s): %s", why, strings.Join(hosts, ", ")))
	}
	if a.dropped > 0 {
		notes = append(notes, fmt.Sprintf("left out: %d more hosts past the limit of %d", a.dropped, MaxKeys))
	}
	return out, notes
}

// foldable reports whether "*.domain" on port may be suggested: the
// configuration accepts it (not at or below a multi-tenant cloud domain)
// and nothing under the domain was refused on that port.
func (a *suggestAcc) foldable(domain string, port uint16) bool {
	for k := range a.denied {
		if k.port == port && (k.host == domain || strings.HasSuffix(k.host, "."+domain)) {
			return false
		}
	}
	if a.domains[domain] {
		return false
	}
	for host := range a.tainted {
		if host == domain || strings.HasSuffix(host, "."+domain) {
			return false
		}
	}
	_, err := policy.Parse("<suggestion>", fmt.Appendf(nil, "policies: {default: {allow: [{host: \"*.%s\", ports: [%d]}]}}\n", domain, port))
	return err == nil
}

// isInternalName reports whether h is a name that exists only inside
// networks: a single label ("metadata"), or under internalTLDs.
func isInternalName(h policy.Host) bool {
	name := h.Name()
	if name == "" {
		return false
	}
	i := strings.LastIndexByte(name, '.')
	return i < 0 || internalTLDs[name[i+1:]]
}

func (s *seenHost) merge(o *seenHost) {
	s.requests += o.requests
	s.tunnels += o.tunnels
	s.wouldDeny += o.wouldDeny
	s.l7Denied += o.l7Denied
	if s.first.IsZero() || o.first.Before(s.first) {
		s.first = o.first
	}
	if o.last.After(s.last) {
		s.last = o.last
	}
}

// describe is a rule's comment: counts and first and last seen.
func describe(s *seenHost) string {
	c := fmt.Sprintf("%d requests, %d tunnels", s.requests, s.tunnels)
	if s.wouldDeny > 0 {
		c += fmt.Sprintf(" (%d would_deny)", s.wouldDeny)
	}
	c += fmt.Sprintf("; first %s, last %s", s.first.UTC().Format(time.RFC3339), s.last.UTC().Format(time.RFC3339))
	if s.l7Denied > 0 {
		c += fmt.Sprintf("\n%d requests were refused by method or path rules: add methods:/paths: to keep refusing them", s.l7Denied)
	}
	return c
}

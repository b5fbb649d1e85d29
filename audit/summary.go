package audit

import (
	"cmp"
	"slices"
	"time"
)

// MaxKeys bounds the distinct keys (sandboxes, hosts, denials, ...) a
// summary or a suggestion holds, all tables of all sandboxes together:
// past it, new keys are counted under the host "(other)" (a summary) or
// left out (a suggestion). With Read's caps on the length of names, a
// summary's memory grows with the number of distinct hosts, never with
// the size of the log, and a log full of random names cannot exhaust it.
const MaxKeys = 200_000

// OtherHost is the host under which keys past MaxKeys are counted.
const OtherHost = "(other)"

// SummaryOptions filter the events a Summarizer counts.
type SummaryOptions struct {
	Since     time.Time // events before it are skipped; zero: none
	Sandboxes []string  // only these sandboxes; empty: all
}

// Summary is what a set of audit logs says, per sandbox. Its lists are
// sorted (busiest first, then by name) so that output is deterministic.
type Summary struct {
	From      time.Time        `json:"from"` // first and last event counted
	To        time.Time        `json:"to"`
	Lines     int64            `json:"lines"`     // lines read
	Malformed int64            `json:"malformed"` // lines skipped as not audit events
	Examples  []string         `json:"malformed_examples,omitempty"`
	Sandboxes []SandboxSummary `json:"sandboxes"`
}

// SandboxSummary is one sandbox's traffic.
type SandboxSummary struct {
	Sandbox    string    `json:"sandbox"`
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	Requests   int64     `json:"requests"` // http.request events
	Tunnels    int64     `json:"tunnels"`  // tunnel events
	DNSQueries int64     `json:"dns_queries"`
	// Hosts are the destinations reached: requests and tunnels allowed,
	// or let through in report mode (counted in WouldDeny too).
	Hosts []HostSummary `json:"hosts"`
	// Denials are refused requests and tunnels by reason and host;
	// WouldDeny what report mode let through that enforcement would
	// refuse.
	Denials     []Count `json:"denials"`
	WouldDeny   []Count `json:"would_deny"`
	Credentials []Count `json:"credentials"`  // uses by credential name (Count.Key)
	DNSRefusals []Count `json:"dns_refusals"` // by reason and question name
	Alerts      []Count `json:"alerts"`       // by alert (Count.Key) and host
	Limits      []Count `json:"limits"`       // quota refusals and cut-offs by limit (Count.Key)
}

// HostSummary is the traffic to one host and port.
type HostSummary struct {
	Host          string `json:"host"`
	Port          uint16 `json:"port"`
	Requests      int64  `json:"requests"`
	Tunnels       int64  `json:"tunnels"`
	BytesSent     int64  `json:"bytes_sent"`
	BytesReceived int64  `json:"bytes_received"`
	// Status counts responses by class: "2xx", "3xx", "4xx", "5xx".
	Status    map[string]int64 `json:"status"`
	WouldDeny int64            `json:"would_deny,omitempty"`
}

// Count is a number of events with one key (a reason, a credential or an
// alert name), and for most tables a host.
type Count struct {
	Key   string `json:"key"`
	Host  string `json:"host,omitempty"`
	Port  uint16 `json:"port,omitempty"`
	Count int64  `json:"count"`
}

// Summarizer accumulates audit records into a Summary.
type Summarizer struct {
	opts      SummaryOptions
	want      map[string]bool
	sum       Summary
	sandboxes map[string]*sandboxAcc
	keys      int // distinct keys held, in every table of every sandbox
}

type hostKey struct {
	host string
	port uint16
}

type countKey struct {
	key  string
	host string
	port uint16
}

type sandboxAcc struct {
	s                                         SandboxSummary
	hosts                                     map[hostKey]*HostSummary
	denials, wouldDeny, creds, dns, alerts, q map[countKey]int64
}

// NewSummarizer returns an empty Summarizer.
func NewSummarizer(opts SummaryOptions) *Summarizer {
	z := &Summarizer{opts: opts, sandboxes: make(map[string]*sandboxAcc)}
	if len(opts.Sandboxes) > 0 {
		z.want = make(map[string]bool)
		for _, s := range opts.Sandboxes {
			z.want[s] = true
		}
	}
	return z
}

// Stats adds a Read's line counts to the summary.
func (z *Summarizer) Stats(st ReadStats) {
	z.sum.Lines += st.Lines
	z.sum.Malformed += st.Malformed
	for _, e := range st.Examples {
		if len(z.sum.Examples) < maxExamples {
			z.sum.Examples = append(z.sum.Examples, e)
		}
	}
}

// Add counts one record, unless the options filter it out.
func (z *Summarizer) Add(r *Record) {
	if r.Time.Before(z.opts.Since) || (z.want != nil && !z.want[r.Sandbox]) {
		return
	}
	a := z.sandboxes[r.Sandbox]
	if a == nil {
		if z.keys >= MaxKeys {
			return
		}
		z.keys++
		a = &sandboxAcc{s: SandboxSummary{Sandbox: r.Sandbox, From: r.Time, To: r.Time},
			hosts: map[hostKey]*HostSummary{}, denials: map[countKey]int64{}, wouldDeny: map[countKey]int64{},
			creds: map[countKey]int64{}, dns: map[countKey]int64{}, alerts: map[countKey]int64{}, q: map[countKey]int64{}}
		z.sandboxes[r.Sandbox] = a
	}
	widen(&z.sum.From, &z.sum.To, r.Time)
	widen(&a.s.From, &a.s.To, r.Time)
	if r.Limit != "" {
		z.add(a.q, countKey{key: r.Limit})
	}
	if r.Alert != "" {
		host := r.Host
		if r.Event == KindDNS {
			host = r.QName
		}
		z.add(a.alerts, countKey{key: r.Alert, host: host})
	}
	if r.Event == KindDNS {
		a.s.DNSQueries++
		if r.Decision == "deny" {
			z.add(a.dns, countKey{key: r.Reason, host: r.QName})
		}
		return
	}
	if r.Event == KindTunnel {
		a.s.Tunnels++
	} else {
		a.s.Requests++
	}
	if r.Credential != "" && r.Decision == "allow" {
		z.add(a.creds, countKey{key: r.Credential})
	}
	switch r.Decision {
	case "deny":
		z.add(a.denials, countKey{key: r.Reason, host: r.Host, port: r.Port})
		return
	case "would_deny":
		z.add(a.wouldDeny, countKey{key: r.Reason, host: r.Host, port: r.Port})
	}
	k := hostKey{r.Host, r.Port}
	h := a.hosts[k]
	if h == nil {
		if z.keys >= MaxKeys {
			k = hostKey{host: OtherHost}
			h = a.hosts[k]
		} else {
			z.keys++
		}
		if h == nil {
			h = &HostSummary{Host: k.host, Port: k.port, Status: map[string]int64{}}
			a.hosts[k] = h
		}
	}
	if r.Event == KindTunnel {
		h.Tunnels++
	} else {
		h.Requests++
	}
	if r.Decision == "would_deny" {
		h.WouldDeny++
	}
	if !(r.Intercepted && r.Event == KindRequest) {
		// A request inside an intercepted tunnel moved bytes its tunnel's
		// line counts (as TLS records): count them once.
		h.BytesSent += r.BytesSent
		h.BytesReceived += r.BytesReceived
	}
	if c := r.Status / 100; c >= 1 && c <= 5 {
		h.Status[string(rune('0'+c))+"xx"]++
	}
}

func widen(from, to *time.Time, t time.Time) {
	if from.IsZero() || t.Before(*from) {
		*from = t
	}
	if t.After(*to) {
		*to = t
	}
}

// add counts k, folding it into OtherHost once the summary holds MaxKeys
// keys.
func (z *Summarizer) add(m map[countKey]int64, k countKey) {
	if _, ok := m[k]; !ok {
		if z.keys >= MaxKeys {
			k.host, k.port = OtherHost, 0
		} else {
			z.keys++
		}
	}
	m[k]++
}

// Summary returns the summary of the records added so far.
func (z *Summarizer) Summary() Summary {
	s := z.sum
	s.Sandboxes = nil
	for _, a := range z.sandboxes {
		ss := a.s
		ss.Hosts = make([]HostSummary, 0, len(a.hosts))
		for _, h := range a.hosts {
			ss.Hosts = append(ss.Hosts, *h)
		}
		slices.SortFunc(ss.Hosts, func(x, y HostSummary) int {
			return cmp.Or(cmp.Compare(y.Requests+y.Tunnels, x.Requests+x.Tunnels), cmp.Compare(x.Host, y.Host), cmp.Compare(x.Port, y.Port))
		})
		ss.Denials, ss.WouldDeny, ss.Credentials = counts(a.denials), counts(a.wouldDeny), counts(a.creds)
		ss.DNSRefusals, ss.Alerts, ss.Limits = counts(a.dns), counts(a.alerts), counts(a.q)
		s.Sandboxes = append(s.Sandboxes, ss)
	}
	slices.SortFunc(s.Sandboxes, func(x, y SandboxSummary) int { return cmp.Compare(x.Sandbox, y.Sandbox) })
	return s
}

// counts turns a count map into a list, largest first, then by key,
// host and port.
func counts(m map[countKey]int64) []Count {
	out := make([]Count, 0, len(m))
	for k, n := range m {
		out = append(out, Count{Key: k.key, Host: k.host, Port: k.port, Count: n})
	}
	slices.SortFunc(out, func(x, y Count) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Key, y.Key), cmp.Compare(x.Host, y.Host), cmp.Compare(x.Port, y.Port))
	})
	return out
}

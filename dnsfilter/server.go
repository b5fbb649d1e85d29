// Package dnsfilter is Airlock's DNS resolver for the sandbox: meant to be
// its only resolver, it answers only what the sandbox's policy allows.
//
// A query is decided on its name (policy.Policy.DecideName) before
// anything is sent upstream: a denied name is answered REFUSED with
// Extended DNS Error 18 (Prohibited, RFC 8914 §4.19). Names that only
// wildcard rules allow could carry data, so they also pass the
// exfiltration detector (Detector). An allowed name is resolved with a
// fresh query of Airlock's own (new ID, lower-cased name, our EDNS0
// record, none of the client's options), over UDP and again over TCP when
// truncated, and the reply must answer the question asked. An answer with
// any address the proxy would refuse (policy.AddressRules, in A, AAAA or
// HTTPS/SVCB address hints, in any section) is replaced by an empty
// NOERROR with EDE 15 (Blocked): DNS rebinding gets nowhere. In synthetic
// mode allowed names are answered with Airlock's own address and nothing
// leaves the box.
//
// Record types A, AAAA, CNAME, HTTPS and SVCB are answered; TXT, MX and
// SRV only where a rule opts in (dns_types); everything else, ANY and zone
// transfers included, is refused. Answers are cached for their TTL
// (clamped), identical questions in flight share one upstream query, and
// cached answers pass the rebinding filter again. The package never
// resolves names for anything but the query in hand, and logs no record
// data but the blocked address that made it empty an answer.
package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/netutil"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/policy"
)

// MaxUDPSize is the largest UDP answer Airlock sends, whatever the client
// advertises: the DNS Flag Day 2020 size, which avoids IP fragmentation.
const MaxUDPSize = 1232

// MaxTCPConns bounds the TCP connections served at once; more wait to be
// accepted. Idle ones close after 10 seconds.
const MaxTCPConns = 256

// UpstreamTimeout bounds one upstream exchange.
const UpstreamTimeout = 5 * time.Second

// Reasons, as written to the audit log.
const (
	reasonBadType    = "type_not_allowed"  // a record type the policy does not answer
	reasonBadName    = "invalid_name"      // not a host name
	reasonRebinding  = "address_blocked"   // the answer held a blocked address
	reasonUpstream   = "upstream_error"    // no usable answer from upstream
	reasonMismatch   = "upstream_mismatch" // the reply did not answer our question
	reasonNotImpl    = "not_implemented"   // an opcode other than QUERY
	reasonBadVersion = "bad_edns_version"  // EDNS version other than 0
	reasonFormat     = "format_error"      // not exactly one question
)

// Server answers DNS queries from sandboxes. It is safe for concurrent
// use; Serve runs its UDP and TCP listeners.
type Server struct {
	cfg       atomic.Pointer[policy.Config]
	log       *audit.Logger
	errlog    *slog.Logger
	det       *Detector
	cache     *Cache
	upstreams []string // host:port
	udp, tcp  *dns.Client
}

// Options are a Server's collaborators.
type Options struct {
	Audit    *audit.Logger // required
	ErrorLog *slog.Logger  // nil discards
	// Upstreams are the resolvers for forward mode ("IP:port"); empty
	// means network.resolvers, else the system's (/etc/resolv.conf).
	Upstreams []string
}

// New returns a Server for cfg. It fails when forward mode has no
// upstream resolver.
func New(cfg *policy.Config, opts Options) (*Server, error) {
	s := &Server{
		log:    opts.Audit,
		errlog: opts.ErrorLog,
		det:    NewDetector(exfilConfig(cfg.DNS.Exfil)),
		cache:  NewCache(0, 0, 0),
		udp:    &dns.Client{Net: "udp", Timeout: UpstreamTimeout, UDPSize: MaxUDPSize},
		tcp:    &dns.Client{Net: "tcp", Timeout: UpstreamTimeout},
	}
	if s.errlog == nil {
		s.errlog = slog.New(slog.DiscardHandler)
	}
	s.upstreams = opts.Upstreams
	if len(s.upstreams) == 0 {
		for _, r := range cfg.Network.Resolvers {
			s.upstreams = append(s.upstreams, r.AddrPort.String())
		}
	}
	if len(s.upstreams) == 0 && cfg.DNS.Mode != "synthetic" {
		cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return nil, fmt.Errorf("dns: no network.resolvers and no system resolver: %w", err)
		}
		for _, sv := range cc.Servers {
			s.upstreams = append(s.upstreams, net.JoinHostPort(sv, cc.Port))
		}
	}
	if len(s.upstreams) == 0 && cfg.DNS.Mode != "synthetic" {
		return nil, errors.New("dns: forward mode needs an upstream resolver: set network.resolvers")
	}
	s.cfg.Store(cfg)
	return s, nil
}

func exfilConfig(e policy.ExfilSpec) ExfilConfig {
	return ExfilConfig{
		MaxNameLen: e.MaxNameLen, MaxLabelLen: e.MaxLabelLen, EntropyMinLen: e.EntropyMinLen, EntropyBits: e.EntropyBits,
		Window: e.Window, MaxNewNames: e.MaxNewNames, MaxNewBytes: e.MaxNewBytes, QPS: e.QPS, Burst: e.Burst,
	}
}

// Serve listens on addr over UDP and TCP until ctx ends. ready, if not
// nil, receives the bound UDP and TCP addresses once both listen.
func (s *Server) Serve(ctx context.Context, addr string, ready func(udp, tcp net.Addr)) error {
	pc, ln, err := listenUDPAndTCP(addr)
	if err != nil {
		return err
	}
	us := &dns.Server{PacketConn: pc, Handler: s, ReadTimeout: 2 * time.Second}
	ts := &dns.Server{Listener: netutil.LimitListener(ln, MaxTCPConns), Handler: s, ReadTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }}
	errc := make(chan error, 2)
	go func() { errc <- us.ActivateAndServe() }()
	go func() { errc <- ts.ActivateAndServe() }()
	if ready != nil {
		ready(pc.LocalAddr(), ln.Addr())
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	us.ShutdownContext(sctx)
	ts.ShutdownContext(sctx)
	return err
}

// listenUDPAndTCP listens on addr over UDP and on the same port over TCP.
// When addr's port is 0 the kernel picks the UDP port, whose TCP twin may
// be taken: then it tries again with another port, a few times.
func listenUDPAndTCP(addr string) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	for attempt := 0; ; attempt++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dns: listen udp %s: %w", addr, err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if port != "0" || attempt == 4 {
			return nil, nil, fmt.Errorf("dns: listen tcp %s: %w", pc.LocalAddr(), err)
		}
	}
}

// ServeDNS answers one query (dns.Handler).
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	start := time.Now()
	client, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	cfg := s.cfg.Load()
	sb := cfg.SandboxFor(client.Addr())
	ev := &audit.Event{Kind: audit.KindDNS, Start: start, Sandbox: sb.Name, Client: client, Decision: "deny"}
	_, overTCP := w.RemoteAddr().(*net.TCPAddr)
	resp := s.answer(req, cfg, sb, client.Addr(), ev)
	finish(resp, req, overTCP)
	if err := w.WriteMsg(resp); err != nil {
		s.errlog.Debug("dns: write answer", "error", err)
	}
	ev.RCode = dns.RcodeToString[resp.Rcode]
	ev.Answers = len(resp.Answer)
	ev.Duration = time.Since(start)
	s.log.Log(ev)
}

// answer decides and answers req; finish then fits it to the client.
func (s *Server) answer(req *dns.Msg, cfg *policy.Config, sb *policy.Sandbox, client netip.Addr, ev *audit.Event) *dns.Msg {
	if req.Opcode != dns.OpcodeQuery {
		ev.Reason = reasonNotImpl
		return reply(req, dns.RcodeNotImplemented) // RFC 1035 §4.1.1
	}
	if len(req.Question) != 1 {
		ev.Reason = reasonFormat
		return reply(req, dns.RcodeFormatError)
	}
	q := req.Question[0]
	ev.QType = dns.TypeToString[q.Qtype]
	if ev.QType == "" {
		ev.QType = fmt.Sprintf("TYPE%d", q.Qtype)
	}
	ev.Host = strings.ToLower(strings.TrimSuffix(q.Name, "."))
	if opt := req.IsEdns0(); opt != nil && opt.Version() != 0 {
		ev.Reason = reasonBadVersion
		return reply(req, dns.RcodeBadVers) // RFC 6891 §6.1.3
	}
	if q.Qclass != dns.ClassINET {
		ev.Reason = reasonBadType
		return refused(req, dns.ExtendedErrorCodeProhibited, "only class IN is answered")
	}

	if !s.det.AllowRate(client, time.Now()) {
		// Charged before the decision, so refused names cost too.
		ev.Reason = "rate_limited"
		return refused(req, dns.ExtendedErrorCodeProhibited, "Airlock: rate_limited")
	}
	// A presentation-format escape (\. or \000) never belongs in a host
	// name, and would make the labels differ from the text's dots.
	if strings.ContainsRune(q.Name, '\\') {
		ev.Reason = reasonBadName
		return refused(req, dns.ExtendedErrorCodeProhibited, "not a host name")
	}
	// Service labels (_https._tcp.) are decided on the name they serve:
	// at most two, each a service name of RFC 6335 §5.1 (1 to 15 letters,
	// digits and hyphens).
	base, service := ev.Host, 0
	for strings.HasPrefix(base, "_") {
		label, rest, ok := strings.Cut(base, ".")
		if !ok || service == 2 || !serviceLabel(label[1:]) {
			ev.Reason = reasonBadName
			return refused(req, dns.ExtendedErrorCodeProhibited, "not a host name")
		}
		base, service = rest, service+1
	}
	h, err := policy.ParseHost(base)
	if err != nil || h.IsIP() {
		ev.Reason = reasonBadName
		return refused(req, dns.ExtendedErrorCodeProhibited, "not a host name")
	}
	d := sb.Policy.DecideName(h)
	ev.Rule = d.Rule
	wouldDeny := false
	if !d.Allow {
		ev.Reason = string(d.Reason)
		if !sb.Report || !(policy.Decision{Reason: d.Reason}).Reportable() {
			return refused(req, dns.ExtendedErrorCodeProhibited, "Airlock: "+string(d.Reason))
		}
		// Report mode: answer it, on record, as a name any asker chose
		// (the exfiltration checks apply).
		wouldDeny, d.Wildcard = true, true
	}
	if !typeAllowed(q.Qtype, d.Types) || (base != ev.Host && q.Qtype != dns.TypeSRV && q.Qtype != dns.TypeTXT) {
		ev.Reason = reasonBadType
		return refused(req, dns.ExtendedErrorCodeProhibited, "Airlock does not answer "+ev.QType+" for this name")
	}
	// Names chosen by the asker can carry data: those under wildcard rules,
	// and service labels in front of any name.
	if d.Wildcard || service > 0 {
		if v := s.det.CheckData(sb.Name, ev.Host, time.Now()); v.Refuse {
			ev.Reason = v.Reason
			if v.Alert {
				ev.Alert = "dns_exfiltration"
			}
			return refused(req, dns.ExtendedErrorCodeProhibited, "Airlock: "+v.Reason)
		}
	}
	if cfg.DNS.Mode == "synthetic" {
		ev.Decision, ev.Reason = "allow", string(policy.Allowed)
		return synthetic(req, q, cfg.DNS.Answer)
	}
	if addrs, ok := cfg.StaticHost(h); ok && service == 0 {
		// network.hosts pins the name for the proxy: the sandbox gets the
		// same addresses, and no resolver is asked. The address rules
		// apply as to any answer.
		for _, a := range addrs {
			if cfg.AddressRules().Check(a) != nil {
				ev.Reason = reasonRebinding
				m := reply(req, dns.RcodeSuccess)
				addEDE(m, dns.ExtendedErrorCodeBlocked, "Airlock: the answer held a blocked address")
				return m
			}
		}
		ev.Decision, ev.Reason = "allow", string(policy.Allowed)
		if wouldDeny {
			ev.Decision, ev.Reason = "would_deny", string(d.Reason)
		}
		return static(req, q, addrs)
	}
	upstart := time.Now()
	up, cached, err := s.cache.Resolve(q, upstart, func() (*dns.Msg, error) { return s.forward(q) })
	if !cached {
		ev.UpstreamDuration = time.Since(upstart)
	}
	if err != nil {
		ev.Decision = "allow"
		if errors.Is(err, errMismatch) {
			ev.Reason = reasonMismatch
		} else {
			ev.Reason, ev.ErrorType = reasonUpstream, "dns"
		}
		s.errlog.Debug("dns: upstream", "error", err)
		return reply(req, dns.RcodeServerFailure)
	}
	// Cached answers too: the address rules may have changed since.
	if a, bad := blockedAddr(up, cfg.AddressRules()); bad {
		ev.Reason = reasonRebinding
		s.errlog.Info("dns: answer held a blocked address", "sandbox", sb.Name, "dns.question.name", ev.Host, "address", a.String())
		m := reply(req, dns.RcodeSuccess)
		addEDE(m, dns.ExtendedErrorCodeBlocked, "Airlock: the answer held a blocked address")
		return m
	}
	ev.Decision, ev.Reason = "allow", string(policy.Allowed)
	if wouldDeny {
		ev.Decision, ev.Reason = "would_deny", string(d.Reason)
	}
	rcode := up.Rcode
	if rcode > 0xF {
		// Extended codes need the upstream's OPT, which is never passed
		// on: answer SERVFAIL rather than a code the client cannot read.
		rcode = dns.RcodeServerFailure
	}
	m := reply(req, rcode)
	m.Answer, m.Ns = up.Answer, up.Ns
	for _, rr := range up.Extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			m.Extra = append(m.Extra, rr)
		}
	}
	return m
}

// serviceLabel reports whether s (a label without its leading "_") is a
// service name (RFC 6335 §5.1): 1 to 15 letters, digits and hyphens.
func serviceLabel(s string) bool {
	if len(s) == 0 || len(s) > 15 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// typeAllowed says whether qtype is answered: A, AAAA, CNAME, HTTPS and
// SVCB always; TXT, MX and SRV where opened.
func typeAllowed(qtype uint16, opened policy.DNSTypeSet) bool {
	switch qtype {
	case dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeHTTPS, dns.TypeSVCB:
		return true
	case dns.TypeTXT:
		return opened&policy.DNSTypeTXT != 0
	case dns.TypeMX:
		return opened&policy.DNSTypeMX != 0
	case dns.TypeSRV:
		return opened&policy.DNSTypeSRV != 0
	}
	return false
}

var errMismatch = errors.New("the upstream reply does not answer the question")

// forward resolves q upstream with a fresh query: new ID, lower-cased
// name, Airlock's own EDNS0 record and no client options. A truncated
// UDP reply is asked again over TCP. Each upstream is tried in turn.
func (s *Server) forward(q dns.Question) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(strings.ToLower(dns.Fqdn(q.Name)), q.Qtype)
	m.RecursionDesired = true
	m.SetEdns0(MaxUDPSize, false)
	var lastErr error
	for _, up := range s.upstreams {
		r, _, err := s.udp.Exchange(m, up)
		if err == nil && r.Truncated {
			r, _, err = s.tcp.Exchange(m, up)
		}
		if err != nil {
			lastErr = err
			continue
		}
		if len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, m.Question[0].Name) ||
			r.Question[0].Qtype != q.Qtype || r.Question[0].Qclass != q.Qclass || r.Id != m.Id {
			lastErr = errMismatch
			continue
		}
		return r, nil
	}
	return nil, lastErr
}

// blockedAddr returns the first address in any section of m (A, AAAA,
// and HTTPS/SVCB ipv4hint/ipv6hint) that rules refuse.
func blockedAddr(m *dns.Msg, rules *policy.AddressRules) (netip.Addr, bool) {
	check := func(ip net.IP) (netip.Addr, bool) {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			return a, true // unparseable: fail closed
		}
		if len(ip) == net.IPv4len {
			a = a.Unmap()
		}
		return a, rules.Check(a) != nil
	}
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			var ips []net.IP
			switch r := rr.(type) {
			case *dns.A:
				ips = []net.IP{r.A}
			case *dns.AAAA:
				ips = []net.IP{r.AAAA}
			case *dns.HTTPS:
				ips = hints(&r.SVCB)
			case *dns.SVCB:
				ips = hints(r)
			}
			for _, ip := range ips {
				if a, bad := check(ip); bad {
					return a, true
				}
			}
		}
	}
	return netip.Addr{}, false
}

func hints(r *dns.SVCB) []net.IP {
	var ips []net.IP
	for _, kv := range r.Value {
		switch h := kv.(type) {
		case *dns.SVCBIPv4Hint:
			ips = append(ips, h.Hint...)
		case *dns.SVCBIPv6Hint:
			ips = append(ips, h.Hint...)
		}
	}
	return ips
}

// synthetic answers A and AAAA with the configured addresses of Airlock;
// other types get an empty NOERROR.
func synthetic(req *dns.Msg, q dns.Question, answer []policy.Prefix) *dns.Msg {
	addrs := make([]netip.Addr, len(answer))
	for i, p := range answer {
		addrs[i] = p.Addr()
	}
	return static(req, q, addrs)
}

// static answers A and AAAA with a name's network.hosts addresses, and
// any other type with no records.
func static(req *dns.Msg, q dns.Question, addrs []netip.Addr) *dns.Msg {
	m := reply(req, dns.RcodeSuccess)
	for _, a := range addrs {
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 60}
		switch {
		case q.Qtype == dns.TypeA && a.Is4():
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		case q.Qtype == dns.TypeAAAA && a.Is6() && !a.Is4In6():
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	return m
}

// reply is an answer to req (same ID and question) with rcode.
func reply(req *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(req, rcode)
	m.RecursionAvailable = true
	m.Compress = true
	return m
}

// refused is REFUSED with an Extended DNS Error (RFC 8914).
func refused(req *dns.Msg, code uint16, text string) *dns.Msg {
	m := reply(req, dns.RcodeRefused)
	addEDE(m, code, text)
	return m
}

func addEDE(m *dns.Msg, code uint16, text string) {
	opt := m.IsEdns0()
	if opt == nil {
		m.SetEdns0(MaxUDPSize, false)
		opt = m.IsEdns0()
	}
	opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: text})
}

// finish fits resp to the client: its EDNS (our own OPT when the client
// sent one, without echoing any of its options; EDE only to EDNS
// clients), and for UDP its size, at most MaxUDPSize, truncating with TC.
func finish(resp, req *dns.Msg, overTCP bool) {
	size := dns.MinMsgSize
	clientOpt := req.IsEdns0()
	opt := resp.IsEdns0()
	switch {
	case clientOpt == nil && opt != nil:
		// A client without EDNS gets no OPT (RFC 6891 §7); the EDE
		// is lost to it, the rcode still says REFUSED.
		var extra []dns.RR
		for _, rr := range resp.Extra {
			if rr.Header().Rrtype != dns.TypeOPT {
				extra = append(extra, rr)
			}
		}
		resp.Extra = extra
	case clientOpt != nil:
		size = min(int(max(clientOpt.UDPSize(), dns.MinMsgSize)), MaxUDPSize)
		if opt == nil {
			resp.SetEdns0(uint16(MaxUDPSize), false)
		} else {
			opt.SetUDPSize(MaxUDPSize)
		}
	}
	if !overTCP {
		resp.Truncate(size)
	}
}

// Reload makes cfg the configuration queries are decided by, at once.
// Upstreams, mode and detector thresholds stay as they were started
// (Config.CheckReload refuses a change to them).
func (s *Server) Reload(cfg *policy.Config) { s.cfg.Store(cfg) }

package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/broker"
	"github.com/airlockhq/airlock/certs"
	"github.com/airlockhq/airlock/policy"
)

// Proxy reasons: decisions the proxy makes about a request's form, on top
// of policy.Reason values.
const (
	reasonNotProxyRequest   = "not_a_proxy_request" // origin-form request sent to the proxy
	reasonUnsupportedScheme = "unsupported_scheme"  // absolute-form with a scheme other than http/https
	reasonInvalidHost       = "invalid_host"        // the authority is not a canonicalisable host:port
	reasonInvalidRequest    = "invalid_request"     // userinfo in the URL, or an unsupported CONNECT
	reasonProxyLoop         = "proxy_loop"          // the destination is Airlock itself
	reasonUpstreamError     = "upstream_error"      // allowed, but the upstream could not be reached
)

// DialTimeout bounds each upstream TCP connect attempt.
const DialTimeout = 10 * time.Second

// Server is the HTTP forward proxy. It implements http.Handler; serve it
// with an http.Server from NewHTTPServer so the header timeout applies.
type Server struct {
	cfg      atomic.Pointer[policy.Config]
	log      *audit.Logger
	errlog   *slog.Logger
	dialer   *dialer
	gp       *goproxy.ProxyHttpServer
	tr       *http.Transport
	ca       *certs.CA // nil: no interception
	broker   *broker.Broker
	sessions *broker.SessionVerifier
	rates    rateLimiters
	conns    connLimits
	bytes    byteQuotas

	// tunnels tracks open CONNECT tunnels so Shutdown can close them (and
	// their audit lines are written) before the process exits.
	tunnelCtx    context.Context
	closeTunnels context.CancelFunc
	tunnels      sync.WaitGroup
	open         atomic.Int64 // tunnels open now
	live         registry     // open tunnels, for Reload
}

// OpenTunnels returns the number of CONNECT tunnels open now.
func (s *Server) OpenTunnels() int64 { return s.open.Load() }

// Options are a Server's collaborators.
type Options struct {
	// Audit receives one event per request and per tunnel; required.
	Audit *audit.Logger
	// ErrorLog receives operational messages (never request data); nil
	// discards them.
	ErrorLog *slog.Logger
	// CA signs leaf certificates for TLS interception. Nil: hosts whose
	// rules need interception are refused (interception_required).
	CA *certs.CA
	// Broker injects credentials and catches placeholders; nil when the
	// configuration has no credentials.
	Broker *broker.Broker
	// Sessions verifies session tokens; nil when auth is not configured
	// (then Proxy-Authorization is ignored, and stripped as always).
	Sessions *broker.SessionVerifier
}

// New returns a Server enforcing cfg. It reads cfg.TLS.UpstreamCA, if
// set, and fails if that file holds no PEM certificate.
func New(cfg *policy.Config, opts Options) (*Server, error) {
	errlog := opts.ErrorLog
	if errlog == nil {
		errlog = slog.New(slog.DiscardHandler)
	}
	var resolvers []netip.AddrPort
	for _, r := range cfg.Network.Resolvers {
		resolvers = append(resolvers, r.AddrPort)
	}
	s := &Server{log: opts.Audit, errlog: errlog, ca: opts.CA, broker: opts.Broker, sessions: opts.Sessions, dialer: newDialer(resolvers, DialTimeout)}
	s.cfg.Store(cfg)
	s.tunnelCtx, s.closeTunnels = context.WithCancel(context.Background())

	tr, err := newTransport(cfg, s.dialer)
	if err != nil {
		return nil, err
	}
	s.tr = tr

	gp := goproxy.NewProxyHttpServer()
	gp.Tr = s.tr
	gp.ConnectDial = nil
	gp.KeepAcceptEncoding = true
	gp.AllowHTTP2 = false // one request per inner connection read: authority checks stay simple
	if opts.CA != nil {
		gp.CertStore = opts.CA // leaves come from our CA's LRU cache, also for goproxy's own TLS config
	}
	gp.Logger = slogPrintf{errlog}
	// A CONNECT reaches goproxy only when Server.serveConnect decided to
	// intercept it; anything else is refused rather than given goproxy's
	// default (accept and tunnel).
	gp.OnRequest().HandleConnectFunc(func(_ string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		ts, _ := ctx.Req.Context().Value(tunnelKey{}).(*tunnelState)
		if ts == nil || s.ca == nil {
			return goproxy.RejectConnect, ""
		}
		ctx.UserData = ts
		return &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: s.mitmTLSConfig(ts)}, ctx.Req.Host
	})
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "airlock: not a proxy request", http.StatusBadRequest)
	})
	gp.OnRequest().DoFunc(func(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
		if ts, ok := ctx.UserData.(*tunnelState); ok {
			return s.innerRequest(r, ctx, ts)
		}
		ctx.RoundTripper = goproxy.RoundTripperFunc(s.roundTrip)
		return r, nil
	})
	gp.OnResponse().DoFunc(func(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
		if resp == nil {
			return nil
		}
		st, _ := ctx.Req.Context().Value(stateKey{}).(*reqState)
		resp = s.response(resp, ctx, st)
		if ts, ok := ctx.UserData.(*tunnelState); ok && st != nil {
			// Every response in an intercepted tunnel, Airlock's own
			// refusals included: its audit line, and the header cap
			// re-armed for the next request, depend on it.
			s.auditInner(resp, st, ts)
		}
		return resp
	})
	s.gp = gp
	return s, nil
}

// response prepares a response for the client: hop-by-hop headers
// removed, the idle timeout on the body, the response header charged to
// the byte quota (plain HTTP), and anything that echoes an injected
// credential masked or, if it cannot be, replaced by a 502.
func (s *Server) response(resp *http.Response, ctx *goproxy.ProxyCtx, st *reqState) *http.Response {
	removeHopByHop(resp.Header)
	if st != nil && st.fromUpstream {
		if st.recvQuota.capped() {
			st.recvQuota.charge(responseHeaderSize(resp))
		}
		if st.cancel != nil {
			resp.Body = newIdleBody(resp.Body, st.idle, st.cancel, &st.idled)
		}
	}
	if st != nil && st.inj != nil {
		// The upstream must not hand the injected value to the sandbox:
		// mask it in headers and body, and drop trailers (they arrive
		// after the body, too late to mask before goproxy writes them).
		st.inj.ScrubHeader(resp.Header)
		resp.Header.Del("Trailer")
		resp.Trailer = nil
		if ce := encodedAs(resp.Header); ce != "" {
			// Airlock asked for identity; an upstream that encodes
			// anyway gets no body through, since it cannot be masked.
			resp.Body.Close()
			st.fromUpstream = false
			st.ev.Reason, st.ev.ErrorType = reasonUpstreamError, "unmaskable_encoding"
			return cannedResponse(ctx.Req, http.StatusBadGateway, reasonUpstreamError,
				"The upstream sent an encoded ("+ce+") response to a request carrying a credential; Airlock cannot check it for the credential, so it is not passed on.\n")
		}
		resp.Body = st.inj.ScrubBody(resp.Body)
	}
	return resp
}

// responseHeaderSize is the size of resp's status line and header as
// received, give or take the reason phrase's spelling.
func responseHeaderSize(resp *http.Response) int64 {
	n := len("HTTP/1.1 ") + len(resp.Status) + 2
	for k, vs := range resp.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return int64(n + 2)
}

// newTransport is the upstream transport: it dials through d and verifies
// TLS against the system roots plus tls.upstream_ca.
func newTransport(cfg *policy.Config, d *dialer) (*http.Transport, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if cfg.TLS.UpstreamCA != "" {
		pemData, err := os.ReadFile(cfg.TLS.UpstreamCA)
		if err != nil {
			return nil, fmt.Errorf("tls.upstream_ca: %w", err)
		}
		if !roots.AppendCertsFromPEM(pemData) {
			return nil, fmt.Errorf("tls.upstream_ca: %s holds no PEM certificate", cfg.TLS.UpstreamCA)
		}
	}
	return &http.Transport{
		Proxy:                 nil, // never proxy-from-environment: we are the egress
		DialContext:           d.dialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		// Go's default is 10 MiB of response header per request in
		// memory; a header is never data worth that much.
		MaxResponseHeaderBytes: 1 << 20,
		ExpectContinueTimeout:  time.Second,
		IdleConnTimeout:        90 * time.Second,
		// Size the upstream pool for the concurrency served: Go's default
		// of 2 idle connections per host makes a busy proxy redial.
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		DisableCompression:  true, // pass the client's Accept-Encoding through untouched
	}, nil
}

// GuardedClient returns an HTTP client for Airlock's own requests (token
// endpoints of credential minters): it resolves and dials exactly as the
// proxy does, so every address is checked (network.allow_cidrs and
// deny_cidrs apply), verifies TLS against the system roots plus
// tls.upstream_ca, never uses proxy variables and never follows
// redirects.
func GuardedClient(cfg *policy.Config) (*http.Client, error) {
	var resolvers []netip.AddrPort
	for _, r := range cfg.Network.Resolvers {
		resolvers = append(resolvers, r.AddrPort)
	}
	tr, err := newTransport(cfg, newDialer(resolvers, DialTimeout))
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Transport:     withConfig{tr, cfg},
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// withConfig puts the configuration in each request's context, where the
// guarded dialer looks for it.
type withConfig struct {
	rt  http.RoundTripper
	cfg *policy.Config
}

func (w withConfig) RoundTrip(r *http.Request) (*http.Response, error) {
	return w.rt.RoundTrip(r.WithContext(context.WithValue(r.Context(), configKey{}, w.cfg)))
}

// Config returns the configuration in force.
func (s *Server) Config() *policy.Config { return s.cfg.Load() }

// SetListenAddrs tells the proxy its own listener addresses, so that a
// request aimed back at Airlock is refused (proxy_loop) instead of looping.
func (s *Server) SetListenAddrs(addrs []netip.AddrPort) { s.dialer.setSelf(addrs) }

// NewHTTPServer returns an http.Server for s with the configured header
// read timeout, header size cap (limits.max_header_bytes; net/http
// answers 431 itself above it) and client keep-alive idle timeout.
func (s *Server) NewHTTPServer() *http.Server {
	cfg := s.cfg.Load()
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: cfg.Limits.HeaderTimeout,
		IdleTimeout:       cfg.Limits.IdleTimeout,
		MaxHeaderBytes:    int(cfg.Limits.MaxHeaderBytes),
		ErrorLog:          slog.NewLogLogger(s.errlog.Handler(), slog.LevelWarn),
	}
}

// closeWait bounds how long Shutdown waits for tunnels it has closed to
// write their audit lines.
const closeWait = 5 * time.Second

// Shutdown drains open tunnels: it lets them carry on until they end or
// ctx ends (the drain time), then closes those still open (audit
// close_reason "shutdown") and waits up to 5s for their audit lines. Call
// it after http.Server.Shutdown, which stops new connections. It returns
// an error only if closed tunnels did not finish in those 5s.
func (s *Server) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.tunnels.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.closeTunnels()
		select {
		case <-done:
		case <-time.After(closeWait):
			return errors.New("tunnels did not close within 5s of shutdown; their audit lines may be missing")
		}
	}
	s.tr.CloseIdleConnections()
	return nil
}

// ServeHTTP identifies the sandbox, checks the request's form, decides on
// the host before any DNS lookup, and then refuses, forwards or tunnels.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg.Load()
	client, _ := netip.ParseAddrPort(r.RemoteAddr)
	ev := &audit.Event{
		Start:  time.Now(),
		Client: client,
		Method: r.Method,
		Kind:   audit.KindRequest,
	}
	if r.Method == http.MethodConnect {
		ev.Kind = audit.KindTunnel
	}
	sb, id, why := s.identify(r, cfg, client.Addr())
	if sb == nil {
		// The header, and whatever token it held, go nowhere else.
		w.Header().Set("Proxy-Authenticate", `Basic realm="airlock"`)
		s.refuseEarly(w, r, ev, http.StatusProxyAuthRequired, reasonAuth, "Airlock needs a session token: "+why+
			". Put it in the proxy URL, as in HTTPS_PROXY=http://SANDBOX:TOKEN@airlock:3128.\n")
		return
	}
	ev.Sandbox = sb.Name
	if n := headerSize(r); n > sb.MaxHeaderBytes {
		ev.Limit = "max_header_bytes"
		s.refuseEarly(w, r, ev, http.StatusRequestHeaderFieldsTooLarge, reasonQuota, fmt.Sprintf(
			"Airlock refused this request: its header is %d bytes, over sandbox %q's limit of %d (limits.max_header_bytes).\n", n, sb.Name, sb.MaxHeaderBytes))
		return
	}
	if over := s.overQuota(sb, ev); over != nil {
		ev.Limit = over.limit
		w.Header().Set("Retry-After", retryAfter(over.retry))
		s.refuseEarly(w, r, ev, http.StatusTooManyRequests, reasonQuota, fmt.Sprintf(
			"Airlock refused this request: sandbox %q is over its limit of %s (limits.%s). Slow down and retry after the time in Retry-After.\n", sb.Name, over.detail, over.limit))
		return
	}
	if r.Method == http.MethodConnect {
		s.serveConnect(w, r, cfg, sb, id, ev)
		return
	}
	s.serveHTTP(w, r, cfg, sb, ev)
}

// refuseEarly answers a request refused before its form is checked
// (authentication, quotas) and records its audit event, naming the host
// when r.Host parses as one.
func (s *Server) refuseEarly(w http.ResponseWriter, r *http.Request, ev *audit.Event, status int, reason, body string) {
	ev.Decision, ev.Reason, ev.Status = "deny", reason, status
	defaultPort := uint16(80)
	if strings.EqualFold(r.URL.Scheme, "https") {
		defaultPort = 443
	}
	if h, port, err := policy.ParseAuthority(r.Host, defaultPort); err == nil {
		ev.Host, ev.Port = h.String(), port
	}
	writeDecision(w, status, reason, body)
	ev.Duration = time.Since(ev.Start)
	s.record(ev)
}

// reasonAuth refuses a client without a valid session token (407).
const reasonAuth = "auth_required"

// identify returns the sandbox a request comes from, and who that is: the
// sandbox its session token names (Proxy-Authorization: Basic with the
// token as password, or Bearer), else, unless auth.required, the one its
// address maps to. It returns nil and why when the client must
// authenticate: a token that does not verify is refused even when none is
// required (fail closed).
func (s *Server) identify(r *http.Request, cfg *policy.Config, client netip.Addr) (*policy.Sandbox, identity, string) {
	id := identity{client: client}
	token := sessionToken(r.Header.Get("Proxy-Authorization"))
	if s.sessions == nil || token == "" {
		if cfg.Auth.Required {
			return nil, id, "none was presented"
		}
		return cfg.SandboxFor(client), id, ""
	}
	sess, err := s.sessions.Verify(token, cfg.Auth.Revoked)
	if err != nil {
		return nil, id, err.Error()
	}
	id.sandbox, id.tokenID = sess.Sandbox, sess.ID
	sb, ok := cfg.Sandbox(sess.Sandbox)
	if !ok {
		return nil, id, "the token names a sandbox this configuration does not have"
	}
	return sb, id, ""
}

// sessionToken extracts a token from a Proxy-Authorization value: the
// password of Basic credentials (the user name is ignored), or Bearer.
func sessionToken(v string) string {
	scheme, rest, _ := strings.Cut(v, " ")
	switch strings.ToLower(scheme) {
	case "bearer":
		return strings.TrimSpace(rest)
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
		if err != nil {
			return ""
		}
		_, pass, _ := strings.Cut(string(raw), ":")
		return pass
	}
	return ""
}

// serveHTTP handles an absolute-form request (RFC 9112 §3.2.2).
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request, cfg *policy.Config, sb *policy.Sandbox, ev *audit.Event) {
	rc := http.NewResponseController(w)
	cw := &countingWriter{ResponseWriter: w, rc: rc, idle: sb.IdleTimeout, quota: meter{&s.bytes, sb, dirReceived}}
	st := &reqState{ev: ev, idle: sb.IdleTimeout, recvQuota: meter{&s.bytes, sb, dirReceived}}
	var sent atomic.Int64 // the transport may still read the body after RoundTrip returns
	// Per-write deadlines (countingWriter) must not outlive this request:
	// clear a stale one now, and give the server's final flush idle.
	rc.SetWriteDeadline(time.Time{})
	defer func() {
		// After the handler, net/http may still flush the response and
		// read what is left of an unread body (then set its own deadlines
		// for the next request): both get idle, never forever.
		rc.SetWriteDeadline(time.Now().Add(sb.IdleTimeout))
		rc.SetReadDeadline(time.Now().Add(sb.IdleTimeout))
	}()
	defer func() {
		ev.Status = cw.status
		ev.BytesSent = sent.Load()
		if st.fromUpstream {
			ev.BytesReceived = cw.n // not Airlock's own refusal text
		}
		ev.Duration = time.Since(ev.Start)
		s.record(ev)
	}()
	ev.Path = audit.Path(r.URL.EscapedPath())
	ev.Query = audit.QueryKeys(r.URL.RawQuery)

	if !r.URL.IsAbs() || r.URL.Host == "" {
		ev.Path, ev.Query = "", ""
		s.refuse(cw, ev, http.StatusBadRequest, reasonNotProxyRequest, "",
			"Airlock is a forward proxy: send absolute-form requests (set HTTP_PROXY/HTTPS_PROXY to this address).")
		return
	}
	scheme := strings.ToLower(r.URL.Scheme)
	ev.Scheme = scheme
	var defaultPort uint16
	switch scheme {
	case "http":
		defaultPort = 80
	case "https":
		defaultPort = 443
	default:
		ev.Host = r.URL.Hostname()
		s.refuse(cw, ev, http.StatusBadRequest, reasonUnsupportedScheme, "",
			fmt.Sprintf("Airlock forwards http and https URLs only, not %q.", scheme))
		return
	}
	if r.URL.User != nil {
		s.refuse(cw, ev, http.StatusBadRequest, reasonInvalidRequest, "",
			"Credentials in the URL (user:password@) are not forwarded; remove them.")
		return
	}
	h, port, err := policy.ParseAuthority(r.URL.Host, defaultPort)
	if err != nil {
		s.refuse(cw, ev, http.StatusBadRequest, reasonInvalidHost, "", err.Error()+".")
		return
	}
	ev.Host, ev.Port = h.String(), port

	d := cfg.DecideRequest(sb, h, port, r.Method, r.URL.EscapedPath())
	ev.Rule = d.Rule
	wouldDeny := !d.Allow && sb.Report && d.Reportable()
	if !d.Allow && !wouldDeny {
		s.deny(cw, ev, string(d.Reason))
		return
	}
	if cfg.Decide(sb, h, port).Inspect {
		if ref := inspectedShape(r); ref != nil {
			ev.Decision, ev.Reason = "deny", ref.reason
			writeDecision(cw, ref.status, ref.reason, ref.body)
			return
		}
	}
	ev.Decision, ev.Reason = "allow", string(d.Reason)
	if wouldDeny {
		// Report mode: let it through, on record.
		ev.Decision = "would_deny"
	}

	// One canonical authority: the upstream sees exactly the host and port
	// the decision was made on. A Host header that disagrees with the
	// absolute URI never leaves Airlock: net/http drops it when it reads an
	// absolute-form request, as RFC 9112 §3.2.2 requires of a proxy.
	r.URL.Scheme = scheme
	r.URL.Host = authority(h, port)
	r.Host = r.URL.Host
	if (scheme == "http" && port == 80) || (scheme == "https" && port == 443) {
		r.Host = strings.TrimSuffix(r.Host, fmt.Sprintf(":%d", port))
	}
	removeHopByHop(r.Header)
	// Headers count toward the byte quota as bodies do: a sandbox must not
	// carry data out in them for free.
	if sb.MaxBytesSent > 0 {
		s.bytes.charge(sb, dirSent, headerSize(r))
	}
	if ref := bodyTooLarge(r, sb); ref != nil {
		ev.Decision, ev.Reason, ev.Limit = "deny", ref.reason, "max_request_body"
		writeDecision(cw, ref.status, ref.reason, ref.body)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		// Wrapped before anything reads it (the placeholder check does):
		// each read has the idle timeout to finish, and counts toward the
		// body cap and the byte quota.
		r.Body = &countingReader{ReadCloser: r.Body, n: &sent, rc: rc, idle: sb.IdleTimeout,
			max: sb.MaxRequestBody, quota: meter{&s.bytes, sb, dirSent}, idled: &st.clientIdled}
	}
	if ref := s.applyCredentials(r, st, sb, h, port, d, scheme == "https"); ref != nil {
		ev.Decision, ev.Reason = "deny", ref.reason
		writeDecision(cw, ref.status, ref.reason, ref.body)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st.cancel = cancel
	ctx = context.WithValue(ctx, configKey{}, cfg)
	ctx = context.WithValue(ctx, stateKey{}, st)
	ctx = withPeerTrace(ctx, ev) // here, not in roundTrip: one request copy fewer
	fwd := r.WithContext(ctx)
	// Request trailers are never forwarded: they come after the body,
	// after every check. (Set on the copy: net/http fills the original's
	// when the body has been read to its end.)
	fwd.Trailer = nil
	s.gp.ServeHTTP(cw, fwd)
	switch {
	case cw.cut:
		ev.CloseReason, ev.Limit = reasonQuota, dirReceived.limit()
	case st.idled.Load():
		ev.CloseReason, ev.Limit = "idle_timeout", "idle_timeout"
	default:
		return
	}
	// The response was cut off (byte quota, or an upstream that stalled):
	// end the connection without the rest, so that it cannot look
	// complete (a chunked one would). The deferred audit line is still
	// written.
	panic(http.ErrAbortHandler)
}

// headerSize returns the size of r's header as it was received: request
// line, fields (Host included) and the blank line, counting ": " and
// CRLF.
func headerSize(r *http.Request) int64 {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return int64(n + 2)
}

// bodyTooLarge refuses (413) a request whose Content-Length is over sb's
// limits.max_request_body; a body of unknown length is cut off by
// countingReader instead.
func bodyTooLarge(r *http.Request, sb *policy.Sandbox) *refusal {
	if sb.MaxRequestBody <= 0 || r.ContentLength <= sb.MaxRequestBody {
		return nil
	}
	return &refusal{status: http.StatusRequestEntityTooLarge, reason: reasonQuota, body: fmt.Sprintf(
		"Airlock refused this request: its body is %d bytes, over sandbox %q's limit of %d (limits.max_request_body).\n", r.ContentLength, sb.Name, sb.MaxRequestBody)}
}

// encodedAs returns the response's content coding if it is anything but
// identity, looking at every Content-Encoding value (a second header
// must not hide gzip behind a first "identity").
func encodedAs(h http.Header) string {
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return c
			}
		}
	}
	return ""
}

// reqState is what the round tripper learns about a forwarded request.
type reqState struct {
	ev           *audit.Event
	fromUpstream bool               // the response came from the upstream, not from Airlock
	inj          *broker.Injection  // what was injected, to scrub from the response
	idle         time.Duration      // the sandbox's idle timeout
	cancel       context.CancelFunc // ends the upstream request (an idle upstream body)
	sent         atomic.Int64       // request body bytes read (intercepted requests)
	reqBody      io.Closer          // the request body as received (intercepted requests), drained when the response is done
	recvQuota    meter              // plain HTTP: the sandbox's received-bytes quota, charged the response header too
	idled        atomic.Bool        // the upstream's response stalled past idle and was cut off
	clientIdled  atomic.Bool        // the client's request body stalled past idle
}

type stateKey struct{}

// roundTrip sends a decided request upstream through the guarded
// transport. It never returns an error to goproxy (which would echo it to
// the client): a blocked address becomes a 403, anything else a 502 that
// names no internal address.
func (s *Server) roundTrip(r *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
	st, _ := r.Context().Value(stateKey{}).(*reqState)
	if st == nil {
		st = &reqState{ev: new(audit.Event)}
	}
	ev := st.ev
	resp, err := s.tr.RoundTrip(r) // the context carries withPeerTrace (serveHTTP, innerRequest)
	if err == nil {
		st.fromUpstream = true
		return resp, nil
	}
	var pe *broker.PlaceholderError
	if errors.As(err, &pe) {
		// The body scanner stopped the upload before the placeholder.
		ev.Decision, ev.Reason = "deny", reasonCredentialHostMismatch
		ev.Credential, ev.Alert = pe.Found.Credential, alertPlaceholder
		s.errlog.Warn("placeholder in a request body: request refused", "sandbox", ev.Sandbox, "credential", pe.Found.Credential,
			"server.address", ev.Host)
		return cannedResponse(r, http.StatusForbidden, reasonCredentialHostMismatch,
			denyBody(ev.Host, ev.Port, reasonCredentialHostMismatch, ev.Sandbox)), nil
	}
	if st.clientIdled.Load() {
		// The client stopped sending its body for idle_timeout.
		ev.CloseReason, ev.Limit, ev.ErrorType = "idle_timeout", "idle_timeout", "timeout"
		return cannedResponse(r, http.StatusRequestTimeout, reasonUpstreamError,
			"Airlock stopped waiting for the rest of this request's body (limits.idle_timeout).\n"), nil
	}
	var qe *quotaError
	if errors.As(err, &qe) {
		// A body without Content-Length crossed max_request_body, or the
		// upload crossed max_bytes_sent: the upstream got part of it,
		// and the request is abandoned.
		ev.Decision, ev.Reason, ev.Limit = "deny", reasonQuota, qe.limit
		status, retry := http.StatusTooManyRequests, "the time in Retry-After"
		if qe.limit == "max_request_body" {
			status, retry = http.StatusRequestEntityTooLarge, "never with this body"
		}
		resp := cannedResponse(r, status, reasonQuota, fmt.Sprintf(
			"Airlock cut off this request's body: sandbox %q is over its limits.%s. Retry %s.\n", ev.Sandbox, qe.limit, retry))
		if status == http.StatusTooManyRequests {
			resp.Header.Set("Retry-After", retryAfter(qe.retry))
		}
		return resp, nil
	}
	reason, status, msg := classifyDialError(err)
	ev.Reason = reason
	if status == http.StatusForbidden {
		ev.Decision = "deny"
		return cannedResponse(r, status, reason, denyBody(ev.Host, ev.Port, reason, ev.Sandbox)), nil
	}
	ev.ErrorType = errorType(err)
	s.errlog.Debug("upstream request failed", "host", ev.Host, "error.type", ev.ErrorType)
	return cannedResponse(r, status, reason, msg), nil
}

// classifyDialError maps an upstream failure to a reason, a status and a
// message for the client that names no address.
func classifyDialError(err error) (reason string, status int, msg string) {
	var blocked *policy.BlockedAddrError
	switch {
	case errors.As(err, &blocked):
		return string(policy.AddressBlocked), http.StatusForbidden, ""
	case errors.Is(err, errSelf):
		return reasonProxyLoop, http.StatusForbidden, ""
	}
	var re *resolveError
	if errors.As(err, &re) {
		return reasonUpstreamError, http.StatusBadGateway, "Airlock could not resolve the upstream host.\n"
	}
	return reasonUpstreamError, http.StatusBadGateway, "Airlock could not reach the upstream server.\n"
}

// errorType names the class of an upstream failure for the audit log
// (OpenTelemetry error.type), without the message, which may hold a URL.
func errorType(err error) string {
	var re *resolveError
	var ne net.Error
	switch {
	case errors.As(err, &re):
		return "dns"
	case errors.Is(err, syscallECONNREFUSED):
		return "connection_refused"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection_closed"
	}
	var te *tls.CertificateVerificationError
	if errors.As(err, &te) {
		return "tls_certificate"
	}
	return "other"
}

// refuse answers a malformed request with status and writes nothing
// upstream.
func (s *Server) refuse(w http.ResponseWriter, ev *audit.Event, status int, reason, rule, msg string) {
	ev.Decision, ev.Reason, ev.Rule = "deny", reason, rule
	writeDecision(w, status, reason, msg+"\n")
}

// deny answers a policy denial with 403.
func (s *Server) deny(w http.ResponseWriter, ev *audit.Event, reason string) {
	ev.Decision, ev.Reason = "deny", reason
	writeDecision(w, http.StatusForbidden, reason, denyBody(ev.Host, ev.Port, reason, ev.Sandbox))
}

// countingWriter records the status and body bytes written to the
// client, and gives each write idle to finish: a client that stops
// reading must not hold the connection and its upstream forever.
type countingWriter struct {
	http.ResponseWriter
	rc     *http.ResponseController // nil: no per-write deadline
	idle   time.Duration
	status int
	n      int64
	quota  meter // the sandbox's received-bytes quota
	cut    bool  // a write crossed the quota; the rest was not written
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 && code >= 200 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.idle > 0 && c.rc != nil {
		c.rc.SetWriteDeadline(time.Now().Add(c.idle))
	}
	var over error
	if room := c.quota.room(); room < int64(len(p)) {
		p, over = p[:room], &quotaError{limit: c.quota.dir.limit()}
		c.cut = true
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	c.quota.charge(int64(n))
	if err == nil {
		err = over
	}
	return n, err
}

// ReadFrom copies a response body to the client through a pooled buffer.
// Without it io.Copy allocates 32 KiB per response, and so does
// http.response.ReadFrom when the source is not a file (net.TCPConn's
// generic fallback).
func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{c}, r, *bp)
}

// copyBufs holds 32 KiB buffers for copying response bodies.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// countingReader counts request body bytes read, and gives each read idle
// to finish: a client that stops sending its body is cut off. A read
// that would take the body past max bytes (limits.max_request_body), or
// the sandbox past its sent-bytes quota, fails with a *quotaError
// instead; the bytes over are never handed on.
type countingReader struct {
	io.ReadCloser
	n     *atomic.Int64
	rc    *http.ResponseController
	idle  time.Duration
	max   int64 // 0: no cap
	quota meter
	idled *atomic.Bool // set when a read waits idle for the client; nil: not tracked
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.rc != nil && c.idle > 0 {
		c.rc.SetReadDeadline(time.Now().Add(c.idle))
	}
	var over error
	if c.max > 0 {
		// Read one byte more than the cap allows, to see the body go over.
		if left := c.max - c.n.Load(); int64(len(p)) > left+1 {
			p = p[:left+1]
		}
	}
	room := c.quota.room()
	if room == 0 {
		return 0, &quotaError{limit: c.quota.dir.limit(), retry: c.quota.windowLeft()}
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.ReadCloser.Read(p)
	if c.max > 0 && c.n.Load()+int64(n) > c.max {
		n, over = int(c.max-c.n.Load()), &quotaError{limit: "max_request_body"}
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The client went quiet. The deadline stays: whatever drains the
		// body next (the transport's Close) must not wait forever either.
		if c.idled != nil {
			c.idled.Store(true)
		}
		err = errClientIdle
	case err == io.EOF && c.rc != nil:
		// Done with the body: net/http's background read (which watches
		// for the client going away) must not trip over our deadline.
		c.rc.SetReadDeadline(time.Time{})
	}
	c.n.Add(int64(n))
	c.quota.charge(int64(n))
	if over != nil {
		return n, over
	}
	return n, err
}

// errClientIdle is a request body read that waited idle_timeout for the
// client.
var errClientIdle = errors.New("airlock: the client stopped sending the request body (idle_timeout)")

// slogPrintf adapts goproxy's Printf logger to slog at debug level.
type slogPrintf struct{ l *slog.Logger }

func (p slogPrintf) Printf(format string, v ...any) {
	p.l.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "goproxy")
}

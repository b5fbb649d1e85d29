package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/policy"
)

// reasonAuthorityMismatch refuses a request inside an intercepted tunnel
// whose SNI, Host or absolute URI names another authority than the
// CONNECT: one canonical authority per tunnel, so nothing decided for one
// host is sent (or injected) for another.
const reasonAuthorityMismatch = "authority_mismatch"

// tunnelState is what an intercepted tunnel knows; its inner requests
// share it through goproxy's ProxyCtx.UserData.
type tunnelState struct {
	id   identity        // who opened the tunnel: each inner request is decided for its sandbox under the configuration then in force
	sb   *policy.Sandbox // the sandbox when the tunnel opened
	host policy.Host     // the CONNECT host, canonical
	port uint16
	ev   *audit.Event // the tunnel's own event, written when it closes

	mu       sync.Mutex
	mismatch string // why the TLS handshake was refused, if it was

	conn atomic.Pointer[watchedConn] // the client connection, once hijacked
}

type tunnelKey struct{}

// intercept hands an allowed CONNECT whose host has method or path rules
// to goproxy's TLS interception (TLS terminated with a leaf from the CA).
// Every inner request is then checked against the tunnel's authority and
// decided again with its method and path (innerRequest). The tunnel's
// audit line is written when the client connection closes.
func (s *Server) intercept(w http.ResponseWriter, r *http.Request, ts *tunnelState) {
	ts.ev.Intercepted = true
	s.tunnels.Add(1)
	s.open.Add(1)
	var once sync.Once
	done := func(sent, received int64) {
		once.Do(func() {
			ts.ev.BytesSent, ts.ev.BytesReceived = sent, received
			ts.mu.Lock()
			if ts.mismatch != "" {
				ts.ev.Decision, ts.ev.Reason, ts.ev.CloseReason = "deny", reasonAuthorityMismatch, "refused"
			}
			ts.mu.Unlock()
			if ts.ev.CloseReason == "" {
				ts.ev.CloseReason = "closed"
			}
			ts.ev.Duration = time.Since(ts.ev.Start)
			s.record(ts.ev)
			s.open.Add(-1)
			s.tunnels.Done()
		})
	}
	hw := &hijackWatcher{ResponseWriter: w, s: s, ts: ts, done: done}
	s.gp.ServeHTTP(hw, r.WithContext(context.WithValue(r.Context(), tunnelKey{}, ts)))
	if !hw.hijacked {
		done(0, 0) // goproxy refused before taking the connection
	}
}

// mitmTLSConfig returns goproxy's TLS configuration hook for a tunnel: the
// client must ask for the CONNECT host by SNI (any other name, or none for
// a name host, fails the handshake), and is served a leaf for that host.
func (s *Server) mitmTLSConfig(ts *tunnelState) func(string, *goproxy.ProxyCtx) (*tls.Config, error) {
	return func(string, *goproxy.ProxyCtx) (*tls.Config, error) {
		return &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"},
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				if why := sniMismatch(hello.ServerName, ts.host); why != "" {
					ts.mu.Lock()
					ts.mismatch = why
					ts.mu.Unlock()
					return nil, errors.New("airlock: " + why)
				}
				return s.ca.Leaf(ts.host.String())
			},
		}, nil
	}
}

// sniMismatch says why a TLS ClientHello's SNI does not name host, or ""
// when it does. Clients send no SNI for IP addresses (RFC 6066 §3).
func sniMismatch(sni string, host policy.Host) string {
	if sni == "" {
		if host.IsIP() {
			return ""
		}
		return "the TLS ClientHello names no server (SNI); expected " + host.String()
	}
	h, err := policy.ParseHost(sni)
	if err != nil || h != host {
		return "the TLS server name (SNI) differs from the CONNECT host " + host.String()
	}
	return ""
}

// innerRequest checks and decides one request read inside an intercepted
// tunnel, before anything is sent upstream: it must be HTTPS, name the
// tunnel's authority in both its URI and Host header, and be allowed by
// Config.DecideRequest with its method and path. A refusal becomes the
// response (goproxy sends it instead of forwarding).
func (s *Server) innerRequest(r *http.Request, ctx *goproxy.ProxyCtx, ts *tunnelState) (*http.Request, *http.Response) {
	cfg := s.cfg.Load() // the configuration in force now: a reload applies to open tunnels' next requests
	ev := &audit.Event{
		Kind:        audit.KindRequest,
		Start:       time.Now(),
		Sandbox:     ts.sb.Name,
		Client:      ts.ev.Client,
		Method:      r.Method,
		Scheme:      "https",
		Host:        ts.host.String(),
		Port:        ts.port,
		Path:        audit.Path(r.URL.EscapedPath()),
		Query:       audit.QueryKeys(r.URL.RawQuery),
		Intercepted: true,
	}
	st := &reqState{ev: ev, reqBody: r.Body}
	if c := ts.conn.Load(); c != nil {
		c.headerRead() // what follows is this request's body, until its response is done
	}
	r = r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
	ctx.Req = r // goproxy hands ctx.Req to the response handlers

	refuse := func(status int, reason, body string) (*http.Request, *http.Response) {
		ev.Decision, ev.Reason = "deny", reason
		return r, cannedResponse(r, status, reason, body)
	}
	sb, ok := ts.id.sandboxIn(cfg)
	if !ok {
		return refuse(http.StatusForbidden, reasonAuth, "Airlock no longer accepts the session token this tunnel was opened with.\n")
	}
	ev.Sandbox = sb.Name
	if ok, wait := s.rates.allow(sb); !ok {
		ev.Limit = "requests_per_second"
		_, resp := refuse(http.StatusTooManyRequests, reasonQuota, fmt.Sprintf(
			"Airlock refused this request: sandbox %q is over its limit of %g requests per second (burst %d) (limits.requests_per_second). Slow down and retry after the time in Retry-After.\n",
			sb.Name, sb.RequestsPerSecond, sb.Burst))
		resp.Header.Set("Retry-After", retryAfter(wait))
		return r, resp
	}
	if r.URL.Scheme != "https" {
		return refuse(http.StatusBadRequest, reasonInvalidRequest, "Airlock intercepts this host: send HTTPS through the tunnel.\n")
	}
	uh, up, uerr := policy.ParseAuthority(r.URL.Host, 443)
	hh, hp, herr := policy.ParseAuthority(r.Host, 443)
	if uerr != nil || herr != nil || uh != ts.host || up != ts.port || hh != ts.host || hp != ts.port {
		return refuse(http.StatusForbidden, reasonAuthorityMismatch, denyBody(ts.host.String(), ts.port, reasonAuthorityMismatch, sb.Name))
	}
	d := cfg.DecideRequest(sb, ts.host, ts.port, r.Method, r.URL.EscapedPath())
	ev.Rule = d.Rule
	wouldDeny := !d.Allow && sb.Report && d.Reportable()
	if !d.Allow && !wouldDeny {
		return refuse(http.StatusForbidden, string(d.Reason), denyBody(ts.host.String(), ts.port, string(d.Reason), sb.Name))
	}
	if ref := inspectedShape(r); ref != nil {
		return refuse(ref.status, ref.reason, ref.body)
	}
	if n := headerSize(r); n > sb.MaxHeaderBytes {
		ev.Limit = "max_header_bytes"
		return refuse(http.StatusRequestHeaderFieldsTooLarge, reasonQuota, fmt.Sprintf(
			"Airlock refused this request: its header is %d bytes, over sandbox %q's limit of %d (limits.max_header_bytes).\n", n, sb.Name, sb.MaxHeaderBytes))
	}
	if ref := bodyTooLarge(r, sb); ref != nil {
		ev.Limit = "max_request_body"
		return refuse(ref.status, ref.reason, ref.body)
	}
	ev.Decision, ev.Reason = "allow", string(d.Reason)
	if wouldDeny {
		ev.Decision = "would_deny" // report mode: through, on record, without a credential
	}
	st.idle = sb.IdleTimeout

	r.URL.Host = authority(ts.host, ts.port)
	r.Host = r.URL.Host
	if ts.port == 443 {
		r.Host = ts.host.String()
		if ts.host.IsIP() && ts.host.Addr().Is6() {
			r.Host = "[" + r.Host + "]"
		}
	}
	removeHopByHop(r.Header)
	if ref := s.applyCredentials(r, st, sb, ts.host, ts.port, d, true); ref != nil {
		resp := cannedResponse(r, ref.status, ref.reason, ref.body)
		ev.Decision, ev.Reason = "deny", ref.reason
		return r, resp
	}
	if r.Body != nil && r.Body != http.NoBody {
		// Tunnel bytes count toward the byte quota (watchedConn), so the
		// body is only held to max_request_body here.
		r.Body = &countingReader{ReadCloser: r.Body, n: &st.sent, max: sb.MaxRequestBody}
	}
	rctx, cancel := context.WithCancel(r.Context())
	st.cancel = cancel // called when the response is done (auditInner) or the upstream idles
	r = r.WithContext(withPeerTrace(context.WithValue(rctx, configKey{}, cfg), ev))
	r.Trailer = nil // never forwarded: they come after the body, after every check
	ctx.Req = r
	ctx.RoundTripper = goproxy.RoundTripperFunc(s.roundTrip)
	return r, nil
}

// auditInner arranges for an intercepted request's audit line to be
// written when goproxy has sent the response body to the client.
func (s *Server) auditInner(resp *http.Response, st *reqState, ts *tunnelState) {
	ev := st.ev
	ev.Status = resp.StatusCode
	body := resp.Body
	if body == nil {
		body = http.NoBody
	}
	resp.Body = &auditedBody{ReadCloser: body, onClose: func(n int64) {
		if st.cancel != nil {
			st.cancel()
		}
		if st.reqBody != nil {
			// What the upstream (or a refusal) left of the request body is
			// read and dropped now, before the header cap is re-armed: it
			// is body, not the next request's header.
			st.reqBody.Close()
		}
		if c := ts.conn.Load(); c != nil {
			c.awaitHeader() // the next bytes are the next request's header
		}
		if st.idled.Load() {
			ev.CloseReason, ev.Limit = "idle_timeout", "idle_timeout"
		}
		if st.fromUpstream {
			ev.BytesReceived = n
		}
		ev.BytesSent = st.sent.Load()
		ev.Duration = time.Since(ev.Start)
		s.record(ev)
	}}
}

// auditedBody counts a response body and calls onClose once, on Close.
type auditedBody struct {
	io.ReadCloser
	n       int64
	once    sync.Once
	onClose func(n int64)
}

func (b *auditedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *auditedBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.onClose(b.n) })
	return err
}

// hijackWatcher lets goproxy hijack the client connection, and hands it a
// watchedConn that enforces the tunnel idle timeout and reports the bytes
// moved when it closes.
type hijackWatcher struct {
	http.ResponseWriter
	s        *Server
	ts       *tunnelState
	done     func(sent, received int64)
	hijacked bool
}

func (h *hijackWatcher) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("airlock: connection cannot be hijacked")
	}
	c, rw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.hijacked = true
	lt := &liveTunnel{id: h.ts.id, host: h.ts.host, port: h.ts.port, opened: h.ts.ev.Start}
	done := h.done
	var wc *watchedConn
	wc = &watchedConn{Conn: c, lt: lt, quotas: &h.s.bytes,
		headerCap: int64(h.s.cfg.Load().Limits.MaxHeaderBytes) + headerSlack,
		done: func(sent, received int64) {
			lt.finish()
			h.s.live.remove(lt)
			if e := wc.why.Load(); e != nil {
				h.ts.ev.CloseReason, h.ts.ev.Limit = e.why, e.limit
			}
			if lt.reloaded.Load() {
				h.ts.ev.CloseReason, h.ts.ev.Limit = "policy_reload", ""
			}
			done(sent, received)
		}}
	wc.awaitHeader()
	h.ts.conn.Store(wc)
	lt.close = func() { wc.Close() }
	lt.expire = func() { wc.closeBecause("max_lifetime", "max_tunnel_lifetime") }
	lt.setSandbox(h.ts.sb)
	h.s.live.add(lt)
	wc.stop = context.AfterFunc(h.s.tunnelCtx, func() { wc.closeBecause("shutdown", "") })
	// goproxy replays what rw.Reader has buffered, then reads wc.
	return wc, rw, nil
}

// headerSlack is what an intercepted tunnel may read beyond the
// listener's header cap while it waits for a request header: the TLS
// handshake, record overhead and the request reader's read-ahead.
const headerSlack = 32 << 10

// watchedConn is a hijacked client connection of an intercepted tunnel.
// Each Read and Write runs under the idle deadline and within the byte
// quota of the tunnel's sandbox (read from lt each time: a reload may
// change them); Close reports the bytes moved (TLS records, both ways)
// once.
//
// goproxy reads inner requests with no cap on the header's size, so
// watchedConn caps it: from the start, and again after each response,
// until innerRequest sees the next request, at most headerCap bytes may
// be read; over that the tunnel is closed (limit max_header_bytes).
type watchedConn struct {
	net.Conn
	lt             *liveTunnel
	quotas         *byteQuotas
	headerCap      int64
	header         atomic.Int64 // bytes read while waiting for a header; -1: reading a request's body
	sent, received atomic.Int64
	stop           func() bool // stops the shutdown hook
	closed         sync.Once
	why            atomic.Pointer[closeCause] // what closed the tunnel, if not its peers; first one wins
	done           func(sent, received int64)
}

// closeCause is why Airlock closed a tunnel (audit close_reason) and the
// limit that did it, if one did.
type closeCause struct{ why, limit string }

// awaitHeader starts counting bytes toward the header cap.
func (c *watchedConn) awaitHeader() { c.header.Store(0) }

// headerRead stops counting: a request header has been read.
func (c *watchedConn) headerRead() { c.header.Store(-1) }

func (c *watchedConn) Read(p []byte) (int, error) {
	sb := c.lt.sandbox()
	up := meter{c.quotas, sb, dirSent}
	room := up.room()
	if room == 0 {
		c.closeBecause(reasonQuota, dirSent.limit())
		return 0, net.ErrClosed
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	c.Conn.SetReadDeadline(time.Now().Add(sb.IdleTimeout))
	n, err := c.Conn.Read(p)
	c.sent.Add(int64(n))
	up.charge(int64(n))
	if h := c.header.Load(); h >= 0 && c.header.Add(int64(n)) > c.headerCap {
		c.closeBecause(reasonQuota, "max_header_bytes")
		return 0, net.ErrClosed
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.closeBecause("idle_timeout", "idle_timeout")
	}
	return n, err
}

func (c *watchedConn) Write(p []byte) (int, error) {
	sb := c.lt.sandbox()
	down := meter{c.quotas, sb, dirReceived}
	var over bool
	if room := down.room(); int64(len(p)) > room {
		p, over = p[:room], true
	}
	c.Conn.SetWriteDeadline(time.Now().Add(sb.IdleTimeout))
	n, err := c.Conn.Write(p)
	c.received.Add(int64(n))
	down.charge(int64(n))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.closeBecause("idle_timeout", "idle_timeout")
	}
	if over && err == nil {
		c.closeBecause(reasonQuota, dirReceived.limit())
		err = net.ErrClosed
	}
	return n, err
}

func (c *watchedConn) Close() error { return c.closeBecause("", "") }

// closeBecause closes the connection; the first close reports the bytes
// moved. why is the audit close_reason ("" when a peer or goproxy closed
// it) and limit the limit that closed it, if one did.
func (c *watchedConn) closeBecause(why, limit string) error {
	if why != "" {
		// Before the close: goproxy's reader sees it and calls Close too.
		c.why.CompareAndSwap(nil, &closeCause{why, limit})
	}
	err := c.Conn.Close()
	c.closed.Do(func() {
		if c.stop != nil {
			c.stop()
		}
		c.lt.finish()
		c.done(c.sent.Load(), c.received.Load())
	})
	return err
}

// idleBody cancels the upstream request, and sets idled, when a read of
// the response body waits longer than idle: an upstream that stops
// sending must not hold the client's connection forever.
type idleBody struct {
	io.ReadCloser
	idle   time.Duration
	timer  *time.Timer
	cancel context.CancelFunc
	idled  *atomic.Bool
}

func newIdleBody(rc io.ReadCloser, idle time.Duration, cancel context.CancelFunc, idled *atomic.Bool) io.ReadCloser {
	if rc == nil || rc == http.NoBody || idle <= 0 {
		return rc
	}
	return &idleBody{ReadCloser: rc, idle: idle, cancel: cancel, idled: idled}
}

func (b *idleBody) expire() {
	b.idled.Store(true)
	b.cancel()
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.timer == nil {
		b.timer = time.AfterFunc(b.idle, b.expire)
	} else {
		b.timer.Reset(b.idle)
	}
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	return n, err
}

func (b *idleBody) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	return b.ReadCloser.Close()
}

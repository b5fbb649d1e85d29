package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/policy"
)

// serveConnect handles CONNECT (RFC 9110 §9.3.6): decide on the authority
// before any DNS lookup, dial a checked address, then copy bytes both ways
// until either side closes or the tunnel is idle too long.
//
// Opaque tunnels are Airlock's own code rather than goproxy's
// ConnectAccept: goproxy reports neither the bytes moved nor when a tunnel
// closes (the audit line needs both) and has no idle timeout. TLS
// interception, when it lands, is handed to goproxy.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request, cfg *policy.Config, sb *policy.Sandbox, id identity, ev *audit.Event) {
	logged := false
	defer func() {
		if !logged {
			ev.Duration = time.Since(ev.Start)
			s.record(ev)
		}
	}()
	h, port, err := policy.ParseAuthority(r.Host, 0)
	if err == nil && r.URL.User != nil {
		err = errors.New("credentials in the CONNECT target (user:password@) are not accepted")
	}
	if err != nil {
		ev.Status = http.StatusBadRequest
		s.refuse(w, ev, ev.Status, reasonInvalidHost, "", err.Error()+"; CONNECT needs host:port.")
		return
	}
	ev.Host, ev.Port = h.String(), port

	d := cfg.Decide(sb, h, port)
	ev.Rule = d.Rule
	wouldDeny := !d.Allow && sb.Report && d.Reportable()
	switch {
	case !d.Allow && !wouldDeny:
		ev.Status = http.StatusForbidden
		s.deny(w, ev, string(d.Reason))
		return
	case d.Inspect && s.ca == nil:
		ev.Status = http.StatusForbidden
		s.deny(w, ev, string(policy.InterceptionRequired))
		return
	}
	ev.Decision, ev.Reason = "allow", string(d.Reason)
	if wouldDeny {
		// Report mode: an opaque tunnel, on record. (The ClientHello and
		// address checks still apply.)
		ev.Decision = "would_deny"
	}
	if d.Inspect {
		// Method or path rules apply: terminate TLS and decide each
		// request. The tunnel's line is written when it closes.
		logged = true
		ev.Status = http.StatusOK
		s.intercept(w, r, &tunnelState{id: id, sb: sb, host: h, port: port, ev: ev})
		return
	}

	hj, ok := w.(http.Hijacker)
	if !ok || r.ProtoMajor != 1 {
		ev.Status = http.StatusBadRequest
		s.refuse(w, ev, ev.Status, reasonInvalidRequest, d.Rule, "Airlock tunnels CONNECT over HTTP/1.1 only.")
		return
	}

	dctx, cancel := context.WithTimeout(r.Context(), DialTimeout)
	upstream, err := s.dialer.dial(dctx, cfg, h, port)
	cancel()
	if err != nil {
		reason, status, msg := classifyDialError(err)
		ev.Status, ev.Reason = status, reason
		if status == http.StatusForbidden {
			s.deny(w, ev, reason)
			return
		}
		ev.ErrorType = errorType(err)
		writeDecision(w, status, reason, msg)
		return
	}
	if ap, err := netip.ParseAddrPort(upstream.RemoteAddr().String()); err == nil {
		ev.Peer = ap.Addr()
	}

	// Register the tunnel before hijacking: http.Server.Shutdown stops
	// waiting for a connection once it is hijacked, and Server.Shutdown
	// must then see this tunnel.
	s.tunnels.Add(1)
	s.open.Add(1)
	clientConn, rw, err := hj.Hijack()
	if err != nil {
		s.open.Add(-1)
		s.tunnels.Done()
		upstream.Close()
		ev.Status, ev.Reason, ev.ErrorType = http.StatusInternalServerError, reasonUpstreamError, "hijack"
		return
	}
	ev.Status = http.StatusOK
	if _, err := io.WriteString(clientConn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		clientConn.Close()
		upstream.Close()
		s.open.Add(-1)
		s.tunnels.Done()
		return
	}

	// From here the tunnel runs on its own; its audit line is written when
	// it closes.
	logged = true
	go func() {
		defer s.tunnels.Done()
		defer s.open.Add(-1)
		defer func() {
			ev.Duration = time.Since(ev.Start)
			s.record(ev)
		}()
		// The tunnel must carry TLS to the CONNECT host: read the
		// ClientHello (it may already sit in the server's buffer) and
		// check its server name before a byte goes upstream.
		clientConn.SetReadDeadline(time.Now().Add(cfg.Limits.HeaderTimeout))
		buffered, _ := rw.Reader.Peek(rw.Reader.Buffered())
		sni, exts, hello, err := readClientHello(io.MultiReader(bytes.NewReader(buffered), clientConn))
		why := ""
		switch {
		case err != nil:
			ev.Reason, why = reasonTLSRequired, "the tunnel did not start with a TLS ClientHello"
		default:
			if why = checkClientHello(sni, exts, h); why != "" {
				ev.Reason = reasonAuthorityMismatch
			}
		}
		if why != "" {
			ev.Decision, ev.CloseReason, ev.BytesSent = "deny", "refused", int64(len(hello))
			s.errlog.Info("tunnel refused after its ClientHello", "sandbox", sb.Name, "server.address", h.String(), "reason", why)
			clientConn.Close()
			upstream.Close()
			return
		}
		lt := &liveTunnel{id: id, host: h, port: port, opened: ev.Start, close: func() { clientConn.Close(); upstream.Close() }}
		ev.BytesSent, ev.BytesReceived, ev.CloseReason, ev.Limit = s.pipe(clientConn, hello, upstream, sb, lt)
		if lt.reloaded.Load() {
			ev.CloseReason, ev.Limit = "policy_reload", ""
		}
	}()
}

// tunnelChunk is how many bytes one copy step may move before the idle
// clock is consulted again.
const tunnelChunk = 1 << 20

// cappedStep is the most one step moves for a sandbox with a byte quota
// in that direction.
const cappedStep = 64 << 10

// pipe registers lt (its sandbox sb to begin with) with Reload, writes
// replay upstream, then copies between client and upstream until both
// directions finish, the tunnel has been idle for the sandbox's
// idle_timeout, it has been open for its max_tunnel_lifetime (if not 0),
// the sandbox's byte quota is used up, a reload closes it, or the server
// shuts down. The limits are read from lt at each step: a reload may
// change them. It returns the bytes moved client->upstream and
// upstream->client, why the tunnel ended ("closed": a side closed or
// failed; "idle_timeout", "max_lifetime", "quota_exceeded" or
// "shutdown"; the caller sees Reload's own mark) and, when a limit ended
// it, that limit's key.
//
// Both ends are TCP connections, so io.Copy uses the kernel's splice path
// (net.TCPConn.ReadFrom): no user-space buffer of ours carries the data.
// The copy moves at most tunnelChunk bytes per step under a read deadline,
// so idleness is judged across both directions: a long download with a
// silent client is not idle.
func (s *Server) pipe(client net.Conn, replay []byte, upstream *net.TCPConn, sb *policy.Sandbox, lt *liveTunnel) (sent, received int64, why, limit string) {
	var expired atomic.Bool
	lt.expire = func() {
		expired.Store(true)
		client.Close()
		upstream.Close()
	}
	lt.setSandbox(sb)
	defer lt.finish()
	s.live.add(lt)
	defer s.live.remove(lt)
	var last atomic.Int64 // unix nanoseconds of the last byte moved either way
	last.Store(time.Now().UnixNano())

	// The bytes read from the client to check its ClientHello go first.
	if len(replay) > 0 {
		upstream.SetWriteDeadline(time.Now().Add(sb.IdleTimeout))
		m, err := upstream.Write(replay)
		sent += int64(m)
		s.bytes.charge(sb, dirSent, int64(m))
		if err != nil {
			client.Close()
			upstream.Close()
			return sent, 0, "closed", ""
		}
	}

	clientTCP, _ := client.(*net.TCPConn)
	var wg sync.WaitGroup
	wg.Add(2)
	var up, down int64
	var upEnd, downEnd string
	go func() {
		defer wg.Done()
		up, upEnd = copyIdle(upstream, client, clientTCP, &last, lt, &s.bytes, dirSent)
	}()
	go func() {
		defer wg.Done()
		down, downEnd = copyIdle(client, upstream, upstream, &last, lt, &s.bytes, dirReceived)
	}()

	stop := context.AfterFunc(s.tunnelCtx, func() {
		client.Close()
		upstream.Close()
	})
	wg.Wait()
	shutdown := !stop()
	client.Close()
	upstream.Close()
	switch {
	case shutdown:
		why = "shutdown"
	case expired.Load():
		why, limit = "max_lifetime", "max_tunnel_lifetime"
	case upEnd == "quota_exceeded":
		why, limit = upEnd, dirSent.limit()
	case downEnd == "quota_exceeded":
		why, limit = downEnd, dirReceived.limit()
	case upEnd == "idle_timeout" || downEnd == "idle_timeout":
		why, limit = "idle_timeout", "idle_timeout"
	default:
		why = "closed"
	}
	return sent + up, down, why, limit
}

// copyIdle copies src to dst in steps, each under a read deadline and
// within the byte quota of lt's sandbox for direction dir, and returns
// the bytes copied and why it stopped: "" (src ended or failed),
// "idle_timeout" or "quota_exceeded". It half-closes dst when src reaches
// EOF, and closes both when the tunnel has been idle (no byte either way)
// for the sandbox's idle_timeout or the quota has no room left. The limits
// are read at every step.
func copyIdle(dst, src net.Conn, srcTCP *net.TCPConn, last *atomic.Int64, lt *liveTunnel, q *byteQuotas, dir direction) (int64, string) {
	var total int64
	for {
		sb := lt.sandbox()
		idle, quota := sb.IdleTimeout, meter{q, sb, dir}
		step := min(int64(tunnelChunk), quota.room())
		if dir.cap(sb) > 0 {
			// Bytes are charged after each step: smaller steps keep what
			// tunnels running side by side can overshoot a cap by to
			// cappedStep each.
			step = min(step, cappedStep)
		}
		if step == 0 {
			dst.Close()
			src.Close()
			return total, "quota_exceeded"
		}
		// Deadlines on both the read and the write side: a peer that
		// stops reading (a half-closed client that never drains) must
		// not hold the tunnel open past idle either.
		deadline := time.Now().Add(idle)
		src.SetReadDeadline(deadline)
		dst.SetWriteDeadline(deadline)
		var n int64
		var err error
		if srcTCP != nil {
			// Wait for bytes without holding a splice pipe, then move
			// what is queued: *net.TCPConn -> *net.TCPConn through a
			// LimitedReader keeps the splice path (net.TCPConn.ReadFrom).
			var queued int
			if queued, err = waitReadable(srcTCP); err == nil {
				if queued == 0 {
					queued = 1 // EOF: let the copy see it
				}
				step = min(step, int64(queued))
				n, err = io.Copy(dst, &io.LimitedReader{R: srcTCP, N: step})
			}
		} else {
			n, err = io.Copy(dst, io.LimitReader(src, step))
		}
		total += n
		quota.charge(n)
		if n > 0 {
			last.Store(time.Now().UnixNano())
		}
		switch {
		case err == nil && n == step:
			continue // step done, more to come
		case err == nil:
			// EOF from src: pass the half-close on, keep the other way open.
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			} else {
				dst.Close()
			}
			return total, ""
		case errors.Is(err, os.ErrDeadlineExceeded):
			if time.Since(time.Unix(0, last.Load())) < idle {
				continue // the other direction is busy
			}
			dst.Close()
			src.Close()
			return total, "idle_timeout"
		}
		// Reset, or closed by the other direction or by shutdown.
		dst.Close()
		src.Close()
		return total, ""
	}
}

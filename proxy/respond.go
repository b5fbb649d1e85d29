package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlockhq/airlock/audit"
)

// DecisionHeader is the response header that carries the machine-readable
// reason of a refusal ("host_not_allowed", "address_blocked", ...).
const DecisionHeader = "X-Airlock-Decision"

var syscallECONNREFUSED = syscall.ECONNREFUSED

// denyBody is the text an agent reads when Airlock refuses a destination:
// what was refused, why, and what (not) to do about it.
func denyBody(host string, port uint16, reason, sandbox string) string {
	if host == "" {
		host = "(unknown)"
	}
	why, advice := explain(reason)
	return fmt.Sprintf("Airlock denied this request.\n"+
		"host: %s\nport: %d\nreason: %s\nsandbox: %s\n%s\n%s\n",
		host, port, reason, sandbox, why, advice)
}

// Advice for refusals the agent cannot route around.
const (
	adviceOperator = "Airlock is this sandbox's only route to the network, so retrying through another proxy, address or protocol will not work. " +
		"If this destination is needed, ask the operator to add it to the Airlock policy."
	adviceAddress = "Airlock is this sandbox's only route to the network, so retrying through another name, address or protocol will not work. " +
		"Internal addresses are reachable only if the operator lists them in network.allow_cidrs."
)

// explain says why a reason refused the request and what can be done.
func explain(reason string) (why, advice string) {
	switch reason {
	case "host_not_allowed":
		return "The host is not on the allowlist.", adviceOperator
	case "port_not_allowed":
		return "The host is allowed, but not on this port.", adviceOperator
	case "method_not_allowed":
		return "The host is allowed, but not this HTTP method.", adviceOperator
	case "path_not_allowed":
		return "The host is allowed, but not this path.", adviceOperator
	case "denied_by_rule":
		return "A deny rule matches this destination.", adviceOperator
	case "address_blocked":
		return "The host is, or resolves to, an internal, loopback, link-local, cloud-metadata or reserved address.", adviceAddress
	case "credential_host_mismatch":
		return "The request carries a credential placeholder somewhere it must not go: placeholders are only swapped for real credentials in their own header, on the hosts they are bound to.",
			"Sending a placeholder elsewhere looks like an exfiltration attempt and has been reported to the operator."
	case "credential_requires_tls":
		return "This host's credential is only ever sent inside TLS.", "Use https:// for this host."
	case "authority_mismatch":
		return "The request names another host than the one this HTTPS tunnel was opened for.",
			"Open a separate connection (CONNECT) for each host; Airlock checks each one on its own."
	case "interception_required":
		return "Method or path rules apply to this host, and this version of Airlock cannot enforce them inside an HTTPS tunnel.",
			"Use plain HTTP for this host if it offers it, or ask the operator to change the policy."
	case "path_not_canonical":
		return "The path has dot-segments, empty segments or encoded slashes, which servers may read differently.",
			"Send the same request with a canonical path (no /./, /../, // or %2F)."
	case "no_policy":
		return "This sandbox has no policy, so everything is denied.", adviceOperator
	case "proxy_loop":
		return "The destination is Airlock itself.", "Send requests to their real destination through the proxy, not to the proxy."
	}
	return "", adviceOperator
}

// writeDecision writes a plain-text refusal with the decision header.
func writeDecision(w http.ResponseWriter, status int, reason, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set(DecisionHeader, reason)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// cannedResponse builds a response to r with a plain-text body, for
// goproxy to write to the client in place of an upstream response.
func cannedResponse(r *http.Request, status int, reason, body string) *http.Response {
	h := make(http.Header)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set(DecisionHeader, reason)
	return &http.Response{
		StatusCode:    status,
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}
}

// hopByHop are the connection-specific header fields a proxy must not
// forward (RFC 9110 §7.6.1), plus Proxy-Authorization and
// Proxy-Authenticate, which are for Airlock alone, and the obsolete
// Proxy-Connection some clients still send. Upgrade is removed too:
// protocol upgrades through the plain-HTTP path are not supported.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// isHopByHop is hopByHop as a set of canonical names.
var isHopByHop = func() map[string]bool {
	m := make(map[string]bool, len(hopByHop))
	for _, k := range hopByHop {
		m[k] = true
	}
	return m
}()

// removeHopByHop deletes hop-by-hop fields and every field that the
// Connection header names. It looks at each field once: Header.Del for
// every hop-by-hop name canonicalised each name again, on every request
// (about 2% of the proxy's CPU time on keep-alive requests).
func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for k := range h {
		if isHopByHop[k] || isHopByHop[textproto.CanonicalMIMEHeaderKey(k)] {
			delete(h, k)
		}
	}
}

// withPeerTrace records the upstream address of the connection a request
// is sent on (new or reused) in ev.Peer.
func withPeerTrace(ctx context.Context, ev *audit.Event) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if ta, ok := info.Conn.RemoteAddr().(*net.TCPAddr); ok {
				ev.Peer = ta.AddrPort().Addr()
			} else if ap, err := netip.ParseAddrPort(info.Conn.RemoteAddr().String()); err == nil {
				ev.Peer = ap.Addr()
			}
		},
	})
}

// Package audit writes Airlock's audit log: one JSON object per line, one
// line per HTTP request and one per CONNECT tunnel (written when it closes);
// and reads it back (read.go): summaries per sandbox (summary.go) and
// policies suggested from what was reached (suggest.go).
//
// Field names follow the OpenTelemetry semantic conventions where one
// exists (client.address, http.request.method, url.scheme, server.address,
// server.port, url.path, url.query, http.response.status_code,
// network.peer.address, error.type); the rest are Airlock's own (event,
// sandbox, decision, reason, rule, intercepted, bytes_sent, bytes_received,
// duration_ms, close_reason, limit, credential, alert, severity). The
// package writes only what an Event holds: it never sees
// headers, so no credential, placeholder or session token can reach a line.
// Query strings are reduced to their keys by QueryKeys, and path parameters
// removed by Path, before they get here.
package audit

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Event kinds, the value of the "event" field.
const (
	KindRequest = "http.request" // one HTTP request forwarded or refused
	KindTunnel  = "tunnel"       // one CONNECT tunnel, written when it closes or is refused
	KindDNS     = "dns.query"    // one DNS query to the sandbox resolver
)

// Event is one audit record. Zero-valued optional fields are left out of
// the line.
type Event struct {
	Kind     string    // KindRequest or KindTunnel
	Start    time.Time // when the request was received; the line's "time"
	Sandbox  string    // sandbox name
	Client   netip.AddrPort
	Method   string // http.request.method; "CONNECT" for tunnels
	Scheme   string // url.scheme: "http", "https"; empty for tunnels
	Host     string // server.address: the canonical host decided on
	Port     uint16 // server.port
	Path     string // url.path, as received (percent-encoded), reduced by Path
	Query    string // url.query: keys only, reduced by QueryKeys
	Status   int    // http.response.status_code sent to the client
	Decision string // "allow" or "deny"
	Reason   string // machine-readable reason (policy.Reason, or a proxy reason)
	Rule     string // config path of the deciding rule
	// Intercepted is true when Airlock terminated TLS to see the request.
	Intercepted bool
	// Credential is the name (never the value) of the credential injected,
	// or whose placeholder was caught.
	Credential string
	// Alert marks an event an operator must look at, e.g.
	// "placeholder_exfiltration"; the line then carries severity "high".
	Alert     string
	Peer      netip.Addr // network.peer.address: the upstream address actually connected
	ErrorType string     // error.type: class of upstream failure, e.g. "connection_refused"
	// BytesSent counts body (or tunnel) bytes from the client to the
	// upstream; BytesReceived from the upstream to the client.
	BytesSent     int64
	BytesReceived int64
	Duration      time.Duration // from Start until the response or tunnel finished
	// CloseReason says why an allowed tunnel ended: "closed" (either side
	// closed or failed), "idle_timeout", "max_lifetime", "quota_exceeded",
	// "policy_reload" or "shutdown"; for a plain-HTTP transfer cut off by
	// a byte quota, "quota_exceeded"; empty otherwise.
	CloseReason string
	// Limit names the limits key a request was refused or cut off for
	// ("requests_per_second", "max_bytes_sent", "idle_timeout", ...);
	// written as "limit".
	Limit string

	// DNS queries (KindDNS): Host is the question name (written as
	// dns.question.name), QType its type ("A", "TXT"), RCode the answer's
	// response code ("NOERROR", "REFUSED"), Answers the answer count and
	// UpstreamDuration the time the upstream took, if asked.
	QType            string
	RCode            string
	Answers          int
	UpstreamDuration time.Duration
}

// Logger writes Events as JSON lines. It is safe for concurrent use: each
// Event is one Write call on the underlying writer.
type Logger struct {
	zl       zerolog.Logger
	closer   io.Closer
	observer func(*Event)
}

// OnEvent makes f see every event after it is written (metrics count
// them). Call it before the Logger is in use; f must be safe for
// concurrent use.
func (l *Logger) OnEvent(f func(*Event)) { l.observer = f }

// New returns a Logger writing to w.
func New(w io.Writer) *Logger {
	return &Logger{zl: zerolog.New(w)}
}

// Open returns a Logger for an audit.output setting: "stdout", "stderr" or
// a file path (created 0600 if missing, appended to). Close the Logger to
// close a file.
func Open(output string) (*Logger, error) {
	switch output {
	case "", "stdout":
		return New(os.Stdout), nil
	case "stderr":
		return New(os.Stderr), nil
	}
	f, err := os.OpenFile(output, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	l := New(f)
	l.closer = f
	return l, nil
}

// Close closes the log file, if Open opened one.
func (l *Logger) Close() error {
	if l.closer != nil {
		return l.closer.Close()
	}
	return nil
}

// Log writes e as one line.
func (l *Logger) Log(e *Event) {
	ev := l.zl.Log().
		Time("time", e.Start.UTC()).
		Str("event", e.Kind).
		Str("sandbox", e.Sandbox).
		Str("decision", e.Decision).
		Str("reason", e.Reason)
	if e.Client.IsValid() {
		ev = ev.Str("client.address", e.Client.Addr().Unmap().String()).Uint16("client.port", e.Client.Port())
	}
	opt := func(k, v string) {
		if v != "" {
			ev = ev.Str(k, v)
		}
	}
	if e.Kind == KindDNS {
		ev = ev.Str("dns.question.name", e.Host).
			Str("dns.question.type", e.QType).
			Str("dns.response_code", e.RCode).
			Int("dns.answers", e.Answers)
		if e.UpstreamDuration > 0 {
			ev = ev.Float64("upstream_ms", float64(e.UpstreamDuration.Microseconds())/1000)
		}
	} else {
		ev = ev.Str("http.request.method", e.Method)
		opt("url.scheme", e.Scheme)
		ev = ev.Str("server.address", e.Host).Uint16("server.port", e.Port)
		opt("url.path", e.Path)
		opt("url.query", e.Query)
		if e.Status != 0 {
			ev = ev.Int("http.response.status_code", e.Status)
		}
		if e.Peer.IsValid() {
			ev = ev.Str("network.peer.address", e.Peer.Unmap().String())
		}
		opt("close_reason", e.CloseReason)
		opt("limit", e.Limit)
		opt("credential", e.Credential)
		ev = ev.Bool("intercepted", e.Intercepted).
			Int64("bytes_sent", e.BytesSent).
			Int64("bytes_received", e.BytesReceived)
	}
	opt("rule", e.Rule)
	opt("error.type", e.ErrorType)
	if e.Alert != "" {
		ev = ev.Str("alert", e.Alert).Str("severity", "high")
	}
	ev.Float64("duration_ms", float64(e.Duration.Microseconds())/1000).Send()
	if l.observer != nil {
		l.observer(e)
	}
}

// QueryKeys reduces a raw query string to its keys, in order, joined by
// "&" ("a=1&b=secret" -> "a&b"), so that no query value (tokens, signed
// URL signatures) reaches the log. Only keys that look like parameter
// names are kept: up to 32 characters of letters, digits and "_-.[]",
// followed by "=". Anything else (a bare "?token", a key with encoded
// characters) may itself be the secret and is written as "-". At most 32
// keys are kept, then "...".
func QueryKeys(rawQuery string) string {
	if rawQuery == "" {
		return ""
	}
	var keys []string
	for part := range strings.SplitSeq(rawQuery, "&") {
		if part == "" {
			continue
		}
		if len(keys) == 32 {
			keys = append(keys, "...")
			break
		}
		k, _, hasValue := strings.Cut(part, "=")
		if !hasValue || !isParamName(k) {
			k = "-"
		}
		keys = append(keys, k)
	}
	return strings.Join(keys, "&")
}

func isParamName(k string) bool {
	if k == "" || len(k) > 32 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_-.[]", c) >= 0) {
			return false
		}
	}
	return true
}

// Path returns an escaped URL path for the log with ";" parameters in
// each segment replaced by "-" ("/a;jsessionid=XYZ/b" -> "/a;-/b"):
// path parameters carry session identifiers and tokens. Paths longer than
// 2048 bytes are cut and end in "...".
func Path(escaped string) string {
	if strings.IndexByte(escaped, ';') >= 0 {
		segs := strings.Split(escaped, "/")
		for i, s := range segs {
			if j := strings.IndexByte(s, ';'); j >= 0 {
				segs[i] = s[:j] + ";-"
			}
		}
		escaped = strings.Join(segs, "/")
	}
	if len(escaped) > 2048 {
		escaped = escaped[:2048] + "..."
	}
	return escaped
}

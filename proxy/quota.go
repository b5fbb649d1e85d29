package proxy

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/policy"
)

// reasonQuota refuses a request over one of its sandbox's limits (429,
// or 413/431 for a body or header too large).
const reasonQuota = "quota_exceeded"

// quotaRefusal says which limit a request is over.
type quotaRefusal struct {
	limit  string        // the limits key, e.g. "requests_per_second" (audit "limit")
	detail string        // the limit for the client, e.g. "2 requests per second (burst 2)"
	retry  time.Duration // how long until a retry can succeed (Retry-After)
}

// overQuota checks sb's byte quotas, then takes a rate token and a
// connection slot for a request or tunnel whose audit event is ev; the
// slot is given back when ev is recorded (each request and tunnel records
// exactly one event, when it ends). It returns nil when the request may
// go on.
func (s *Server) overQuota(sb *policy.Sandbox, ev *audit.Event) *quotaRefusal {
	if ref := s.bytes.exhausted(sb, time.Now()); ref != nil {
		return ref
	}
	if ok, wait := s.rates.allow(sb); !ok {
		return &quotaRefusal{limit: "requests_per_second", retry: wait,
			detail: fmt.Sprintf("%g requests per second (burst %d)", sb.RequestsPerSecond, sb.Burst)}
	}
	if !s.conns.acquire(sb, ev) {
		return &quotaRefusal{limit: "max_connections", retry: time.Second,
			detail: fmt.Sprintf("%d concurrent connections (requests in flight and open tunnels)", sb.MaxConnections)}
	}
	return nil
}

// retryAfter formats d for a Retry-After header (RFC 9110 §10.2.3):
// whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	return fmt.Sprint(max(1, int64(math.Ceil(d.Seconds()))))
}

// rateLimiters holds one token bucket per sandbox name. A reload that
// changes a sandbox's rate or burst updates its bucket in place, so a
// reload never refills a bucket that is empty.
type rateLimiters struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// allow reports whether sb may make one more request now, taking a token
// if so; if not, it says how long until a token is there. A sandbox
// without a rate limit is always allowed.
func (rl *rateLimiters) allow(sb *policy.Sandbox) (bool, time.Duration) {
	if sb.RequestsPerSecond <= 0 {
		return true, 0
	}
	rl.mu.Lock()
	l, ok := rl.m[sb.Name]
	switch {
	case !ok:
		if rl.m == nil {
			rl.m = make(map[string]*rate.Limiter)
		}
		l = rate.NewLimiter(rate.Limit(sb.RequestsPerSecond), sb.Burst)
		rl.m[sb.Name] = l
	case l.Limit() != rate.Limit(sb.RequestsPerSecond) || l.Burst() != sb.Burst:
		l.SetLimit(rate.Limit(sb.RequestsPerSecond))
		l.SetBurst(sb.Burst)
	}
	rl.mu.Unlock()
	now := time.Now()
	r := l.ReserveN(now, 1)
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		return false, wait
	}
	return true, 0
}

// connLimits counts each sandbox's requests in flight and open tunnels.
type connLimits struct {
	mu   sync.Mutex
	n    map[string]int
	held map[*audit.Event]string // events holding a slot -> their sandbox
}

// acquire takes a slot for ev unless sb is at MaxConnections.
func (c *connLimits) acquire(sb *policy.Sandbox, ev *audit.Event) bool {
	if sb.MaxConnections <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n, c.held = make(map[string]int), make(map[*audit.Event]string)
	}
	if c.n[sb.Name] >= sb.MaxConnections {
		return false
	}
	c.n[sb.Name]++
	c.held[ev] = sb.Name
	return true
}

// release gives back ev's slot, if it holds one.
func (c *connLimits) release(ev *audit.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if name, ok := c.held[ev]; ok {
		delete(c.held, ev)
		c.n[name]--
	}
}

// direction is the way bytes move: sent (client to upstream) or received
// (upstream to client).
type direction int

const (
	dirSent direction = iota
	dirReceived
)

// limit returns the limits key that caps d.
func (d direction) limit() string {
	if d == dirSent {
		return "max_bytes_sent"
	}
	return "max_bytes_received"
}

// cap returns sb's cap on d, or 0 for none.
func (d direction) cap(sb *policy.Sandbox) int64 {
	if d == dirSent {
		return sb.MaxBytesSent
	}
	return sb.MaxBytesReceived
}

// byteQuotas counts the bytes each sandbox moves in its current window
// (limits.max_bytes_sent, max_bytes_received, bytes_window). Windows are
// fixed: one starts when a sandbox with a byte cap is first seen after
// the last one ended. Bytes are counted as they move, so transfers that
// run side by side can together overshoot a cap by what they move in one
// step each (at most cappedStep, 64 KiB, per tunnel direction; one write
// for HTTP).
type byteQuotas struct {
	mu sync.Mutex
	m  map[string]*byteWindow
}

type byteWindow struct {
	start time.Time
	n     [2]int64 // bytes moved this window, by direction
}

// window returns sb's current window, starting a new one if the last has
// ended. Call with q.mu held.
func (q *byteQuotas) window(sb *policy.Sandbox, now time.Time) *byteWindow {
	w := q.m[sb.Name]
	if w == nil {
		if q.m == nil {
			q.m = make(map[string]*byteWindow)
		}
		w = &byteWindow{start: now}
		q.m[sb.Name] = w
	}
	if now.Sub(w.start) >= sb.BytesWindow {
		*w = byteWindow{start: now}
	}
	return w
}

// exhausted returns a refusal when sb has used up a byte cap in this
// window, retryable when the window ends; else nil.
func (q *byteQuotas) exhausted(sb *policy.Sandbox, now time.Time) *quotaRefusal {
	if sb.MaxBytesSent <= 0 && sb.MaxBytesReceived <= 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.window(sb, now)
	for _, d := range []direction{dirSent, dirReceived} {
		if c := d.cap(sb); c > 0 && w.n[d] >= c {
			return &quotaRefusal{limit: d.limit(), retry: w.start.Add(sb.BytesWindow).Sub(now),
				detail: fmt.Sprintf("%s %s per %s", policy.ByteSize(c), map[direction]string{dirSent: "sent", dirReceived: "received"}[d], sb.BytesWindow)}
		}
	}
	return nil
}

// room returns how many more bytes sb may move in d this window:
// math.MaxInt64 when d has no cap, 0 when its cap is used up.
func (q *byteQuotas) room(sb *policy.Sandbox, d direction) int64 {
	c := d.cap(sb)
	if c <= 0 {
		return math.MaxInt64
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return max(0, c-q.window(sb, time.Now()).n[d])
}

// charge counts n bytes moved by sb in d.
func (q *byteQuotas) charge(sb *policy.Sandbox, d direction, n int64) {
	if n <= 0 || d.cap(sb) <= 0 {
		return
	}
	q.mu.Lock()
	q.window(sb, time.Now()).n[d] += n
	q.mu.Unlock()
}

// meter is one direction of one sandbox's byte quota; the zero meter
// has no cap.
type meter struct {
	q   *byteQuotas
	sb  *policy.Sandbox
	dir direction
}

// capped reports whether m's direction has a cap (so that callers skip
// measuring what they would charge).
func (m meter) capped() bool { return m.q != nil && m.dir.cap(m.sb) > 0 }

func (m meter) room() int64 {
	if m.q == nil {
		return math.MaxInt64
	}
	return m.q.room(m.sb, m.dir)
}

func (m meter) charge(n int64) {
	if m.q != nil {
		m.q.charge(m.sb, m.dir, n)
	}
}

// windowLeft returns the time until m's current window ends.
func (m meter) windowLeft() time.Duration {
	if m.q == nil {
		return 0
	}
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	now := time.Now()
	return m.q.window(m.sb, now).start.Add(m.sb.BytesWindow).Sub(now)
}

// quotaError stops a transfer that crossed one of its sandbox's limits.
type quotaError struct {
	limit string
	retry time.Duration // until the limit has room again; 0: not a matter of time
}

func (e *quotaError) Error() string { return "airlock: over limits." + e.limit }

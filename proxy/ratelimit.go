package proxy

import (
	"fmt"
	"sync"

	"golang.org/x/time/rate"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/policy"
)

// rateLimiters holds one token bucket per sandbox name. A reload that
// changes a sandbox's rate or burst updates its bucket in place, so a
// reload never refills a bucket that is empty.
type rateLimiters struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// allow reports whether sb may make one more request now, taking a token
// if so. A sandbox without a rate limit is always allowed.
func (rl *rateLimiters) allow(sb *policy.Sandbox) bool {
	if sb.RequestsPerSecond <= 0 {
		return true
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
	return l.Allow()
}

// overQuota takes a rate token and a connection slot for a request or
// tunnel of sb, whose audit event is ev; the slot is given back when ev
// is recorded (each request and tunnel records exactly one event, when
// it ends). It returns "" when both are granted, else the limit exceeded.
func (s *Server) overQuota(sb *policy.Sandbox, ev *audit.Event) string {
	if !s.rates.allow(sb) {
		return fmt.Sprintf("%g requests per second (burst %d)", sb.RequestsPerSecond, sb.Burst)
	}
	if !s.conns.acquire(sb, ev) {
		return fmt.Sprintf("%d concurrent connections (requests in flight and open tunnels)", sb.MaxConnections)
	}
	return ""
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

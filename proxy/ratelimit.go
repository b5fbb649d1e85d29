package proxy

import (
	"sync"

	"golang.org/x/time/rate"

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

package proxy

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/policy"
)

// identity is who opened a request or tunnel: the sandbox a session
// token named, with the token's ID, or else the client's address.
type identity struct {
	client  netip.Addr
	sandbox string // named by a session token; "" when known by address
	tokenID string // the token's jti
}

// sandboxIn returns the identity's sandbox under cfg: by token, unless
// cfg revokes the token or has no such sandbox (then false); by address
// otherwise.
func (id identity) sandboxIn(cfg *policy.Config) (*policy.Sandbox, bool) {
	if id.sandbox == "" {
		return cfg.SandboxFor(id.client), true
	}
	if slices.Contains(cfg.Auth.Revoked, id.tokenID) {
		return nil, false
	}
	return cfg.Sandbox(id.sandbox)
}

// liveTunnel is an open CONNECT tunnel, as Reload sees it. Its copy loops
// read the sandbox's limits from it at every step, so a reload's new idle
// timeout and byte quotas apply to open tunnels too, and a new
// max_tunnel_lifetime re-arms its timer (counted from when it opened).
type liveTunnel struct {
	id       identity
	host     policy.Host
	port     uint16
	opened   time.Time
	sb       atomic.Pointer[policy.Sandbox]
	reloaded atomic.Bool // closed because a reload no longer allows it
	close    func()      // closes the tunnel
	expire   func()      // closes the tunnel for max_tunnel_lifetime

	mu    sync.Mutex
	timer *time.Timer
	done  bool
}

// sandbox returns the sandbox whose limits apply to the tunnel now.
func (t *liveTunnel) sandbox() *policy.Sandbox { return t.sb.Load() }

// setSandbox makes sb's limits the tunnel's and arms the lifetime timer
// for what is left of sb.MaxTunnelLifetime (at once if none is left).
func (t *liveTunnel) setSandbox(sb *policy.Sandbox) {
	t.sb.Store(sb)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	if d := sb.MaxTunnelLifetime; d > 0 && t.expire != nil {
		t.timer = time.AfterFunc(time.Until(t.opened.Add(d)), t.expire)
	}
}

// finish stops the lifetime timer for good.
func (t *liveTunnel) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	if t.timer != nil {
		t.timer.Stop()
	}
}

// registry holds the open tunnels.
type registry struct {
	mu sync.Mutex
	m  map[*liveTunnel]struct{}
}

func (r *registry) add(t *liveTunnel) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[*liveTunnel]struct{})
	}
	r.m[t] = struct{}{}
}

func (r *registry) remove(t *liveTunnel) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, t)
}

func (r *registry) snapshot() []*liveTunnel {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*liveTunnel, 0, len(r.m))
	for t := range r.m {
		out = append(out, t)
	}
	return out
}

// Reload makes cfg the configuration in force: new requests, including
// new requests inside open intercepted tunnels, are decided by it at
// once. Every open tunnel is judged again for the sandbox that opened it
// (by its session token, or its address): one whose host cfg no longer
// allows, whose token cfg revokes or whose sandbox cfg no longer has is
// closed (its audit line says close_reason "policy_reload"); the others
// stay open under the sandbox's new limits. cfg must have passed
// Config.CheckReload against the running configuration: listeners,
// resolvers, TLS files and credentials are not re-read. It returns how
// many tunnels it closed.
func (s *Server) Reload(cfg *policy.Config) int {
	s.cfg.Store(cfg)
	closed := 0
	for _, t := range s.live.snapshot() {
		sb, ok := t.id.sandboxIn(cfg)
		if ok {
			d := cfg.Decide(sb, t.host, t.port)
			ok = d.Allow || (sb.Report && d.Reportable())
		}
		if !ok {
			t.reloaded.Store(true)
			t.close()
			closed++
			continue
		}
		t.setSandbox(sb)
	}
	return closed
}

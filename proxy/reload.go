package proxy

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/airlockhq/airlock/policy"
)

// liveTunnel is an open CONNECT tunnel, as Reload sees it.
type liveTunnel struct {
	client   netip.Addr
	host     policy.Host
	port     uint16
	reloaded atomic.Bool // closed because a reload no longer allows it
	close    func()
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

// Reload makes cfg the configuration in force: new requests are decided
// by it at once, and every open tunnel whose host cfg no longer allows for
// its sandbox is closed (its audit line says close_reason
// "policy_reload"). Tunnels still allowed stay open. cfg must have passed
// Config.CheckReload against the running configuration: listeners,
// resolvers, TLS files and credentials are not re-read. It returns how
// many tunnels it closed.
func (s *Server) Reload(cfg *policy.Config) int {
	s.cfg.Store(cfg)
	closed := 0
	for _, t := range s.live.snapshot() {
		sb := cfg.SandboxFor(t.client)
		if d := cfg.Decide(sb, t.host, t.port); !d.Allow {
			t.reloaded.Store(true)
			t.close()
			closed++
		}
	}
	return closed
}

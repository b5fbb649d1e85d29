package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/policy"
)

// errSelf is returned for a destination that is Airlock's own listener.
var errSelf = errors.New("the destination is Airlock's own listener")

// dialer resolves a decided host, checks every address it resolves to,
// dials only a checked address, and re-checks the address the socket
// actually connects to in net.Dialer.Control, so a DNS answer that changes
// between lookup and connect (rebinding) has no window.
type dialer struct {
	timeout time.Duration
	// self holds the proxy's own listener addresses; a port-only entry
	// (unspecified address) matches any local address on that port.
	self atomic.Pointer[[]netip.AddrPort]
	// resolver used for names; nil means the system's.
	resolver *net.Resolver
}

// newDialer returns a dialer that resolves through resolvers (host:port of
// DNS servers) or, when there are none, the system resolver.
func newDialer(resolvers []netip.AddrPort, timeout time.Duration) *dialer {
	d := &dialer{timeout: timeout}
	if len(resolvers) > 0 {
		var next atomic.Uint32
		d.resolver = &net.Resolver{
			PreferGo: true,
			Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				// Spread lookups over the configured servers; the Go
				// resolver retries on failure.
				ap := resolvers[int(next.Add(1))%len(resolvers)]
				var nd net.Dialer
				return nd.DialContext(ctx, network, ap.String())
			},
		}
	} else {
		d.resolver = net.DefaultResolver
	}
	return d
}

// setSelf records the proxy's own listener addresses.
func (d *dialer) setSelf(addrs []netip.AddrPort) { d.self.Store(&addrs) }

// isSelf reports whether ap is one of the proxy's own listeners.
func (d *dialer) isSelf(ap netip.AddrPort) bool {
	p := d.self.Load()
	if p == nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, s := range *p {
		if s.Port() != ap.Port() {
			continue
		}
		if s.Addr().Unmap() == a {
			return true
		}
		if s.Addr().IsUnspecified() && isLocalAddr(a) {
			return true
		}
	}
	return false
}

// isLocalAddr reports whether a is loopback or one of this machine's
// interface addresses.
func isLocalAddr(a netip.Addr) bool {
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // fail closed: treat as local
	}
	for _, ia := range ifaddrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// Lookup returns the addresses the proxy would dial for h under cfg, and
// where they came from ("IP literal", "network.hosts" or "DNS"), without
// checking them: `airlock policy test` prints each with its
// classification. It resolves exactly as the proxy does (fully qualified
// name, network.resolvers or the system resolver).
func Lookup(ctx context.Context, cfg *policy.Config, h policy.Host) ([]netip.Addr, string, error) {
	if h.IsIP() {
		return []netip.Addr{h.Addr()}, "IP literal", nil
	}
	if static, ok := cfg.StaticHost(h); ok {
		return static, "network.hosts", nil
	}
	var resolvers []netip.AddrPort
	for _, r := range cfg.Network.Resolvers {
		resolvers = append(resolvers, r.AddrPort)
	}
	addrs, err := newDialer(resolvers, DialTimeout).resolver.LookupNetIP(ctx, "ip", h.Name()+".")
	return addrs, "DNS", err
}

// resolve returns the addresses for h: the address itself for an IP host,
// network.hosts entries, else a DNS lookup. Every address is checked; if
// any is blocked, resolve fails with that *policy.BlockedAddrError (a name
// that resolves to both public and internal addresses is a rebinding
// attempt, not a choice).
func (d *dialer) resolve(ctx context.Context, cfg *policy.Config, h policy.Host) ([]netip.Addr, error) {
	var addrs []netip.Addr
	switch static, ok := cfg.StaticHost(h); {
	case h.IsIP():
		addrs = []netip.Addr{h.Addr()}
	case ok:
		addrs = static
	default:
		var err error
		// Fully qualified, so resolv.conf search domains never turn an
		// allowed name into another one.
		addrs, err = d.resolver.LookupNetIP(ctx, "ip", h.Name()+".")
		if err != nil {
			return nil, &resolveError{err}
		}
	}
	rules := cfg.AddressRules()
	for _, a := range addrs {
		if err := rules.Check(a); err != nil {
			return nil, err
		}
	}
	if len(addrs) == 0 {
		return nil, &resolveError{errors.New("no addresses")}
	}
	return addrs, nil
}

// resolveError is a failed DNS lookup.
type resolveError struct{ err error }

func (e *resolveError) Error() string { return "resolve: " + e.err.Error() }
func (e *resolveError) Unwrap() error { return e.err }

// dial connects to h:port through checked addresses only, trying each in
// turn. Errors: *policy.BlockedAddrError when an address is blocked,
// errSelf for the proxy's own listener, else the last dial error.
func (d *dialer) dial(ctx context.Context, cfg *policy.Config, h policy.Host, port uint16) (*net.TCPConn, error) {
	addrs, err := d.resolve(ctx, cfg, h)
	if err != nil {
		return nil, err
	}
	// No TCP keep-alive probes: idle_timeout ends idle connections and
	// tunnels long before they would find a dead peer, and leaving them
	// off spares each dial its setsockopt calls.
	nd := net.Dialer{Timeout: d.timeout, KeepAlive: -1, Control: d.control(cfg.AddressRules())}
	var lastErr error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, port)
		if d.isSelf(ap) {
			return nil, errSelf
		}
		c, err := nd.DialContext(ctx, "tcp", ap.String())
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		lastErr = err
		var blocked *policy.BlockedAddrError
		if errors.As(err, &blocked) || errors.Is(err, errSelf) || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// control returns a net.Dialer.Control hook. It runs after the socket is
// created and before connect(2), with the literal address being
// connected, and checks it again against rules and the proxy's own
// listeners, so nothing but a checked address is ever dialled.
func (d *dialer) control(rules *policy.AddressRules) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("dial control: unparseable address: %w", err)
		}
		if err := rules.Check(ap.Addr()); err != nil {
			return err
		}
		if d.isSelf(ap) {
			return errSelf
		}
		return nil
	}
}

// dialContext adapts dial to http.Transport.DialContext: addr is the
// canonical "host:port" the server put in the request URL, and the
// configuration comes from the request's context.
func (d *dialer) dialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	cfg, _ := ctx.Value(configKey{}).(*policy.Config)
	if cfg == nil {
		return nil, errors.New("airlock: dial without a configuration in context")
	}
	h, port, err := policy.ParseAuthority(addr, 0)
	if err != nil {
		return nil, err
	}
	return d.dial(ctx, cfg, h, port)
}

// configKey carries the *policy.Config a request was decided with.
type configKey struct{}

// authority formats h:port for a URL, bracketing IPv6.
func authority(h policy.Host, port uint16) string {
	if h.IsIP() && h.Addr().Is6() {
		return "[" + h.String() + "]:" + strconv.Itoa(int(port))
	}
	return h.String() + ":" + strconv.Itoa(int(port))
}

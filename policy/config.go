package policy

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// Defaults for keys a file leaves out.
const (
	DefaultProxyAddr     = "127.0.0.1:3128"
	DefaultHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout   = 5 * time.Minute
	DefaultDrainTimeout  = 10 * time.Second
	// DefaultMaxHeaderBytes is limits.max_header_bytes when unset, and
	// MaxHeaderBytesCap the most it may be.
	DefaultMaxHeaderBytes ByteSize = 64 << 10
	MaxHeaderBytesCap     ByteSize = 1 << 20
	DefaultBytesWindow             = time.Hour
	DefaultSandbox                 = "default" // the sandbox of clients no other sandbox claims
)

// DefaultPorts are the destination ports of allow rules that name none, when
// network.ports is not set.
var DefaultPorts = []uint16{80, 443}

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the embedded default configuration for coding agents:
// package registries, GitHub and the main LLM APIs, everything else denied.
func DefaultYAML() []byte { return slices.Clone(defaultYAML) }

// Default parses the embedded default configuration. It cannot fail in a
// released binary; tests make sure of it.
func Default() (*Config, error) { return Parse("<embedded default>", defaultYAML) }

// Load reads and parses the configuration file at path. See Parse.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes, validates and compiles one YAML configuration. filename is
// used only in error messages. On failure it returns nil and every problem
// found, each a *ConfigError naming file:line:col, the key path and what
// was expected, joined with errors.Join.
func Parse(filename string, data []byte) (*Config, error) {
	d := &decoder{file: filename}
	c := &Config{file: filename}
	d.decodeYAML(data, c)
	if len(d.errs) == 0 {
		c.validate(d)
	}
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	c.compile()
	return c, nil
}

var policyName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidName reports whether name can name a policy or a sandbox: 1 to 63
// lower-case letters, digits, '-' and '_', starting with a letter or
// digit.
func ValidName(name string) bool { return policyName.MatchString(name) }

// validate applies defaults and checks what single nodes cannot: references
// between sections and keys that later versions will implement.
func (c *Config) validate(d *decoder) {
	if c.Listen.Proxy == "" {
		c.Listen.Proxy = DefaultProxyAddr
	}
	switch c.DNS.Mode {
	case "":
		c.DNS.Mode = "forward"
	case "forward":
	case "synthetic":
		if len(c.DNS.Answer) == 0 {
			d.errorfAt(c.DNS.Pos, "dns.answer", "synthetic mode answers allowed names with Airlock's own address: list it (as the sandbox reaches it)")
		}
	default:
		d.errorfAt(c.DNS.Pos, "dns.mode", "%q: expected forward or synthetic", c.DNS.Mode)
	}
	for i, a := range c.DNS.Answer {
		if !a.IsSingleIP() {
			d.errorfAt(c.DNS.Pos, fmt.Sprintf("dns.answer[%d]", i), "%s: give single addresses, not ranges", a.Prefix)
		}
	}
	if c.Mode == "" {
		c.Mode = Enforce
	}
	if c.Limits.HeaderTimeout == 0 {
		c.Limits.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.Limits.IdleTimeout == 0 {
		c.Limits.IdleTimeout = DefaultIdleTimeout
	}
	if c.Limits.DrainTimeout == 0 {
		c.Limits.DrainTimeout = DefaultDrainTimeout
	}
	if c.Limits.MaxHeaderBytes == 0 {
		c.Limits.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.Limits.BytesWindow == 0 {
		c.Limits.BytesWindow = DefaultBytesWindow
	}
	checkLimits(d, c.Limits, c.Limits.Pos, "limits")
	if c.Audit.Output == "" {
		c.Audit.Output = "stdout"
	}
	if c.Auth.Key != "" && c.file != "" && !strings.HasPrefix(c.file, "<") && !filepath.IsAbs(c.Auth.Key) {
		c.Auth.Key = filepath.Join(filepath.Dir(c.file), c.Auth.Key)
	}
	if (c.TLS.CACert == "") != (c.TLS.CAKey == "") {
		d.errorfAt(c.TLS.Pos, "tls", "set both ca_cert and ca_key, or neither (Airlock then generates a CA into its state directory)")
	}
	if c.file != "" && !strings.HasPrefix(c.file, "<") {
		// Relative TLS paths are relative to the configuration file.
		for _, p := range []*string{&c.TLS.CACert, &c.TLS.CAKey, &c.TLS.UpstreamCA} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(filepath.Dir(c.file), *p)
			}
		}
	}
	if c.Network.Ports != nil && len(c.Network.Ports) == 0 {
		d.errorfAt(c.Network.Pos, "network.ports", "an empty list allows no port; remove the key for the default [80, 443]")
	}
	var deny []netip.Prefix
	for _, p := range c.Network.DenyCIDRs {
		deny = append(deny, p.Prefix)
	}
	for i, p := range c.Network.AllowCIDRs {
		if err := CheckAllowCIDR(p.Prefix, deny); err != nil {
			d.errorfAt(p.pos, fmt.Sprintf("network.allow_cidrs[%d]", i), "%v", err)
		}
	}
	for _, name := range sortedKeys(c.Policies) {
		p := c.Policies[name]
		if p == nil {
			p = &PolicySpec{}
			c.Policies[name] = p
		}
		if !policyName.MatchString(name) {
			d.errorfAt(p.Pos, "policies."+name, "policy names are lower-case letters, digits, - and _")
		}
		for _, kind := range []string{"allow", "deny"} {
			rules := p.Allow
			if kind == "deny" {
				rules = p.Deny
			}
			for i, r := range rules {
				for _, e := range []struct {
					key   string
					empty bool
				}{
					{"ports", r.Ports != nil && len(r.Ports) == 0},
					{"methods", r.Methods != nil && len(r.Methods) == 0},
					{"paths", r.Paths != nil && len(r.Paths) == 0},
				} {
					if e.empty {
						d.errorfAt(r.Pos, fmt.Sprintf("policies.%s.%s[%d].%s", name, kind, i, e.key), "an empty list: remove the key (meaning any) or list what is allowed")
					}
				}
				if r.Credential != "" {
					c.checkRuleCredential(d, r, fmt.Sprintf("policies.%s.%s[%d]", name, kind, i), kind)
				}
				if len(r.DNSTypes) > 0 && kind != "allow" {
					d.errorfAt(r.Pos, fmt.Sprintf("policies.%s.%s[%d].dns_types", name, kind, i), "only allow rules open DNS record types")
				}
				if r.Host.Host.IsZero() {
					d.errorfAt(r.Pos, fmt.Sprintf("policies.%s.%s[%d]", name, kind, i), "a rule needs a host")
				}
			}
		}
	}
	c.validateCredentials(d)
	seen := map[string]bool{}
	owner := map[netip.Prefix]string{}
	for i, s := range c.Sandboxes {
		path := fmt.Sprintf("sandboxes[%d]", i)
		switch {
		case !policyName.MatchString(s.Name):
			d.errorfAt(s.Pos, path+".name", "a sandbox needs a name of lower-case letters, digits, - and _")
		case seen[s.Name]:
			d.errorfAt(s.Pos, path+".name", "sandbox %q is defined twice", s.Name)
		}
		seen[s.Name] = true
		if s.Policy == "" {
			if _, ok := c.Policies[s.Name]; ok {
				c.Sandboxes[i].Policy = s.Name
			} else {
				c.Sandboxes[i].Policy = DefaultSandbox
			}
		}
		if _, ok := c.Policies[c.Sandboxes[i].Policy]; !ok {
			d.errorfAt(s.Pos, path+".policy", "no policy named %q; define it under policies", c.Sandboxes[i].Policy)
		}
		if s.Limits.HeaderTimeout != 0 {
			d.errorfAt(s.Pos, path+".limits.header_timeout", "header_timeout applies to the whole listener; set it under the top-level limits")
		}
		checkLimits(d, s.Limits, s.Pos, path+".limits")
		if s.Limits.MaxHeaderBytes > c.Limits.MaxHeaderBytes {
			d.errorfAt(s.Pos, path+".limits.max_header_bytes", "%s is above the listener's cap, the top-level limits.max_header_bytes (%s); raise that one, or give the sandbox a lower cap",
				s.Limits.MaxHeaderBytes, c.Limits.MaxHeaderBytes)
		}
		if s.Limits.DrainTimeout != 0 {
			d.errorfAt(s.Pos, path+".limits.drain_timeout", "drain_timeout applies to the whole process; set it under the top-level limits")
		}
		for _, p := range s.Clients {
			if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
				// SandboxFor unmaps the client, so this range would never
				// match and its clients would silently be "default".
				d.errorfAt(s.Pos, path+".clients", "%s is an IPv4-mapped range; write %s (clients are matched as IPv4)", p.Prefix, netip.PrefixFrom(a.Unmap(), p.Bits()-96))
				continue
			}
			if other, dup := owner[p.Prefix]; dup {
				d.errorfAt(s.Pos, path+".clients", "%s is already a client range of sandbox %q", p.Prefix, other)
			}
			owner[p.Prefix] = s.Name
		}
	}
}

// errorfAt records an error found after decoding at p, a struct's Pos.
func (d *decoder) errorfAt(p position, path, format string, args ...any) {
	d.errs = append(d.errs, &ConfigError{File: d.file, Line: p.Line, Col: p.Col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// compile builds the matchers of a validated Config.
func (c *Config) compile() {
	for _, p := range c.Network.AllowCIDRs {
		c.addrs.Allow = append(c.addrs.Allow, p.Prefix)
	}
	for _, p := range c.Network.DenyCIDRs {
		c.addrs.Deny = append(c.addrs.Deny, p.Prefix)
	}
	ports := DefaultPorts
	if len(c.Network.Ports) > 0 {
		ports = nil
		for _, p := range c.Network.Ports {
			ports = append(ports, uint16(p))
		}
	}
	c.hosts = c.Network.Hosts
	c.policies = make(map[string]*Policy, len(c.Policies))
	for name, spec := range c.Policies {
		c.policies[name] = compilePolicy(name, spec, ports)
	}
	c.sandboxes = make(map[string]*Sandbox, len(c.Sandboxes)+1)
	c.sandboxes[DefaultSandbox] = newSandbox(DefaultSandbox, c.policies[DefaultSandbox], c.Mode == Report, c.Limits, Limits{})
	for _, s := range c.Sandboxes {
		mode := c.Mode
		if s.Mode != "" {
			mode = s.Mode
		}
		sb := newSandbox(s.Name, c.policies[s.Policy], mode == Report, c.Limits, s.Limits)
		c.sandboxes[s.Name] = sb
		for _, p := range s.Clients {
			c.clients = append(c.clients, clientRoute{p.Prefix, sb})
		}
	}
	// Longest prefix first, so the most specific client range wins.
	sort.SliceStable(c.clients, func(i, j int) bool { return c.clients[i].prefix.Bits() > c.clients[j].prefix.Bits() })
}

// Sandbox is an identity with its compiled policy and limits.
type Sandbox struct {
	Name        string
	Policy      *Policy       // nil: no policy, everything is denied
	IdleTimeout time.Duration // CONNECT tunnel idle timeout
	// RequestsPerSecond and Burst are the sandbox's request rate limit
	// (token bucket); RequestsPerSecond 0 means none.
	RequestsPerSecond float64
	Burst             int
	// MaxTunnelLifetime closes tunnels this long after they open; 0: never.
	MaxTunnelLifetime time.Duration
	// MaxConnections caps requests in flight plus open tunnels; 0: none.
	MaxConnections int
	// MaxHeaderBytes caps a request header (bytes, as received); never
	// above the listener's cap.
	MaxHeaderBytes int64
	// MaxRequestBody caps one request body in bytes; 0: none.
	MaxRequestBody int64
	// MaxBytesSent and MaxBytesReceived cap the bytes moved each way in
	// each BytesWindow; 0: none.
	MaxBytesSent, MaxBytesReceived int64
	BytesWindow                    time.Duration
	// Report is set in report mode: the allowlist's refusals are logged
	// as would_deny and let through (see Decision.Reportable).
	Report bool
}

// checkLimits reports a negative burst or connection cap, and a header
// cap outside 1 KiB..1 MiB.
func checkLimits(d *decoder, l Limits, pos position, path string) {
	if l.MaxHeaderBytes != 0 && (l.MaxHeaderBytes < 1<<10 || l.MaxHeaderBytes > MaxHeaderBytesCap) {
		d.errorfAt(pos, path+".max_header_bytes", "%s: give a size from 1KiB to %s", l.MaxHeaderBytes, MaxHeaderBytesCap)
	}
	if l.Burst < 0 {
		d.errorfAt(pos, path+".burst", "%d: give a positive number of requests, or leave it out", l.Burst)
	}
	if l.MaxConnections < 0 {
		d.errorfAt(pos, path+".max_connections", "%d: give a positive number of connections, or leave it out", l.MaxConnections)
	}
}

// newSandbox returns a sandbox whose limits are top's, overridden by each
// limit own sets. A sandbox that sets its own rate gets its own default
// burst (the rate rounded up, at least 1) unless it sets a burst too.
func newSandbox(name string, p *Policy, report bool, top, own Limits) *Sandbox {
	sb := &Sandbox{Name: name, Policy: p, Report: report, IdleTimeout: top.IdleTimeout,
		RequestsPerSecond: top.RequestsPerSecond, Burst: top.Burst,
		MaxTunnelLifetime: top.MaxTunnelLifetime, MaxConnections: top.MaxConnections,
		MaxHeaderBytes: int64(top.MaxHeaderBytes), MaxRequestBody: int64(top.MaxRequestBody),
		MaxBytesSent: int64(top.MaxBytesSent), MaxBytesReceived: int64(top.MaxBytesReceived), BytesWindow: top.BytesWindow}
	for _, o := range []struct {
		own int64
		sb  *int64
	}{
		{int64(own.MaxHeaderBytes), &sb.MaxHeaderBytes},
		{int64(own.MaxRequestBody), &sb.MaxRequestBody},
		{int64(own.MaxBytesSent), &sb.MaxBytesSent},
		{int64(own.MaxBytesReceived), &sb.MaxBytesReceived},
	} {
		if o.own != 0 {
			*o.sb = o.own
		}
	}
	if own.BytesWindow != 0 {
		sb.BytesWindow = own.BytesWindow
	}
	if own.IdleTimeout != 0 {
		sb.IdleTimeout = own.IdleTimeout
	}
	if own.RequestsPerSecond != 0 {
		sb.RequestsPerSecond, sb.Burst = own.RequestsPerSecond, 0
	}
	if own.Burst != 0 {
		sb.Burst = own.Burst
	}
	if own.MaxTunnelLifetime != 0 {
		sb.MaxTunnelLifetime = own.MaxTunnelLifetime
	}
	if own.MaxConnections != 0 {
		sb.MaxConnections = own.MaxConnections
	}
	if sb.RequestsPerSecond > 0 && sb.Burst == 0 {
		sb.Burst = max(1, int(math.Ceil(sb.RequestsPerSecond)))
	}
	return sb
}

// Reportable reports whether report mode lets a refusal with this
// decision through: refusals by the allowlist and deny rules (host, port,
// method, path, no policy). Address blocks, non-canonical paths and the
// rest are enforced in every mode.
func (d Decision) Reportable() bool {
	switch d.Reason {
	case HostNotAllowed, PortNotAllowed, MethodNotAllowed, PathNotAllowed, DeniedByRule, NoPolicy:
		return !d.Allow
	}
	return false
}

type clientRoute struct {
	prefix netip.Prefix
	sb     *Sandbox
}

// SandboxFor returns the sandbox of a client address: the sandbox whose
// clients range contains it most specifically, else the "default" sandbox.
// It never returns nil.
func (c *Config) SandboxFor(client netip.Addr) *Sandbox {
	client = client.Unmap()
	for _, r := range c.clients {
		if r.prefix.Contains(client) {
			return r.sb
		}
	}
	return c.sandboxes[DefaultSandbox]
}

// Sandbox returns the sandbox with the given name; "default" always exists.
func (c *Config) Sandbox(name string) (*Sandbox, bool) {
	sb, ok := c.sandboxes[name]
	return sb, ok
}

// AddressRules returns the address rules (built-in list plus
// network.allow_cidrs and network.deny_cidrs) every dialled address must pass.
func (c *Config) AddressRules() *AddressRules { return &c.addrs }

// StaticHost returns the fixed addresses network.hosts gives for h, if any.
// Callers must check them with AddressRules like any DNS answer.
func (c *Config) StaticHost(h Host) ([]netip.Addr, bool) {
	a, ok := c.hosts[h.Name()]
	return a, ok && !h.IsIP()
}

// WithAllowCIDRs returns a copy of c whose address rules also allow the
// given prefixes (airlock run --allow-cidr). c is not changed. It fails,
// like network.allow_cidrs, for a prefix that would open a cloud metadata
// address (see CheckAllowCIDR).
func (c *Config) WithAllowCIDRs(extra []netip.Prefix) (*Config, error) {
	for _, p := range extra {
		if err := CheckAllowCIDR(p, c.addrs.Deny); err != nil {
			return nil, err
		}
	}
	cp := *c
	cp.addrs.Allow = append(slices.Clone(c.addrs.Allow), extra...)
	return &cp, nil
}

// NeedsInterception reports whether any policy has a rule that only TLS
// interception can enforce on HTTPS (methods, paths or a credential), so a
// CA is needed.
func (c *Config) NeedsInterception() bool {
	for _, p := range c.Policies {
		for _, rules := range [][]Rule{p.Allow, p.Deny} {
			for _, r := range rules {
				if len(r.Methods) > 0 || len(r.Paths) > 0 || r.Credential != "" {
					return true
				}
			}
		}
	}
	return false
}

// File returns the file name the configuration was parsed from.
func (c *Config) File() string { return c.file }

// String summarises the configuration for logs: policies and sandboxes
// (the implicit "default" included).
func (c *Config) String() string {
	return fmt.Sprintf("policies: %s; sandboxes: %s", orNone(sortedKeys(c.Policies)), orNone(sortedKeys(c.sandboxes)))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

// Warnings returns what is valid but probably not what the author meant,
// one line per finding, each naming file:line:col and the key path: a
// missing default policy (so unclaimed clients are denied everything), an
// IP-literal allow rule for an address that stays blocked, and an
// IP-literal deny rule (names that resolve to that address are not
// stopped by it; network.deny_cidrs is).
func (c *Config) Warnings() []string {
	var out []string
	at := func(p position, path, format string, args ...any) {
		out = append(out, (&ConfigError{File: c.file, Line: p.Line, Col: p.Col, Path: path, Msg: fmt.Sprintf(format, args...)}).Error())
	}
	if _, ok := c.Policies[DefaultSandbox]; !ok {
		at(position{}, "policies", "no policy named %q: clients that no sandbox claims are denied everything", DefaultSandbox)
	}
	for _, name := range sortedKeys(c.Policies) {
		spec := c.Policies[name]
		for i, r := range spec.Allow {
			if a := r.Host.Host.Addr(); r.Host.Host.IsIP() && c.addrs.Check(a) != nil {
				at(r.Pos, fmt.Sprintf("policies.%s.allow[%d]", name, i),
					"%s is a blocked address, so this rule has no effect unless network.allow_cidrs covers it", a)
			}
		}
		for i, r := range spec.Allow {
			if len(r.Methods) == 0 && len(r.Paths) == 0 && r.Credential == "" {
				continue
			}
			// A broader allow rule for the same host and port lets through
			// what this rule's methods and paths hold back.
			for j, o := range spec.Allow {
				if j != i && len(o.Methods) == 0 && len(o.Paths) == 0 && o.Host.Covers(r.Host) && portsOverlap(r.Ports, o.Ports) {
					at(r.Pos, fmt.Sprintf("policies.%s.allow[%d]", name, i),
						"its methods and paths limit nothing: policies.%s.allow[%d] allows %s on the same port without them", name, j, o.Host)
					break
				}
			}
		}
		for i, r := range spec.Deny {
			if r.Host.Host.IsIP() {
				at(r.Pos, fmt.Sprintf("policies.%s.deny[%d]", name, i),
					"a deny rule on an IP literal does not stop names that resolve to %s; use network.deny_cidrs for that", r.Host.Host)
			}
		}
	}
	return out
}

// Decide is the host-level decision for sandbox sb connecting to h:port
// (DESIGN.md: policy.Decide(sandbox, host, port)), made before any DNS
// lookup. It is sb's Policy.Decide, except that an IP literal the address
// rules block is refused as AddressBlocked whatever the allowlist says:
// that is the reason that matters for 169.254.169.254, and it needs no
// lookup either.
func (c *Config) Decide(sb *Sandbox, h Host, port uint16) Decision {
	return c.explainIP(h, sb.Policy.Decide(h, port))
}

// DecideRequest is Decide for one HTTP request with method and escaped
// path; see Policy.DecideRequest.
func (c *Config) DecideRequest(sb *Sandbox, h Host, port uint16, method, escapedPath string) Decision {
	return c.explainIP(h, sb.Policy.DecideRequest(h, port, method, escapedPath))
}

func (c *Config) explainIP(h Host, d Decision) Decision {
	if h.IsIP() && c.addrs.Check(h.Addr()) != nil {
		return Decision{Reason: AddressBlocked, Rule: d.Rule}
	}
	return d
}

// Defaults for credentials.
const (
	DefaultInjectHeader   = "Authorization"
	DefaultInjectFormat   = "Bearer {token}"
	DefaultCommandTTL     = 5 * time.Minute
	DefaultCommandTimeout = 10 * time.Second
	// MinPlaceholderLen keeps placeholders long enough that finding one in
	// a request is never a coincidence.
	MinPlaceholderLen = 16
)

// validateCredentials checks each credential and applies its defaults.
func (c *Config) validateCredentials(d *decoder) {
	for _, name := range sortedKeys(c.Credentials) {
		cr := c.Credentials[name]
		path := "credentials." + name
		if cr == nil {
			d.errorfAt(position{}, path, "a credential needs source, hosts and (optionally) inject")
			continue
		}
		if !policyName.MatchString(name) {
			d.errorfAt(cr.Pos, path, "credential names are lower-case letters, digits, - and _")
		}
		src := cr.Source
		n := 0
		for _, set := range []bool{src.Env != "", src.File != "", len(src.Command) > 0, src.JWT != nil, src.OAuth2 != nil, src.GitHubApp != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			at := src.Pos
			if at.Line == 0 {
				at = cr.Pos // no source key at all
			}
			d.errorfAt(at, path+".source", "give exactly one of env, file, command, jwt, oauth2 or github_app")
		}
		c.validateMinters(d, path+".source", &cr.Source)
		if len(src.Command) == 0 && (src.TTL != 0 || src.Timeout != 0) {
			d.errorfAt(src.Pos, path+".source", "ttl and timeout apply to command sources only")
		}
		if src.File != "" && c.file != "" && !strings.HasPrefix(c.file, "<") && !filepath.IsAbs(src.File) {
			cr.Source.File = filepath.Join(filepath.Dir(c.file), src.File)
		}
		if cr.Source.TTL == 0 {
			cr.Source.TTL = DefaultCommandTTL
		}
		if cr.Source.Timeout == 0 {
			cr.Source.Timeout = DefaultCommandTimeout
		}
		if len(cr.Hosts) == 0 {
			d.errorfAt(cr.Pos, path+".hosts", "list the hosts this credential may be sent to; it is sent nowhere else")
		}
		if cr.Inject.Header == "" {
			cr.Inject.Header = DefaultInjectHeader
		}
		if cr.Inject.Format == "" {
			cr.Inject.Format = DefaultInjectFormat
		}
		switch h := http.CanonicalHeaderKey(cr.Inject.Header); {
		case !isToken(cr.Inject.Header):
			d.errorfAt(cr.Inject.Pos, path+".inject.header", "%q is not a header name", cr.Inject.Header)
		case slices.Contains(reservedHeaders, h):
			d.errorfAt(cr.Inject.Pos, path+".inject.header", "%s is managed by HTTP itself; inject into another header", h)
		}
		if strings.Count(cr.Inject.Format, "{token}") != 1 || strings.ContainsAny(cr.Inject.Format, "\r\n") {
			d.errorfAt(cr.Inject.Pos, path+".inject.format", "the format must contain {token} exactly once, on one line, as in \"Bearer {token}\"")
		}
		if p := cr.Placeholder; p != "" && (len(p) < MinPlaceholderLen || strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r >= 0x7f })) {
			d.errorfAt(cr.Pos, path+".placeholder", "a placeholder needs at least %d printable ASCII characters and no spaces, so that finding it in a request is never a coincidence", MinPlaceholderLen)
		}
	}
}

// reservedHeaders may not carry a credential: HTTP framing and routing
// depend on them.
var reservedHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Te", "Trailer", "Upgrade",
	"Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Proxy-Connection", "Content-Type", "Expect"}

// checkRuleCredential checks that a rule's credential exists and is bound
// to the rule's host.
func (c *Config) checkRuleCredential(d *decoder, r Rule, path, kind string) {
	if kind != "allow" {
		d.errorfAt(r.Pos, path+".credential", "only allow rules inject credentials")
		return
	}
	cr, ok := c.Credentials[r.Credential]
	if !ok || cr == nil {
		d.errorfAt(r.Pos, path+".credential", "no credential named %q; define it under credentials", r.Credential)
		return
	}
	if r.Host.Host.IsZero() {
		return
	}
	for _, h := range cr.Hosts {
		if h.Covers(r.Host) {
			return
		}
	}
	d.errorfAt(r.Pos, path+".credential", "credential %q is not bound to %s; add it to credentials.%s.hosts if it may be sent there", r.Credential, r.Host, r.Credential)
}

// portsOverlap reports whether two rules' port lists may share a port. An
// empty list means network.ports, so it is taken to overlap any list:
// a warning too many beats one missed.
func portsOverlap(a, b []Port) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, p := range a {
		if slices.Contains(b, p) {
			return true
		}
	}
	return false
}

// Defaults for minters.
const (
	DefaultJWTTTL       = 5 * time.Minute
	MaxJWTTTL           = time.Hour
	DefaultGitHubAPIURL = "https://api.github.com"
)

// validateMinters checks a jwt, oauth2 or github_app source and applies
// its defaults; key and secret file paths are made relative to the file.
func (c *Config) validateMinters(d *decoder, path string, src *SourceSpec) {
	value := func(v *ValueSpec, vpath string, what string) {
		if (v.Env == "") == (v.File == "") {
			at := v.Pos
			if at.Line == 0 {
				at = src.Pos
			}
			d.errorfAt(at, vpath, "give the %s as exactly one of env or file", what)
		}
		if v.File != "" && c.file != "" && !strings.HasPrefix(c.file, "<") && !filepath.IsAbs(v.File) {
			v.File = filepath.Join(filepath.Dir(c.file), v.File)
		}
	}
	if j := src.JWT; j != nil {
		switch j.Algorithm {
		case "":
			j.Algorithm = "ES256"
		case "ES256", "RS256", "EdDSA", "HS256":
		default:
			d.errorfAt(j.Pos, path+".jwt.algorithm", "%q: expected ES256, RS256, EdDSA or HS256", j.Algorithm)
		}
		value(&j.Key, path+".jwt.key", "signing key")
		if j.Issuer == "" {
			j.Issuer = "airlock"
		}
		if j.TTL == 0 {
			j.TTL = DefaultJWTTTL
		}
		if j.TTL < time.Minute || j.TTL > MaxJWTTTL {
			d.errorfAt(j.Pos, path+".jwt.ttl", "a token lives from 1m to %s; short-lived is the point", MaxJWTTTL)
		}
	}
	if o := src.OAuth2; o != nil {
		if u, err := url.Parse(o.TokenURL); err != nil || u.Scheme != "https" || u.Host == "" {
			d.errorfAt(o.Pos, path+".oauth2.token_url", "expected an https:// URL of the token endpoint")
		}
		if o.ClientID == "" {
			d.errorfAt(o.Pos, path+".oauth2.client_id", "the client ID is required")
		}
		value(&o.ClientSecret, path+".oauth2.client_secret", "client secret")
	}
	if g := src.GitHubApp; g != nil {
		if g.AppID == "" {
			d.errorfAt(g.Pos, path+".github_app.app_id", "the app ID (or client ID) is required")
		}
		if g.InstallationID <= 0 {
			d.errorfAt(g.Pos, path+".github_app.installation_id", "the installation ID is required")
		}
		value(&g.PrivateKey, path+".github_app.private_key", "app private key")
		if g.APIURL == "" {
			g.APIURL = DefaultGitHubAPIURL
		}
		if u, err := url.Parse(g.APIURL); err != nil || u.Scheme != "https" || u.Host == "" {
			d.errorfAt(g.Pos, path+".github_app.api_url", "expected an https:// URL such as https://api.github.com")
		}
		for i, r := range g.Repositories {
			if r == "" || strings.ContainsAny(r, "/ ") {
				d.errorfAt(g.Pos, fmt.Sprintf("%s.github_app.repositories[%d]", path, i), "%q: give repository names without the owner (the installation's account)", r)
			}
		}
		for _, k := range sortedKeys(g.Permissions) {
			if v := g.Permissions[k]; v != "read" && v != "write" && v != "admin" {
				d.errorfAt(g.Pos, path+".github_app.permissions."+k, "%q: expected read, write or admin", v)
			}
		}
	}
}

// CheckReload reports what in c cannot replace old without a restart:
// listeners and their header limits, TLS files, resolvers, credentials and DNS settings are bound
// when Airlock starts, and so is turning session tokens on (the signing
// key is loaded at start). Policies, sandboxes, address rules, static
// hosts, ports, limits, auth.revoked and turning auth.required off can
// change. The error names the keys that differ.
func (c *Config) CheckReload(old *Config) error {
	var keys []string
	for _, f := range []struct {
		key      string
		now, was any
	}{
		{"listen", c.Listen, old.Listen},
		// Read by the listener's http.Server, which cannot change them.
		{"limits.header_timeout", c.Limits.HeaderTimeout, old.Limits.HeaderTimeout},
		{"limits.max_header_bytes", c.Limits.MaxHeaderBytes, old.Limits.MaxHeaderBytes},
		{"tls", c.TLS, old.TLS},
		{"auth.key", c.Auth.Key, old.Auth.Key},
		{"network.resolvers", c.Network.Resolvers, old.Network.Resolvers},
		{"credentials", c.Credentials, old.Credentials},
		{"dns", c.DNS, old.DNS},
		{"audit", c.Audit, old.Audit},
	} {
		if !equalIgnoringPos(reflect.ValueOf(f.now), reflect.ValueOf(f.was)) {
			keys = append(keys, f.key)
		}
	}
	if c.Auth.Enabled() && !old.Auth.Enabled() {
		keys = append(keys, "auth.required (turning session tokens on)")
	}
	if len(keys) > 0 {
		return fmt.Errorf("%s changed, which takes effect only when Airlock restarts; the running configuration stays", strings.Join(keys, ", "))
	}
	return nil
}

// equalIgnoringPos compares two decoded configuration values, ignoring
// the source positions they carry (an edit elsewhere in the file moves
// them).
func equalIgnoringPos(a, b reflect.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equalIgnoringPos(a.Elem(), b.Elem())
	case reflect.Struct:
		if a.Type() != b.Type() {
			return false
		}
		if a.Type() == positionType {
			return true
		}
		if a.Comparable() && !hasPosition(a.Type()) {
			return a.Equal(b) // netip values and the like
		}
		for i := range a.NumField() {
			if !equalIgnoringPos(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equalIgnoringPos(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() || !equalIgnoringPos(a.MapIndex(k), bv) {
				return false
			}
		}
		return true
	}
	return a.Equal(b) // basic kinds; works on unexported fields too
}

// hasPosition reports whether t holds a position field anywhere directly.
func hasPosition(t reflect.Type) bool {
	for i := range t.NumField() {
		ft := t.Field(i).Type
		if ft == positionType || (ft.Kind() == reflect.Struct && hasPosition(ft)) {
			return true
		}
	}
	return false
}

package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is one validated configuration file: the YAML contract of
// DESIGN.md ("Configuration contract") plus the matchers compiled from it.
// A *Config is immutable once Parse returns it and is safe for concurrent
// use; a reload builds a new one.
type Config struct {
	Listen    Listen                 `yaml:"listen"`
	Mode      Mode                   `yaml:"mode"`
	Network   Network                `yaml:"network"`
	TLS       TLSSpec                `yaml:"tls"`
	Limits    Limits                 `yaml:"limits"`
	Policies  map[string]*PolicySpec `yaml:"policies"`
	Sandboxes []SandboxSpec          `yaml:"sandboxes"`
	DNS       DNSSpec                `yaml:"dns"`
	Auth      AuthSpec               `yaml:"auth"`
	// Credentials are what Airlock injects into allowed requests, by name;
	// a rule's credential field refers to one.
	Credentials map[string]*CredentialSpec `yaml:"credentials"`
	Audit       AuditSpec                  `yaml:"audit"`

	file      string
	addrs     AddressRules
	hosts     map[string][]netip.Addr
	policies  map[string]*Policy
	sandboxes map[string]*Sandbox
	clients   []clientRoute
}

// Listen holds the listener addresses, each "host:port".
type Listen struct {
	Proxy ListenAddr `yaml:"proxy"` // HTTP proxy; default 127.0.0.1:3128
	DNS   ListenAddr `yaml:"dns"`   // DNS listener (UDP and TCP); empty = none
	Admin ListenAddr `yaml:"admin"` // /healthz and /readyz; empty = off
	Pos   position
}

// Mode says whether host-allowlist denials are enforced.
type Mode string

// Modes. In report mode, requests the allowlist would refuse (by host,
// port, method, path or a deny rule) are allowed and logged with decision
// "would_deny"; address blocking, authority checks, TLS checks and
// credential binding are enforced in both modes.
const (
	Enforce Mode = "enforce"
	Report  Mode = "report"
)

func (m *Mode) decodeNode(d *decoder, n *yaml.Node, path string) {
	switch {
	case isScalar(n, "!!str") && n.Value == string(Enforce):
		*m = Enforce
	case isScalar(n, "!!str") && n.Value == string(Report):
		*m = Report
	default:
		d.errorf(n, path, "expected enforce or report, got %s", describe(n))
	}
}

// Network holds the address-level controls and how the proxy resolves names.
type Network struct {
	DenyCIDRs  []Prefix    `yaml:"deny_cidrs"`  // added to the built-in special-purpose list
	AllowCIDRs []Prefix    `yaml:"allow_cidrs"` // explicit exceptions to the built-in list
	Ports      []Port      `yaml:"ports"`       // default ports for rules that name none; default [80, 443]
	Resolvers  []Resolver  `yaml:"resolvers"`   // "IP" or "IP:port"; empty = the system resolver
	Hosts      StaticHosts `yaml:"hosts"`       // name -> address(es), checked like any DNS answer
	Pos        position
}

// TLSSpec holds the files for TLS interception. Relative paths are
// relative to the configuration file's directory.
type TLSSpec struct {
	// CACert and CAKey are the interception CA (PEM). Both empty: Airlock
	// generates a CA into its state directory the first time a policy
	// needs interception. One without the other is an error.
	CACert string `yaml:"ca_cert"`
	CAKey  string `yaml:"ca_key"`
	// UpstreamCA is a PEM bundle of extra roots for verifying upstream
	// servers; the system roots are always used too.
	UpstreamCA string `yaml:"upstream_ca"`
	Pos        position
}

// Limits holds timeouts and quotas. Top-level values are the defaults; a
// sandbox's limits override them where set (header_timeout and
// drain_timeout are top level only).
type Limits struct {
	// HeaderTimeout bounds reading a request's header; default 10s. Top level
	// only: the sandbox is not known until the header is read.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// IdleTimeout closes a CONNECT tunnel after this long with no bytes in
	// either direction, and idle client keep-alive connections; default 5m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// DrainTimeout is how long a shutdown (SIGTERM, SIGINT) lets requests
	// in flight finish and open tunnels carry on after Airlock stops
	// accepting connections; then they are closed. Default 10s. Top level
	// only. Keep it below the orchestrator's grace period (Kubernetes:
	// terminationGracePeriodSeconds, 30s by default).
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// MaxTunnelLifetime closes a CONNECT tunnel this long after it opened,
	// busy or not (audit close_reason "max_lifetime"); 0 = no cap.
	MaxTunnelLifetime time.Duration `yaml:"max_tunnel_lifetime"`
	// MaxConnections caps a sandbox's plain-HTTP requests in flight plus
	// its open CONNECT tunnels; 0 = no cap. Over it: 429, reason
	// quota_exceeded.
	MaxConnections int `yaml:"max_connections"`
	// RequestsPerSecond caps a sandbox's plain-HTTP requests and CONNECTs
	// (token bucket, refilled at this rate); 0 = no cap. Over it: 429,
	// reason quota_exceeded.
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	// Burst is the bucket's size: how many requests may come at once;
	// default: RequestsPerSecond rounded up, at least 1.
	Burst int `yaml:"burst"`
	// MaxHeaderBytes caps a request's header (request line and fields as
	// received); default 64 KiB, at most 1 MiB. The top-level value is the
	// listener's own cap, applied before the sandbox is known: Go's
	// net/http answers 431 itself, and no audit line is written. A sandbox
	// may set a lower cap (not a higher one); over it: 431, reason
	// quota_exceeded, on record. Inside intercepted tunnels both apply.
	MaxHeaderBytes ByteSize `yaml:"max_header_bytes"`
	// MaxRequestBody caps one request body, plain HTTP or intercepted
	// HTTPS (an opaque tunnel's requests are not visible); 0 = no cap.
	// Over it: 413, reason quota_exceeded; a body without Content-Length
	// is cut off when it crosses the cap.
	MaxRequestBody ByteSize `yaml:"max_request_body"`
	// MaxBytesSent and MaxBytesReceived cap the bytes a sandbox moves in
	// each BytesWindow (fixed windows, the first starting with its first
	// byte): request bodies and tunnel bytes sent upstream, response
	// bodies and tunnel bytes received; 0 = no cap. Once a window's cap
	// is reached, new requests and CONNECTs get 429, reason
	// quota_exceeded, with Retry-After set to the window's end, and
	// transfers and tunnels that cross it are cut off (tunnel
	// close_reason quota_exceeded).
	MaxBytesSent     ByteSize `yaml:"max_bytes_sent"`
	MaxBytesReceived ByteSize `yaml:"max_bytes_received"`
	// BytesWindow is the length of a byte-quota window; default 1h.
	BytesWindow time.Duration `yaml:"bytes_window"`
	Pos         position
}

// PolicySpec is one named policy: allow and deny rules. Deny always wins.
type PolicySpec struct {
	Allow []Rule `yaml:"allow"`
	Deny  []Rule `yaml:"deny"`
	Pos   position
}

// Rule matches destinations by host and port, and for plain HTTP requests
// (and, once interception exists, requests inside TLS) by method and path.
type Rule struct {
	Host    HostPattern   `yaml:"host"`    // required
	Ports   []Port        `yaml:"ports"`   // allow: default network.ports; deny: any port
	Methods []Method      `yaml:"methods"` // omitted = any
	Paths   []PathPattern `yaml:"paths"`   // omitted = any
	// DNSTypes opts the rule's names into DNS record types beyond A,
	// AAAA, CNAME, HTTPS and SVCB: TXT, MX or SRV (allow rules only).
	DNSTypes []DNSType `yaml:"dns_types"`
	// Credential names an entry of credentials to inject into requests
	// this allow rule admits (allow rules only). The host must be one the
	// credential is bound to. Requests are intercepted to inject it.
	Credential string `yaml:"credential"`
	Pos        position
}

// CredentialSpec is one credential: where its value comes from, the hosts
// it may be sent to, and where in a request it goes.
type CredentialSpec struct {
	Source SourceSpec `yaml:"source"`
	// Hosts are the only hosts the credential is ever sent to (names, IP
	// literals or *.domain, as in rules); required.
	Hosts []HostPattern `yaml:"hosts"`
	// Inject is the request slot the value is written to; default
	// {header: Authorization, format: "Bearer {token}"}.
	Inject InjectSpec `yaml:"inject"`
	// Placeholder is the stand-in value the sandbox holds (at least 16
	// characters, no spaces). Empty: Airlock derives one per sandbox.
	Placeholder string `yaml:"placeholder"`
	// AllowPlaintext permits injection into plain-HTTP requests; by
	// default a credential is only ever sent inside TLS.
	AllowPlaintext bool `yaml:"allow_plaintext"`
	Pos            position
}

// SourceSpec says where a credential's value comes from: exactly one of
// Env, File or Command (a fixed value), or JWT, OAuth2 or GitHubApp (a
// minter of short-lived tokens).
type SourceSpec struct {
	Env     string   `yaml:"env"`     // an environment variable of the Airlock process
	File    string   `yaml:"file"`    // a file, re-read when it changes (trailing newline dropped)
	Command []string `yaml:"command"` // argv of a command that prints the value, e.g. [gh, auth, token]
	// TTL is how long a command's output is reused; default 5m.
	TTL time.Duration `yaml:"ttl"`
	// Timeout bounds one run of the command; default 10s.
	Timeout time.Duration `yaml:"timeout"`

	JWT       *JWTSpec       `yaml:"jwt"`
	OAuth2    *OAuth2Spec    `yaml:"oauth2"`
	GitHubApp *GitHubAppSpec `yaml:"github_app"`
	Pos       position
}

// ValueSpec is where a key or client secret comes from: one of Env or
// File (PEM files for private keys).
type ValueSpec struct {
	Env  string `yaml:"env"`
	File string `yaml:"file"`
	Pos  position
}

// JWTSpec mints a JSON Web Token (RFC 7519) per sandbox and host: iss =
// Issuer, sub = the sandbox, aud = the host the request goes to, scope,
// iat, exp = now + TTL and a random jti.
type JWTSpec struct {
	Algorithm string        `yaml:"algorithm"` // ES256 (default), RS256, EdDSA or HS256 (RFC 7518 §3.1, RFC 8037)
	Key       ValueSpec     `yaml:"key"`       // PEM private key; for HS256 the shared secret
	Issuer    string        `yaml:"issuer"`    // default "airlock"
	Scope     string        `yaml:"scope"`     // optional "scope" claim (RFC 8693 §4.2)
	TTL       time.Duration `yaml:"ttl"`       // default 5m; at most 1h
	Pos       position
}

// OAuth2Spec fetches access tokens with the client-credentials grant
// (RFC 6749 §4.4) from TokenURL, through Airlock's own guarded dialer.
type OAuth2Spec struct {
	TokenURL     string    `yaml:"token_url"` // https:// (required)
	ClientID     string    `yaml:"client_id"`
	ClientSecret ValueSpec `yaml:"client_secret"`
	Scopes       []string  `yaml:"scopes"`
	Pos          position
}

// GitHubAppSpec mints GitHub App installation tokens: an app JWT (RS256,
// iss = AppID), then POST {APIURL}/app/installations/{InstallationID}/access_tokens
// narrowed to Repositories and Permissions (GitHub REST API, "Create an
// installation access token for an app").
type GitHubAppSpec struct {
	AppID          string            `yaml:"app_id"`          // the app's ID or client ID (the JWT issuer)
	InstallationID int64             `yaml:"installation_id"` // required
	PrivateKey     ValueSpec         `yaml:"private_key"`     // the app's RSA private key (PEM)
	APIURL         string            `yaml:"api_url"`         // default https://api.github.com (GitHub Enterprise: https://HOST/api/v3)
	Repositories   []string          `yaml:"repositories"`    // repository names (without the owner); empty = all the installation has
	Permissions    map[string]string `yaml:"permissions"`     // e.g. {contents: read}; empty = all the installation has
	Pos            position
}

// InjectSpec is where a credential goes in a request: header Header,
// whose value is Format with "{token}" replaced by the credential.
type InjectSpec struct {
	Header string `yaml:"header"`
	Format string `yaml:"format"`
	Pos    position
}

// SandboxSpec names an identity and the policy it uses.
type SandboxSpec struct {
	Name    string   `yaml:"name"`
	Mode    Mode     `yaml:"mode"`    // default: the top-level mode
	Policy  string   `yaml:"policy"`  // default: a policy with the sandbox's name, else "default"
	Clients []Prefix `yaml:"clients"` // source CIDRs that are this sandbox
	Limits  Limits   `yaml:"limits"`
	Pos     position
}

// AuthSpec configures session tokens: JWTs (EdDSA) that name a sandbox,
// presented as proxy credentials.
type AuthSpec struct {
	// Required makes every client present a valid session token (407
	// otherwise). Without it, clients are identified by address.
	Required bool `yaml:"required"`
	// Key is the Ed25519 signing key (PEM, PKCS #8); empty: generated
	// into the state directory. Relative to the configuration file.
	Key string `yaml:"key"`
	// Revoked lists token IDs (jti) that are refused before they expire.
	Revoked []string `yaml:"revoked"`
	Pos     position
}

// Enabled reports whether session tokens are configured (Required or
// Key): only then does Airlock load a signing key and verify tokens.
func (a AuthSpec) Enabled() bool { return a.Required || a.Key != "" }

// AuditSpec says where audit events go.
type AuditSpec struct {
	Output string `yaml:"output"` // "stdout" (default), "stderr" or a file path
}

// HostPattern is a rule's host: a canonical name, an IP literal, or
// "*.name" (any name below name, at any depth, but not name itself).
type HostPattern struct {
	Host     Host
	Wildcard bool
}

// String returns the pattern as a config file writes it ("*.example.com").
func (p HostPattern) String() string {
	if p.Wildcard {
		return "*." + p.Host.String()
	}
	return p.Host.String()
}

// Covers reports whether every host q matches is also matched by p: equal
// patterns, a name or wildcard below p's wildcard domain, or the same IP.
func (p HostPattern) Covers(q HostPattern) bool {
	if p == q {
		return true
	}
	if !p.Wildcard || q.Host.IsIP() || p.Host.IsIP() {
		return false
	}
	// *.example.com covers a.example.com and *.a.example.com, but never
	// across a public suffix (see Policy.Decide).
	name := q.Host.Name()
	return strings.HasSuffix(name, "."+p.Host.Name()) && len(p.Host.Name()) > int(q.Host.suffix)
}

// Matches reports whether h is one of the hosts p matches, with the same
// semantics as a rule: a wildcard matches names below its domain, never
// the domain itself and never across a public suffix.
func (p HostPattern) Matches(h Host) bool {
	if !p.Wildcard {
		return p.Host == h
	}
	if h.IsIP() {
		return false
	}
	return strings.HasSuffix(h.Name(), "."+p.Host.Name()) && len(p.Host.Name()) > int(h.suffix)
}

func (p *HostPattern) decodeNode(d *decoder, n *yaml.Node, path string) {
	if !isScalar(n, "!!str") {
		d.errorf(n, path, "expected a host name, IP address or *.domain, got %s", describe(n))
		return
	}
	h, wild, err := ParseHostPattern(n.Value)
	if err != nil {
		d.errorf(n, path, "%v; write a host name (api.github.com), an IP address or *.domain", err)
		return
	}
	if a := h.Addr(); a.Is4In6() {
		// Requests keep the mapped form as a distinct host; a rule in that
		// form would let it differ from the plain address (say, allowed
		// where the plain address is denied). No rule names it, so it is
		// never allowed.
		d.errorf(n, path, "%q is an IPv4-mapped address; write %s", n.Value, a.Unmap())
		return
	}
	if h.IsLocalhost() || (wild && h.Name() == "localhost") {
		d.errorf(n, path, "%q: localhost names always mean this machine and are always blocked (RFC 6761); remove the rule", n.Value)
		return
	}
	if wild {
		// A wildcard at or above a public suffix (*.com, *.co.uk,
		// *.github.io) would allow names anybody can register.
		if h.PublicSuffix() == h.Name() {
			d.errorf(n, path, "%q is a public suffix wildcard: anyone can register names under %q; list the hosts you need", n.Value, h.Name())
			return
		}
		if parent, ok := multiTenantParent(h.Name()); ok {
			d.errorf(n, path, "%q: names below %s are handed to any cloud customer (buckets, storage accounts, endpoints), "+
				"more than the Public Suffix List records; list the hosts you need", n.Value, parent)
			return
		}
	}
	*p = HostPattern{Host: h, Wildcard: wild}
}

// Port is a TCP port, 1 to 65535.
type Port uint16

func (p *Port) decodeNode(d *decoder, n *yaml.Node, path string) {
	v, err := strconv.ParseUint(n.Value, 10, 16)
	if !isScalar(n, "!!int") || err != nil || v == 0 {
		d.errorf(n, path, "expected a port number from 1 to 65535, got %s", describe(n))
		return
	}
	*p = Port(v)
}

// Prefix is a CIDR ("10.1.2.3/32", "2001:db8::/32"); a bare address means
// its single-address prefix.
type Prefix struct {
	netip.Prefix
	pos position
}

func (p *Prefix) decodeNode(d *decoder, n *yaml.Node, path string) {
	if !isScalar(n, "!!str") {
		d.errorf(n, path, "expected a CIDR such as 10.1.2.3/32, got %s", describe(n))
		return
	}
	var pfx netip.Prefix
	var err error
	if strings.Contains(n.Value, "/") {
		pfx, err = netip.ParsePrefix(n.Value)
	} else {
		var a netip.Addr
		a, err = netip.ParseAddr(n.Value)
		if err == nil {
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil || pfx.Addr().Zone() != "" {
		d.errorf(n, path, "%q is not a CIDR; expected an address and prefix length such as 10.1.2.3/32 or 2001:db8::/32", n.Value)
		return
	}
	if pfx != pfx.Masked() {
		d.errorf(n, path, "%q has host bits set; did you mean %s?", n.Value, pfx.Masked())
		return
	}
	p.Prefix, p.pos = pfx, position{n.Line, n.Column}
}

// Method is an HTTP request method token (RFC 9110 §9.1), case-sensitive.
type Method string

func (m *Method) decodeNode(d *decoder, n *yaml.Node, path string) {
	if !isScalar(n, "!!str") || n.Value == "" || !isToken(n.Value) {
		d.errorf(n, path, "expected an HTTP method such as GET, got %s", describe(n))
		return
	}
	if strings.ToUpper(n.Value) != n.Value {
		d.errorf(n, path, "HTTP methods are case-sensitive (RFC 9110 §9.1); write %q", strings.ToUpper(n.Value))
		return
	}
	*m = Method(n.Value)
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// PathPattern matches a request path segment by segment: "*" is exactly one
// segment, "**" any number of segments (zero or more), anything else a
// literal segment compared after percent-decoding. As in request paths, one
// trailing slash does not matter ("/a/" is "/a") and "/" is the root.
type PathPattern struct {
	raw  string
	segs []string
}

// String returns the pattern as written in the file.
func (p PathPattern) String() string { return p.raw }

func (p *PathPattern) decodeNode(d *decoder, n *yaml.Node, path string) {
	if !isScalar(n, "!!str") || !strings.HasPrefix(n.Value, "/") {
		d.errorf(n, path, "expected a path starting with /, such as /repos/acme/**, got %s", describe(n))
		return
	}
	segs := strings.Split(n.Value[1:], "/")
	if segs[len(segs)-1] == "" {
		// A request path loses its trailing slash before matching; a
		// pattern's empty last segment would match nothing and quietly
		// turn a deny rule off.
		segs = segs[:len(segs)-1]
	}
	for _, s := range segs {
		switch {
		case s == "":
			d.errorf(n, path, "%q: write the path without empty segments (//)", n.Value)
			return
		case s == "*" || s == "**":
		case strings.Contains(s, "*"):
			d.errorf(n, path, "%q: * and ** must be whole segments (/a/*/b, /a/**)", n.Value)
			return
		case strings.ContainsAny(s, "?#"):
			d.errorf(n, path, "%q: a path pattern matches the path only, never the query or fragment; remove the part from ? or #", n.Value)
			return
		case s == "." || s == ".." || strings.Contains(s, "%"):
			d.errorf(n, path, "%q: write the path without dot-segments or percent-encoding", n.Value)
			return
		}
	}
	*p = PathPattern{raw: n.Value, segs: segs}
}

// Resolver is a DNS server the proxy uses for its own lookups.
type Resolver struct{ netip.AddrPort }

func (r *Resolver) decodeNode(d *decoder, n *yaml.Node, path string) {
	if isScalar(n, "!!str") {
		if ap, err := netip.ParseAddrPort(n.Value); err == nil && ap.Port() != 0 && ap.Addr().Zone() == "" {
			r.AddrPort = ap
			return
		}
		if a, err := netip.ParseAddr(n.Value); err == nil && a.Zone() == "" {
			r.AddrPort = netip.AddrPortFrom(a, 53)
			return
		}
	}
	d.errorf(n, path, "expected a resolver address such as 10.0.0.2 or 10.0.0.2:53 (an IP, not a name), got %s", describe(n))
}

// StaticHosts maps canonical names to fixed addresses, like /etc/hosts.
// YAML values are one address or a list of them.
type StaticHosts map[string][]netip.Addr

func (s *StaticHosts) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping of host name to IP address, got %s", describe(n))
		return
	}
	m := make(StaticHosts, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := join(path, k.Value)
		h, err := ParseHost(k.Value)
		if err != nil || h.IsIP() {
			d.errorf(k, kp, "expected a host name as key, got %s", describe(k))
			continue
		}
		if _, dup := m[h.Name()]; dup {
			d.errorf(k, kp, "host is given twice; keep one")
			continue
		}
		vals := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			vals = v.Content
		}
		if len(vals) == 0 {
			d.errorf(v, kp, "expected at least one IP address")
			continue
		}
		for _, vn := range vals {
			a, err := netip.ParseAddr(vn.Value)
			if !isScalar(vn, "!!str") || err != nil || a.Zone() != "" {
				d.errorf(vn, kp, "expected an IP address such as 192.0.2.10, got %s", describe(vn))
				continue
			}
			m[h.Name()] = append(m[h.Name()], a)
		}
	}
	*s = m
}

// ListenAddr is a listener address "IP:port" or ":port" (all interfaces);
// "" means not set.
type ListenAddr string

func (l *ListenAddr) decodeNode(d *decoder, n *yaml.Node, path string) {
	if isScalar(n, "!!str") && n.Value == "" {
		return // `dns: ""` as in DESIGN.md: the default (off, or 127.0.0.1:3128 for proxy)
	}
	if err := checkListenAddr(n.Value); !isScalar(n, "!!str") || err != nil {
		d.errorf(n, path, "expected a listen address such as 127.0.0.1:3128 or 0.0.0.0:3128, got %s", describe(n))
		return
	}
	*l = ListenAddr(n.Value)
}

// checkListenAddr accepts "IP:port", "[IPv6]:port" and ":port".
func checkListenAddr(s string) error {
	if rest, ok := strings.CutPrefix(s, ":"); ok {
		_, err := strconv.ParseUint(rest, 10, 16)
		return err
	}
	ap, err := netip.ParseAddrPort(s)
	if err == nil && ap.Addr().Zone() != "" {
		err = fmt.Errorf("zoned address")
	}
	return err
}

// String returns the port in decimal.
func (p Port) String() string { return strconv.Itoa(int(p)) }

// multiTenantDomains are cloud domains under which any customer can get a
// name (a bucket, a storage account, a function, an edge endpoint), in
// more places than the Public Suffix List records: a wildcard at or below
// one would reach other tenants, so it is refused and the hosts must be
// listed.
var multiTenantDomains = []string{
	"amazonaws.com", "amazonaws.com.cn", "cloudfront.net", "on.aws",
	"windows.net", "azureedge.net", "azurefd.net", "azurewebsites.net", "cloudapp.net",
	"googleapis.com", "googleusercontent.com", "appspot.com", "cloudfunctions.net", "run.app",
	"akamaized.net", "akamaihd.net", "edgekey.net", "fastly.net", "fastlylb.net",
	"cloudflarestorage.com", "r2.dev", "workers.dev", "pages.dev",
	"digitaloceanspaces.com", "backblazeb2.com", "wasabisys.com", "herokuapp.com",
	"vercel.app", "netlify.app", "fly.dev", "onrender.com", "ngrok.io", "ngrok-free.app",
	"firebaseio.com", "nip.io", "sslip.io", // nip.io, sslip.io: a name for every IP address
}

// multiTenantParent returns the multi-tenant domain name is at or below.
func multiTenantParent(name string) (string, bool) {
	for _, d := range multiTenantDomains {
		if name == d || strings.HasSuffix(name, "."+d) {
			return d, true
		}
	}
	return "", false
}

// DNSSpec configures the DNS listener (listen.dns).
type DNSSpec struct {
	// Mode is "forward" (default: allowed names are resolved upstream) or
	// "synthetic" (allowed names are answered with Answer; nothing leaves).
	Mode string `yaml:"mode"`
	// Answer holds the addresses synthetic mode answers with: where the
	// sandbox reaches Airlock. Required in synthetic mode.
	Answer []Prefix `yaml:"answer"`
	// Exfil holds the exfiltration detector's thresholds; zero fields
	// take the detector's documented defaults.
	Exfil ExfilSpec `yaml:"exfil"`
	Pos   position
}

// ExfilSpec holds the DNS exfiltration detector's thresholds (see
// dnsfilter.ExfilConfig for the defaults and the reasoning behind them).
type ExfilSpec struct {
	MaxNameLen    int           `yaml:"max_name_len"`
	MaxLabelLen   int           `yaml:"max_label_len"`
	EntropyMinLen int           `yaml:"entropy_min_len"`
	EntropyBits   float64       `yaml:"entropy_bits"`
	Window        time.Duration `yaml:"window"`
	MaxNewNames   int           `yaml:"max_new_names"`
	MaxNewBytes   int           `yaml:"max_new_bytes"`
	QPS           float64       `yaml:"qps"`
	Burst         int           `yaml:"burst"`
}

// DNSType is a DNS record type a rule opts into: TXT, MX or SRV.
type DNSType string

func (t *DNSType) decodeNode(d *decoder, n *yaml.Node, path string) {
	switch v := strings.ToUpper(n.Value); {
	case isScalar(n, "!!str") && (v == "TXT" || v == "MX" || v == "SRV"):
		*t = DNSType(v)
	default:
		d.errorf(n, path, "expected TXT, MX or SRV (A, AAAA, CNAME, HTTPS and SVCB are always answered), got %s", describe(n))
	}
}

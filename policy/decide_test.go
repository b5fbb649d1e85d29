package policy

import (
	"fmt"
	"strings"
	"testing"
)

// mustHost canonicalises s with ParseHost or fails the test.
func mustHost(tb testing.TB, s string) Host {
	tb.Helper()
	h, err := ParseHost(s)
	if err != nil {
		tb.Fatalf("ParseHost(%q): %v", s, err)
	}
	return h
}

// mustAuthority splits and canonicalises "host:port" or fails the test.
func mustAuthority(tb testing.TB, s string) (Host, uint16) {
	tb.Helper()
	h, port, err := ParseAuthority(s, 0)
	if err != nil {
		tb.Fatalf("ParseAuthority(%q): %v", s, err)
	}
	return h, port
}

// defaultPolicy parses src and returns the policy of the default sandbox.
func defaultPolicy(tb testing.TB, src string) *Policy {
	tb.Helper()
	sb, _ := mustParse(tb, src).Sandbox(DefaultSandbox)
	if sb.Policy == nil {
		tb.Fatalf("the default sandbox has no policy")
	}
	return sb.Policy
}

func allowedBy(rule string) Decision { return Decision{Allow: true, Reason: Allowed, Rule: rule} }
func inspectedBy(rule string) Decision {
	return Decision{Allow: true, Reason: Allowed, Rule: rule, Inspect: true}
}
func deniedBy(rule string) Decision      { return Decision{Reason: DeniedByRule, Rule: rule} }
func denied(reason Reason) Decision      { return Decision{Reason: reason} }
func allowRule(i int) string             { return fmt.Sprintf("policies.default.allow[%d]", i) }
func denyRule(i int) string              { return fmt.Sprintf("policies.default.deny[%d]", i) }
func hostPort(h string, p uint16) string { return fmt.Sprintf("%s:%d", h, p) }

type decideCase struct {
	host string // as a client writes it; canonicalised by ParseHost
	port uint16
	want Decision
}

func checkDecide(t *testing.T, p *Policy, tests []decideCase) {
	t.Helper()
	for _, tt := range tests {
		if got := p.Decide(mustHost(t, tt.host), tt.port); got != tt.want {
			t.Errorf("Decide(%s) = %+v, want %+v", hostPort(tt.host, tt.port), got, tt.want)
		}
	}
}

func TestDecideMatchesHosts(t *testing.T) {
	p := defaultPolicy(t, lines(
		"network:",
		"  hosts: {mirror.test: 10.1.2.3}",
		"policies:",
		"  default:",
		"    allow:",
		"      - host: api.github.com",             // allow[0]
		`      - host: "*.pythonhosted.org"`,       // allow[1]
		`      - host: "*.files.pythonhosted.org"`, // allow[2]
		"      - host: files.pythonhosted.org",     // allow[3]
		"      - host: 10.1.2.3",                   // allow[4]
		`      - host: "2001:db8::7"`,              // allow[5]
	))
	checkDecide(t, p, []decideCase{
		// Exact names: case-insensitive, one trailing dot ignored, nothing
		// above or below the name.
		{"api.github.com", 443, allowedBy(allowRule(0))},
		{"API.GitHub.COM", 443, allowedBy(allowRule(0))},
		{"api.github.com.", 443, allowedBy(allowRule(0))},
		{"github.com", 443, denied(HostNotAllowed)},
		{"x.api.github.com", 443, denied(HostNotAllowed)},
		{"api.github.com.evil.test", 443, denied(HostNotAllowed)},
		{"api-github.com", 443, denied(HostNotAllowed)},

		// Wildcards: any depth below, not the apex, on label boundaries; the
		// most specific rule is reported, exact before wildcard.
		{"a.pythonhosted.org", 443, allowedBy(allowRule(1))},
		{"a.b.c.pythonhosted.org", 443, allowedBy(allowRule(1))},
		{"A.PythonHosted.org.", 443, allowedBy(allowRule(1))},
		{"files.pythonhosted.org", 443, allowedBy(allowRule(3))},
		{"x.files.pythonhosted.org", 443, allowedBy(allowRule(2))},
		{"pythonhosted.org", 443, denied(HostNotAllowed)},
		{"evilpythonhosted.org", 443, denied(HostNotAllowed)},
		{"pythonhosted.org.evil.test", 443, denied(HostNotAllowed)},

		// An IP literal rule matches that address in any spelling ParseHost
		// canonicalises to it, and nothing else: not a name that resolves to
		// it (mirror.test), and not the IPv4-mapped IPv6 form, which
		// ParseHost keeps as a distinct host and no rule may name, so it is
		// never allowed (fail closed).
		{"10.1.2.3", 443, allowedBy(allowRule(4))},
		{"167838211", 443, allowedBy(allowRule(4))},
		{"0x0a.1.2.3", 443, allowedBy(allowRule(4))},
		{"10.1.2.4", 443, denied(HostNotAllowed)},
		{"mirror.test", 443, denied(HostNotAllowed)},
		{"[::ffff:10.1.2.3]", 443, denied(HostNotAllowed)},
		{"[2001:db8::7]", 443, allowedBy(allowRule(5))},
		{"[2001:DB8:0::7]", 443, allowedBy(allowRule(5))},

		// localhost is blocked before any rule is looked at.
		{"localhost", 443, denied(AddressBlocked)},
		{"LOCALHOST.", 443, denied(AddressBlocked)},
		{"a.localhost", 443, denied(AddressBlocked)},
	})
	if got := p.Decide(Host{}, 443); got != denied(HostNotAllowed) {
		t.Errorf("Decide(zero Host) = %+v, want host_not_allowed", got)
	}
}

func TestDecideIPv4MappedLiteralThroughConfig(t *testing.T) {
	// The mapped form of an allowed address is not allowed by the rule; the
	// address check, which unwraps it, blocks it anyway unless allow_cidrs
	// covers it, and then the policy still says no.
	for _, tt := range []struct {
		src  string
		want Decision
	}{
		{lines("policies: {default: {allow: [{host: 10.1.2.3}]}}"), Decision{Reason: AddressBlocked}},
		{lines("network: {allow_cidrs: [10.1.2.3/32]}", "policies: {default: {allow: [{host: 10.1.2.3}]}}"), denied(HostNotAllowed)},
	} {
		c := mustParse(t, tt.src)
		sb, _ := c.Sandbox(DefaultSandbox)
		if got := c.Decide(sb, mustHost(t, "[::ffff:10.1.2.3]"), 443); got != tt.want {
			t.Errorf("%s: Decide([::ffff:10.1.2.3]:443) = %+v, want %+v", strings.TrimSpace(tt.src), got, tt.want)
		}
	}
}

func TestDecideDenyWinsOverAllow(t *testing.T) {
	p := defaultPolicy(t, lines(
		"policies:",
		"  default:",
		"    allow:",
		`      - host: "*.example.com"`,     // allow[0]
		"      - host: blocked.example.org", // allow[1]
		"      - host: ssh.example.net",     // allow[2]
		"        ports: [22, 443]",
		`      - host: "*.example.net"`, // allow[3]
		"    deny:",
		"      - host: secret.example.com", // deny[0]
		`      - host: "*.example.org"`,    // deny[1]
		"      - host: ssh.example.net",    // deny[2]
		"        ports: [22]",
		`      - host: "*.ssh.example.net"`, // deny[3]
		`      - host: "*.example.net"`,     // deny[4]
		"        ports: [25]",
	))
	checkDecide(t, p, []decideCase{
		{"www.example.com", 443, allowedBy(allowRule(0))},
		// An exact deny beats a wildcard allow, on every port when it names none.
		{"secret.example.com", 443, deniedBy(denyRule(0))},
		{"secret.example.com", 8080, deniedBy(denyRule(0))},
		// An exact deny covers only that name.
		{"a.secret.example.com", 443, allowedBy(allowRule(0))},
		// A wildcard deny beats an exact allow.
		{"blocked.example.org", 443, deniedBy(denyRule(1))},
		{"example.org", 443, denied(HostNotAllowed)},
		// A deny rule with ports denies only those ports.
		{"ssh.example.net", 22, deniedBy(denyRule(2))},
		{"ssh.example.net", 443, allowedBy(allowRule(2))},
		{"ssh.example.net", 80, allowedBy(allowRule(3))},
		{"ssh.example.net", 25, deniedBy(denyRule(4))},
		{"ssh.example.net", 8080, denied(PortNotAllowed)},
		// The most specific deny is reported.
		{"a.ssh.example.net", 25, deniedBy(denyRule(3))},
		{"mail.example.net", 25, deniedBy(denyRule(4))},
	})
}

func TestDecidePortReasons(t *testing.T) {
	p := defaultPolicy(t, lines(
		"policies:",
		"  default:",
		"    allow:",
		"      - host: api.github.com", // allow[0]
		"        ports: [443]",
		`      - host: "*.github.com"`, // allow[1]
		"        ports: [8443]",
		"      - host: deb.debian.org", // allow[2]: network.ports, 80 and 443
	))
	checkDecide(t, p, []decideCase{
		{"api.github.com", 443, allowedBy(allowRule(0))},
		{"api.github.com", 8443, allowedBy(allowRule(1))},
		{"api.github.com", 80, denied(PortNotAllowed)},
		{"api.github.com", 22, denied(PortNotAllowed)},
		{"api.github.com", 0, denied(PortNotAllowed)},
		{"deb.debian.org", 80, allowedBy(allowRule(2))},
		{"deb.debian.org", 443, allowedBy(allowRule(2))},
		{"deb.debian.org", 21, denied(PortNotAllowed)},
		{"security.debian.org", 80, denied(HostNotAllowed)},
	})
}

func TestDecideNilPolicyDeniesEverything(t *testing.T) {
	var p *Policy
	want := Decision{Reason: NoPolicy}
	for _, h := range []string{"api.github.com", "10.1.2.3", "localhost"} {
		if got := p.Decide(mustHost(t, h), 443); got != want {
			t.Errorf("nil Policy: Decide(%s:443) = %+v, want %+v", h, got, want)
		}
		if got := p.DecideRequest(mustHost(t, h), 443, "GET", "/a/../b"); got != want {
			t.Errorf("nil Policy: DecideRequest(%s:443) = %+v, want %+v", h, got, want)
		}
	}
}

// requestPolicy has method and path rules on two hosts and none on a third.
var requestPolicy = lines(
	"policies:",
	"  default:",
	"    allow:",
	"      - host: api.github.com", // allow[0]
	"        ports: [443]",
	"        methods: [GET, POST]",
	`        paths: ["/repos/acme/**"]`,
	"      - host: api.github.com", // allow[1]
	"        ports: [443]",
	"        methods: [GET]",
	`        paths: ["/users/*", "/rate_limit/", "/"]`,
	"      - host: github.com", // allow[2]
	"        ports: [443]",
	"      - host: plain.test",   // allow[3]
	"      - host: uploads.test", // allow[4]
	"        ports: [443]",
	"      - host: uploads.test", // allow[5]
	"        ports: [8443]",
	`        paths: ["/upload/**/*"]`,
	"    deny:",
	"      - host: github.com", // deny[0]
	`        paths: ["/**/git-receive-pack", "/acme/private/"]`,
	"      - host: api.github.com", // deny[1]
	"        methods: [DELETE]",
	"      - host: api.github.com", // deny[2]
	`        paths: ["/repos/acme/secrets", "/repos/acme/secrets/**"]`,
)

func TestDecideInspectsHostsWithMethodOrPathRules(t *testing.T) {
	p := defaultPolicy(t, requestPolicy)
	checkDecide(t, p, []decideCase{
		// Allow rules with methods or paths need the request to judge.
		{"api.github.com", 443, inspectedBy(allowRule(0))},
		// So does a deny rule with paths: the host is allowed at host level.
		{"github.com", 443, inspectedBy(allowRule(2))},
		// Host and port rules alone need no inspection.
		{"plain.test", 443, allowedBy(allowRule(3))},
		// Only rules that apply to the port count.
		{"uploads.test", 443, allowedBy(allowRule(4))},
		{"uploads.test", 8443, inspectedBy(allowRule(5))},
		// A denied host is denied whatever deny rules with paths say.
		{"github.com", 80, denied(PortNotAllowed)},
		{"gist.github.com", 443, denied(HostNotAllowed)},
	})
}

func TestDecideRequestMethodsAndPaths(t *testing.T) {
	p := defaultPolicy(t, requestPolicy)
	tests := []struct {
		host   string
		port   uint16
		method string
		path   string
		want   Decision
	}{
		// "**" is any number of segments, including zero; a trailing slash
		// does not matter.
		{"api.github.com", 443, "GET", "/repos/acme/widget", allowedBy(allowRule(0))},
		{"api.github.com", 443, "POST", "/repos/acme/widget/issues/1/comments", allowedBy(allowRule(0))},
		{"api.github.com", 443, "GET", "/repos/acme", allowedBy(allowRule(0))},
		{"api.github.com", 443, "GET", "/repos/acme/", allowedBy(allowRule(0))},
		{"api.github.com", 443, "GET", "/repos/acme/widget/", allowedBy(allowRule(0))},
		{"api.github.com", 443, "GET", "/repos/other/widget", denied(PathNotAllowed)},
		{"api.github.com", 443, "GET", "/repos/acmecorp/widget", denied(PathNotAllowed)},
		{"api.github.com", 443, "GET", "/repos", denied(PathNotAllowed)},
		// Segments are compared after percent-decoding.
		{"api.github.com", 443, "GET", "/repos/%61cme/widget", allowedBy(allowRule(0))},
		{"api.github.com", 443, "GET", "/repos/acme/a%20b", allowedBy(allowRule(0))},
		// Methods are case-sensitive; an empty method is GET.
		{"api.github.com", 443, "PUT", "/repos/acme/widget", denied(MethodNotAllowed)},
		{"api.github.com", 443, "get", "/repos/acme/widget", denied(MethodNotAllowed)},
		{"api.github.com", 443, "", "/repos/acme/widget", allowedBy(allowRule(0))},
		// A rule with methods and paths must match both; the reason says what
		// failed last: the method matched some rule, the path none.
		{"api.github.com", 443, "POST", "/users/octocat", denied(PathNotAllowed)},
		// "*" is exactly one segment.
		{"api.github.com", 443, "GET", "/users/octocat", allowedBy(allowRule(1))},
		{"api.github.com", 443, "GET", "/users/octocat/", allowedBy(allowRule(1))},
		{"api.github.com", 443, "GET", "/users/octocat/repos", denied(PathNotAllowed)},
		{"api.github.com", 443, "GET", "/users", denied(PathNotAllowed)},
		{"api.github.com", 443, "GET", "/users/", denied(PathNotAllowed)},
		// A pattern's trailing slash does not matter either, and "/" is the root.
		{"api.github.com", 443, "GET", "/rate_limit", allowedBy(allowRule(1))},
		{"api.github.com", 443, "GET", "/rate_limit/", allowedBy(allowRule(1))},
		{"api.github.com", 443, "GET", "/", allowedBy(allowRule(1))},
		{"api.github.com", 443, "GET", "", allowedBy(allowRule(1))},
		{"api.github.com", 443, "POST", "/", denied(PathNotAllowed)},
		// Deny rules with methods or paths win over the allow rules.
		{"api.github.com", 443, "DELETE", "/repos/acme/widget", deniedBy(denyRule(1))},
		{"api.github.com", 443, "GET", "/repos/acme/secrets", deniedBy(denyRule(2))},
		{"api.github.com", 443, "GET", "/repos/acme/secrets/", deniedBy(denyRule(2))},
		{"api.github.com", 443, "GET", "/repos/acme/secrets/prod", deniedBy(denyRule(2))},
		{"api.github.com", 443, "GET", "/repos/acme/%73ecrets", deniedBy(denyRule(2))},
		{"api.github.com", 443, "GET", "/repos/acme/secretsx", allowedBy(allowRule(0))},
		// git push is denied, git fetch is not.
		{"github.com", 443, "POST", "/acme/repo.git/git-receive-pack", deniedBy(denyRule(0))},
		{"github.com", 443, "GET", "/acme/repo.git/info/refs", allowedBy(allowRule(2))},
		{"github.com", 443, "POST", "/acme/repo.git/git-upload-pack", allowedBy(allowRule(2))},
		{"github.com", 443, "POST", "/git-receive-pack", deniedBy(denyRule(0))},
		{"github.com", 443, "POST", "/acme/repo.git/git-receive-pack/", deniedBy(denyRule(0))},
		{"github.com", 443, "POST", "/acme/repo.git/git-receive-pac%6B", deniedBy(denyRule(0))},
		{"github.com", 443, "POST", "/acme/repo.git/git-receive-pack.x", allowedBy(allowRule(2))},
		// A deny pattern's trailing slash does not matter: it denies both.
		{"github.com", 443, "GET", "/acme/private", deniedBy(denyRule(0))},
		{"github.com", 443, "GET", "/acme/private/", deniedBy(denyRule(0))},
		{"github.com", 443, "GET", "/acme/private/x", allowedBy(allowRule(2))},
		// "/upload/**/*" needs at least one segment after /upload.
		{"uploads.test", 8443, "PUT", "/upload/a", allowedBy(allowRule(5))},
		{"uploads.test", 8443, "PUT", "/upload/a/b/c", allowedBy(allowRule(5))},
		{"uploads.test", 8443, "PUT", "/upload", denied(PathNotAllowed)},
		{"uploads.test", 8443, "PUT", "/upload/", denied(PathNotAllowed)},
		// Without method or path rules the request is not looked at.
		{"plain.test", 443, "BREW", "/anything/at/all", allowedBy(allowRule(3))},
		{"uploads.test", 443, "PUT", "/elsewhere", allowedBy(allowRule(4))},
		// The host-level decision stands when it denies.
		{"gist.github.com", 443, "GET", "/", denied(HostNotAllowed)},
		{"api.github.com", 80, "GET", "/repos/acme/widget", denied(PortNotAllowed)},
	}
	for _, tt := range tests {
		got := p.DecideRequest(mustHost(t, tt.host), tt.port, tt.method, tt.path)
		if got != tt.want {
			t.Errorf("DecideRequest(%s, %q, %q) = %+v, want %+v", hostPort(tt.host, tt.port), tt.method, tt.path, got, tt.want)
		}
	}
}

func TestDecideRequestRefusesNonCanonicalPathsOnlyUnderRequestRules(t *testing.T) {
	p := defaultPolicy(t, requestPolicy)
	paths := []string{
		"/a/../b",
		"/a/./b",
		"/a/..",
		"/..",
		"/.",
		"//a",
		"/a//b",
		"/a/b//",
		"/a%2Fb",
		"/a%2fb",
		"/a%5Cb",
		"/a%5cb",
		"/a%zz",
		"/a%2",
		"/a%",
		"/a%00",
		"/a/%2e%2e/b",
		"/a/%2E/b",
		"/a/.%2e/b",
		"a/b",
		"*",
	}
	for _, path := range paths {
		// github.com has a deny rule with paths: the path must be understood.
		if got := p.DecideRequest(mustHost(t, "github.com"), 443, "GET", path); got != denied(PathNotCanonical) {
			t.Errorf("github.com: DecideRequest(GET %q) = %+v, want path_not_canonical", path, got)
		}
		// plain.test has no method or path rules: the path is not looked at.
		if got := p.DecideRequest(mustHost(t, "plain.test"), 443, "GET", path); got != allowedBy(allowRule(3)) {
			t.Errorf("plain.test: DecideRequest(GET %q) = %+v, want allowed", path, got)
		}
	}
}

// largePolicy returns a policy with n allow rules, alternately an exact name
// host-I.exampleI.com and a wildcard *.zone-I.example.net.
func largePolicy(tb testing.TB, n int) *Policy {
	tb.Helper()
	var b strings.Builder
	b.WriteString("policies:\n  default:\n    allow:\n")
	for i := range n {
		if i%2 == 0 {
			fmt.Fprintf(&b, "      - host: host-%d.example%d.com\n", i, i)
		} else {
			fmt.Fprintf(&b, "      - host: \"*.zone-%d.example.net\"\n", i)
		}
	}
	return defaultPolicy(tb, b.String())
}

// largePolicyQueries are a hit on an exact rule, a hit on a wildcard rule
// three labels below it, and a miss, for a policy from largePolicy(n).
func largePolicyQueries(tb testing.TB, n int) (exact, wild, miss Host) {
	last := n - 1 - (n-1)%2 // the last exact rule
	return mustHost(tb, fmt.Sprintf("host-%d.example%d.com", last, last)),
		mustHost(tb, fmt.Sprintf("a.b.c.zone-%d.example.net", n-1)),
		mustHost(tb, "nowhere.example.org")
}

func TestLargePolicyDecides(t *testing.T) {
	const n = 10000
	p := largePolicy(t, n)
	exact, wild, miss := largePolicyQueries(t, n)
	if got := p.Decide(exact, 443); got != allowedBy(allowRule(n-2)) {
		t.Errorf("Decide(%s) = %+v", exact, got)
	}
	if got := p.Decide(wild, 443); got != allowedBy(allowRule(n-1)) {
		t.Errorf("Decide(%s) = %+v", wild, got)
	}
	if got := p.Decide(miss, 443); got != denied(HostNotAllowed) {
		t.Errorf("Decide(%s) = %+v", miss, got)
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	p := largePolicy(t, 10000)
	exact, wild, miss := largePolicyQueries(t, 10000)
	v6 := mustHost(t, "[2001:db8::1]")
	allocs := testing.AllocsPerRun(100, func() {
		p.Decide(exact, 443)
		p.Decide(wild, 443)
		p.Decide(miss, 443)
		p.Decide(exact, 22)
		p.Decide(v6, 443)
	})
	if allocs != 0 {
		t.Errorf("Decide allocates %v times per run, want 0", allocs)
	}
}

func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{10, 10000} {
		p := largePolicy(b, n)
		exact, wild, miss := largePolicyQueries(b, n)
		for _, q := range []struct {
			name string
			h    Host
		}{{"hit", exact}, {"wildcard-depth-3", wild}, {"miss", miss}} {
			b.Run(fmt.Sprintf("rules=%d/%s", n, q.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p.Decide(q.h, 443)
				}
			})
		}
	}
}

func FuzzDecideRequest(f *testing.F) {
	p := defaultPolicy(f, requestPolicy)
	for _, s := range []struct {
		host         string
		port         uint16
		method, path string
	}{
		{"api.github.com", 443, "GET", "/repos/acme/widget"},
		{"api.github.com", 443, "DELETE", "/repos/acme/widget"},
		{"github.com", 443, "POST", "/acme/repo.git/git-receive-pack"},
		{"github.com", 443, "GET", "/a/%2e%2e/git-receive-pack"},
		{"GitHub.com.", 443, "POST", "/%2F/git-receive-pack"},
		{"uploads.test", 8443, "PUT", "/upload//a"},
		{"plain.test", 80, "", ""},
		{"[::ffff:10.1.2.3]", 443, "GET", "/"},
		{"localhost", 443, "GET", "/"},
	} {
		f.Add(s.host, s.port, s.method, s.path)
	}
	f.Fuzz(func(t *testing.T, host string, port uint16, method, path string) {
		h, err := ParseHost(host)
		if err != nil {
			return
		}
		hostLevel := p.Decide(h, port)
		got := p.DecideRequest(h, port, method, path)
		if got.Allow && !hostLevel.Allow {
			t.Fatalf("DecideRequest allows %+v where Decide denies %+v", got, hostLevel)
		}
		if !hostLevel.Allow && got != hostLevel {
			t.Fatalf("DecideRequest = %+v, want the host-level denial %+v", got, hostLevel)
		}
		if got.Allow != (got.Reason == Allowed) || got.Allow && got.Rule == "" {
			t.Fatalf("inconsistent decision %+v", got)
		}
		if got.Inspect {
			t.Fatalf("request-level decision %+v asks for inspection", got)
		}
		// git push to github.com is never allowed, however the path is spelled.
		if got.Allow && h.Name() == "github.com" {
			if segs, ok := splitPath(path); !ok || len(segs) > 0 && segs[len(segs)-1] == "git-receive-pack" {
				t.Fatalf("DecideRequest(github.com, %q) = %+v", path, got)
			}
		}
	})
}

// A wildcard never reaches across a public suffix: below amazonaws.com,
// s3.amazonaws.com is a public suffix (anyone's bucket lives under it).
func TestDecideWildcardNeverCrossesAPublicSuffix(t *testing.T) {
	// Configuration refuses *.amazonaws.com outright (a multi-tenant cloud
	// domain); Decide must hold even for a policy built without that check.
	rule := func(s string) Rule {
		h, w, err := ParseHostPattern(s)
		if err != nil {
			t.Fatal(err)
		}
		return Rule{Host: HostPattern{Host: h, Wildcard: w}, Ports: []Port{443}}
	}
	p := compilePolicy("default", &PolicySpec{Allow: []Rule{
		rule("*.amazonaws.com"), rule("*.example.co.uk"), rule("my-bucket.s3.amazonaws.com"),
	}}, DefaultPorts)
	checkDecide(t, p, []decideCase{
		{"ec2.amazonaws.com", 443, allowedBy(allowRule(0))},
		{"attacker-bucket.s3.amazonaws.com", 443, denied(HostNotAllowed)},
		{"my-bucket.s3.amazonaws.com", 443, allowedBy(allowRule(2))}, // an exact rule is explicit
		{"www.example.co.uk", 443, allowedBy(allowRule(1))},
		{"a.b.example.co.uk", 443, allowedBy(allowRule(1))},
	})
}

// Path matching takes time linear in the pattern times the path, whatever
// the number of "**": a long crafted path cannot pin a CPU.
func TestDecideRequestPathMatchingIsNotExponential(t *testing.T) {
	p := defaultPolicy(t, `
policies:
  default:
    allow:
      - host: gh.test
    deny:
      - host: gh.test
        paths: ["/**/a/**/b/**/c/**/git-receive-pack"]
`)
	h := mustHost(t, "gh.test")
	path := strings.Repeat("/a/b", 8000) + "/x"
	if got := p.DecideRequest(h, 80, "GET", path); got != allowedBy(allowRule(0)) {
		t.Fatalf("got %+v", got)
	}
	path = strings.Repeat("/a/b", 8000) + "/c/git-receive-pack"
	if got := p.DecideRequest(h, 80, "POST", path); got != deniedBy(denyRule(0)) {
		t.Fatalf("got %+v", got)
	}
}

func TestMatchSegments(t *testing.T) {
	cases := []struct {
		pat, path string
		want      bool
	}{
		{"/**", "/", true},
		{"/**", "/a/b", true},
		{"/a/**", "/a", true},
		{"/a/**", "/a/b/c", true},
		{"/a/**", "/b", false},
		{"/a/*", "/a", false},
		{"/a/*", "/a/b", true},
		{"/a/*", "/a/b/c", false},
		{"/**/git-receive-pack", "/git-receive-pack", true},
		{"/**/git-receive-pack", "/acme/r.git/git-receive-pack", true},
		{"/**/git-receive-pack", "/acme/r.git/git-receive-pack/x", false},
		{"/*/**/z", "/a/z", true},
		{"/*/**/z", "/z", false},
		{"/**/b/**/d", "/a/b/c/d", true},
		{"/**/b/**/d", "/a/b/c/e", false},
		{"/**/*/x", "/x", false},
		{"/**/*/x", "/y/x", true},
	}
	for _, tc := range cases {
		pat, _ := splitPath(tc.pat)
		segs, ok := splitPath(tc.path)
		if !ok {
			t.Fatalf("splitPath(%q) refused", tc.path)
		}
		if got := matchSegments(pat, segs, false); got != tc.want {
			t.Errorf("match(%q, %q) = %v, want %v", tc.pat, tc.path, got, tc.want)
		}
	}
}

func TestDecideRequestRefusesWhatServersReadDifferently(t *testing.T) {
	p := defaultPolicy(t, `
policies:
  default:
    allow:
      - host: l7.test
        paths: ["/public/**"]
    deny:
      - host: l7.test
        methods: [DELETE]
`)
	h := mustHost(t, "l7.test")
	cases := []struct {
		method, path string
		want         Decision
	}{
		{"GET", "/public/..;/admin", denied(PathNotCanonical)},
		{"GET", "/public/.;/admin", denied(PathNotCanonical)},
		{"GET", "/public/%2e%2e%3b/admin", denied(PathNotCanonical)},
		{"GET", "/public/..%09/admin", denied(PathNotCanonical)},
		{"GET", "/public/;x/admin", denied(PathNotCanonical)},
		{"GET", "/public/a%5Cb", denied(PathNotCanonical)},
		{"GET", "/public/a;v=1", allowedBy(allowRule(0))},
		{"delete", "/public/x", denied(MethodNotAllowed)},
		{"Delete", "/public/x", denied(MethodNotAllowed)},
		{"DELETE", "/public/x", deniedBy(denyRule(0))},
		{"GET", "/public/x", allowedBy(allowRule(0))},
	}
	for _, tc := range cases {
		if got := p.DecideRequest(h, 80, tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s: got %+v, want %+v", tc.method, tc.path, got, tc.want)
		}
	}
}

// A deny rule must not be sidestepped by spelling that servers ignore:
// ;parameters (Tomcat, Jetty, Spring), case, trailing dots and spaces (IIS).
func TestDenyPathsIgnoreSpellingServersIgnore(t *testing.T) {
	p := defaultPolicy(t, `
policies:
  default:
    allow:
      - host: l7.test
        paths: ["/public/**"]
    deny:
      - host: l7.test
        paths: ["/public/admin/**", "/public/secret"]
`)
	h := mustHost(t, "l7.test")
	for _, path := range []string{
		"/public/secret", "/public/secret;", "/public/secret;a=b", "/public/admin;x/y", "/public/admin%3bx/y",
		"/public/Secret", "/public/SECRET", "/public/secret%20", "/public/secret.", "/public/Admin/y",
	} {
		if got := p.DecideRequest(h, 80, "GET", path); got != deniedBy(denyRule(0)) && got != deniedBy(denyRule(1)) {
			t.Errorf("GET %s: %+v, want denied", path, got)
		}
	}
	// Allow rules stay exact, apart from ;parameters.
	if got := p.DecideRequest(h, 80, "GET", "/Public/readme"); got.Allow {
		t.Errorf("GET /Public/readme: %+v, want refused (allow rules are case-sensitive)", got)
	}
	if got := p.DecideRequest(h, 80, "GET", "/public;v=1/readme"); !got.Allow {
		t.Errorf("GET /public;v=1/readme: %+v, want allowed", got)
	}
}

func TestDecideName(t *testing.T) {
	p := defaultPolicy(t, `
policies:
  default:
    allow:
      - host: api.example.com
        ports: [443]
      - host: "*.files.example.com"
        dns_types: [TXT]
      - host: mail.example.com
        dns_types: [MX, SRV]
      - host: blocked.example.com
      - host: partly.example.com
    deny:
      - host: blocked.example.com
      - host: partly.example.com
        ports: [22]
`)
	cases := []struct {
		name     string
		allow    bool
		wildcard bool
		types    DNSTypeSet
		reason   Reason
	}{
		{"api.example.com", true, false, 0, Allowed},
		{"API.Example.COM.", true, false, 0, Allowed},
		{"a.b.files.example.com", true, true, DNSTypeTXT, Allowed},
		{"files.example.com", false, false, 0, HostNotAllowed},
		{"mail.example.com", true, false, DNSTypeMX | DNSTypeSRV, Allowed},
		{"blocked.example.com", false, false, 0, DeniedByRule},
		{"partly.example.com", true, false, 0, Allowed}, // a port-limited deny leaves the name resolvable
		{"evil.test", false, false, 0, HostNotAllowed},
		{"localhost", false, false, 0, AddressBlocked},
	}
	for _, tc := range cases {
		d := p.DecideName(mustHost(t, tc.name))
		if d.Allow != tc.allow || d.Wildcard != tc.wildcard || d.Types != tc.types || d.Reason != tc.reason {
			t.Errorf("DecideName(%s) = %+v", tc.name, d)
		}
	}
	h := mustHost(t, "a.b.files.example.com")
	if n := testing.AllocsPerRun(100, func() { p.DecideName(h) }); n != 0 {
		t.Errorf("DecideName allocates %v times", n)
	}
}

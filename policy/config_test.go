package policy

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testFile is the file name the tests give Parse; every error must name it.
const testFile = "airlock.yaml"

// lines joins YAML lines with newlines, so that a row's line numbers are the
// positions of its arguments and columns can be counted in the source.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

// mustParse parses src or fails the test.
func mustParse(tb testing.TB, src string) *Config {
	tb.Helper()
	c, err := Parse(testFile, []byte(src))
	if err != nil {
		tb.Fatalf("Parse: %v\nconfig:\n%s", err, src)
	}
	return c
}

// unjoin returns the errors an errors.Join error holds, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// configErrors parses src, which must fail, and returns its errors, each of
// which must be a *ConfigError.
func configErrors(tb testing.TB, src string) []*ConfigError {
	tb.Helper()
	c, err := Parse(testFile, []byte(src))
	if err == nil {
		tb.Fatalf("Parse succeeded, want an error\nconfig:\n%s", src)
	}
	if c != nil {
		tb.Errorf("Parse returned a *Config together with an error")
	}
	var out []*ConfigError
	for _, e := range unjoin(err) {
		var ce *ConfigError
		if !errors.As(e, &ce) {
			tb.Fatalf("error %q (%T) is not a *ConfigError", e, e)
		}
		out = append(out, ce)
	}
	return out
}

// wantErr is one expected ConfigError: its place, its key path and a part
// of its message.
type wantErr struct {
	line, col int
	path      string
	msg       string // must occur in ConfigError.Msg
}

type parseErrorCase struct {
	name string
	src  string
	want []wantErr
}

// checkParseErrors runs each case and requires exactly its errors, in order.
func checkParseErrors(t *testing.T, tests []parseErrorCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := configErrors(t, tt.src)
			for i, w := range tt.want {
				if i >= len(got) {
					t.Errorf("missing error %d: want %d:%d %s: ...%s...", i, w.line, w.col, w.path, w.msg)
					continue
				}
				g := got[i]
				if g.File != testFile || g.Line != w.line || g.Col != w.col || g.Path != w.path || !strings.Contains(g.Msg, w.msg) {
					t.Errorf("error %d:\n got  %s\n want %s:%d:%d: %s: ...%s...", i, g, testFile, w.line, w.col, w.path, w.msg)
				}
			}
			for _, g := range got[min(len(got), len(tt.want)):] {
				t.Errorf("unexpected error: %s", g)
			}
		})
	}
}

// ruleWithHost is a policy whose one allow rule has the given host; the
// host value is at line 4, column 15.
func ruleWithHost(host string) string {
	return lines(
		"policies:",
		"  default:",
		"    allow:",
		"      - host: "+host,
	)
}

func TestConfigErrorString(t *testing.T) {
	tests := []struct {
		err  ConfigError
		want string
	}{
		{ConfigError{File: "airlock.yaml", Line: 3, Col: 5, Path: "policies.default.alow", Msg: "unknown key; expected one of: allow, deny"},
			"airlock.yaml:3:5: policies.default.alow: unknown key; expected one of: allow, deny"},
		{ConfigError{File: "airlock.yaml", Line: 1, Col: 1, Msg: "YAML syntax: found character that cannot start any token"},
			"airlock.yaml:1:1: YAML syntax: found character that cannot start any token"},
		{ConfigError{File: "<embedded default>", Path: "listen.dns", Msg: "not available"},
			"<embedded default>: listen.dns: not available"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestParseRejectsUnknownKeyWithLineAndColumn(t *testing.T) {
	checkParseErrors(t, []parseErrorCase{
		{
			name: "top level",
			src:  lines("mode: enforce", "listne:", "  proxy: 127.0.0.1:3128"),
			want: []wantErr{{2, 1, "listne", "unknown key; expected one of: listen, mode, network, tls, limits, policies, sandboxes, dns, auth, credentials, audit"}},
		},
		{
			name: "in a policy",
			src:  lines("policies:", "  default:", "    alow:", "      - host: a.test"),
			want: []wantErr{{3, 5, "policies.default.alow", "unknown key; expected one of: allow, deny"}},
		},
		{
			name: "in a rule",
			src:  lines("policies:", "  default:", "    allow:", "      - host: a.test", "        port: [443]"),
			want: []wantErr{{5, 9, "policies.default.allow[0].port", "unknown key; expected one of: host, ports, methods, paths"}},
		},
		{
			name: "in a sandbox",
			src:  lines("policies: {default: {}}", "sandboxes:", "  - name: agent-1", "    client: [10.0.0.0/8]"),
			want: []wantErr{{4, 5, "sandboxes[0].client", "unknown key; expected one of: name, mode, policy, clients, limits"}},
		},
		{
			name: "a CA certificate without its key",
			src:  lines("tls:", "  ca_cert: ca.pem"),
			want: []wantErr{{2, 3, "tls", "set both ca_cert and ca_key, or neither"}},
		},
		{
			name: "a localhost rule (localhost is always blocked)",
			src:  lines("policies:", "  default:", "    allow:", "      - host: \"*.localhost\""),
			want: []wantErr{{4, 15, "policies.default.allow[0].host", "always blocked (RFC 6761)"}},
		},
		{
			name: "an allow_cidrs exception that opens cloud metadata",
			src:  lines("network:", "  allow_cidrs: [10.0.0.0/8, 169.254.0.0/16]"),
			want: []wantErr{{2, 29, "network.allow_cidrs[1]", "covers the cloud metadata address 169.254.169.254"}},
		},
		{
			name: "an allow_cidrs exception for all of IPv4, written mapped",
			src:  lines("network:", "  allow_cidrs: [\"::ffff:0:0/96\"]"),
			want: []wantErr{{2, 17, "network.allow_cidrs[0]", "covers the cloud metadata address"}},
		},
		{
			name: "empty ports",
			src:  lines("network:", "  ports: []"),
			want: []wantErr{{2, 3, "network.ports", "an empty list allows no port"}},
		},
		{
			name: "a rule naming a credential that does not exist",
			src:  lines("policies:", "  default:", "    allow:", "      - host: api.github.com", "        credential: github"),
			want: []wantErr{{4, 9, "policies.default.allow[0].credential", `no credential named "github"`}},
		},
	})
}

func TestParseRejectsDuplicateKey(t *testing.T) {
	checkParseErrors(t, []parseErrorCase{
		{
			name: "top level",
			src:  lines("mode: enforce", "mode: enforce"),
			want: []wantErr{{2, 1, "mode", "key is given twice; keep one"}},
		},
		{
			name: "in a rule",
			src:  lines("policies:", "  default:", "    allow:", "      - host: a.test", "        host: b.test"),
			want: []wantErr{{5, 9, "policies.default.allow[0].host", "key is given twice; keep one"}},
		},
		{
			name: "policy name",
			src:  lines("policies:", "  default: {}", "  default: {}"),
			want: []wantErr{{3, 3, "policies.default", "key is given twice; keep one"}},
		},
		{
			name: "static host spelled two ways",
			src:  lines("network:", "  hosts:", "    mirror.test: 192.0.2.1", "    Mirror.Test.: 192.0.2.2"),
			want: []wantErr{{4, 5, "network.hosts.Mirror.Test.", "host is given twice; keep one"}},
		},
	})
}

func TestParseRejectsWrongType(t *testing.T) {
	checkParseErrors(t, []parseErrorCase{
		{
			name: "string where a list is expected",
			src:  lines("policies:", "  default:", "    allow: api.github.com"),
			want: []wantErr{{3, 12, "policies.default.allow", `expected a list, got str "api.github.com"`}},
		},
		{
			name: "list where a string is expected",
			src:  lines("audit:", "  output: [stdout]"),
			want: []wantErr{{2, 11, "audit.output", "expected a string, got a list"}},
		},
		{
			name: "mapping where a list is expected",
			src:  lines("sandboxes:", "  name: agent-1"),
			want: []wantErr{{2, 3, "sandboxes", "expected a list, got a mapping"}},
		},
		{
			name: "list where a mapping is expected",
			src:  lines("policies:", "  - default"),
			want: []wantErr{{2, 3, "policies", "expected a mapping, got a list"}},
		},
		{
			name: "document is a scalar",
			src:  lines("enforce"),
			want: []wantErr{{1, 1, "", `expected a mapping of keys, got str "enforce"`}},
		},
		{
			name: "port quoted as a string",
			src:  lines("network:", `  ports: ["443"]`),
			want: []wantErr{{2, 11, "network.ports[0]", `expected a port number from 1 to 65535, got str "443"`}},
		},
		{
			name: "port 0",
			src:  lines("network:", "  ports: [0]"),
			want: []wantErr{{2, 11, "network.ports[0]", `expected a port number from 1 to 65535, got int "0"`}},
		},
		{
			name: "port 70000",
			src:  lines("policies:", "  default:", "    allow:", "      - host: a.test", "        ports: [443, 70000]"),
			want: []wantErr{{5, 22, "policies.default.allow[0].ports[1]", `expected a port number from 1 to 65535, got int "70000"`}},
		},
		{
			name: "port as a float",
			src:  lines("network:", "  ports: [443.0]"),
			want: []wantErr{{2, 11, "network.ports[0]", `got float "443.0"`}},
		},
		{
			name: "number where a host is expected",
			src:  ruleWithHost("443"),
			want: []wantErr{{4, 15, "policies.default.allow[0].host", `expected a host name, IP address or *.domain, got int "443"`}},
		},
		{
			name: "mode as a list",
			src:  lines("mode: [enforce]"),
			want: []wantErr{{1, 7, "mode", "expected enforce or report, got a list"}},
		},
		{
			name: "listen address without a port",
			src:  lines("listen:", "  proxy: 127.0.0.1"),
			want: []wantErr{{2, 10, "listen.proxy", `expected a listen address such as 127.0.0.1:3128 or 0.0.0.0:3128, got str "127.0.0.1"`}},
		},
		{
			name: "listen address with a name",
			src:  lines("listen:", "  proxy: localhost:3128"),
			want: []wantErr{{2, 10, "listen.proxy", "expected a listen address"}},
		},
		{
			name: "empty list item",
			src:  lines("policies:", "  default:", "    allow:", "      - host: a.test", "        methods: [GET, ~]"),
			want: []wantErr{{5, 24, "policies.default.allow[0].methods[1]", "empty list item"}},
		},
		{
			name: "empty rule",
			src:  lines("policies:", "  default:", "    allow: [~]"),
			want: []wantErr{{3, 13, "policies.default.allow[0]", "empty list item"}},
		},
	})
}

func TestParseRejectsBadCIDR(t *testing.T) {
	checkParseErrors(t, []parseErrorCase{
		{
			name: "prefix length too long",
			src:  lines("network:", "  allow_cidrs: [10.0.0.0/33]"),
			want: []wantErr{{2, 17, "network.allow_cidrs[0]", `"10.0.0.0/33" is not a CIDR; expected an address and prefix length such as 10.1.2.3/32`}},
		},
		{
			name: "a name",
			src:  lines("network:", "  deny_cidrs: [internal]"),
			want: []wantErr{{2, 16, "network.deny_cidrs[0]", `"internal" is not a CIDR`}},
		},
		{
			name: "zone",
			src:  lines("network:", `  deny_cidrs: ["fe80::1%eth0/64"]`),
			want: []wantErr{{2, 16, "network.deny_cidrs[0]", `"fe80::1%eth0/64" is not a CIDR`}},
		},
		{
			name: "IPv4 host bits set",
			src:  lines("network:", "  allow_cidrs: [10.1.2.3/8]"),
			want: []wantErr{{2, 17, "network.allow_cidrs[0]", `"10.1.2.3/8" has host bits set; did you mean 10.0.0.0/8?`}},
		},
		{
			name: "IPv6 host bits set",
			src:  lines("network:", `  allow_cidrs: ["2001:db8::1/32"]`),
			want: []wantErr{{2, 17, "network.allow_cidrs[0]", `"2001:db8::1/32" has host bits set; did you mean 2001:db8::/32?`}},
		},
		{
			name: "sandbox client range with host bits set",
			src:  lines("policies: {default: {}}", "sandboxes:", "  - name: agent-1", "    clients: [10.0.0.1/24]"),
			want: []wantErr{{4, 15, "sandboxes[0].clients[0]", "has host bits set; did you mean 10.0.0.0/24?"}},
		},
	})
}

func TestParseRejectsBadHostPattern(t *testing.T) {
	const at = "policies.default.allow[0].host"
	const fix = "; write a host name (api.github.com), an IP address or *.domain"
	checkParseErrors(t, []parseErrorCase{
		{"star inside a name", ruleWithHost("a.*.com"), []wantErr{{4, 15, at, "'*' is allowed only as a whole leading label, as in *.example.com" + fix}}},
		{"star alone", ruleWithHost(`"*"`), []wantErr{{4, 15, at, "'*' is allowed only as a whole leading label"}}},
		{"two stars", ruleWithHost(`"*.*.example.com"`), []wantErr{{4, 15, at, "'*' is allowed only as a whole leading label"}}},
		{"star without a dot", ruleWithHost(`"*example.com"`), []wantErr{{4, 15, at, "'*' is allowed only as a whole leading label"}}},
		{"leading hyphen", ruleWithHost("-x.test"), []wantErr{{4, 15, at, "label starts or ends with '-'"}}},
		{"brackets around a name", ruleWithHost(`"[allowed.test]"`), []wantErr{{4, 15, at, "brackets are allowed only around an IPv6 address"}}},
		{"unquoted brackets are a YAML list", ruleWithHost("[allowed.test]"), []wantErr{{4, 15, at, "expected a host name, IP address or *.domain, got a list"}}},
		{"port in the host", ruleWithHost("api.github.com:443"), []wantErr{{4, 15, at, "contains ':' but is not a valid IPv6 address"}}},
		{"URL", ruleWithHost("https://api.github.com"), []wantErr{{4, 15, at, "'/' is not allowed in a host"}}},
		{"underscore", ruleWithHost("under_score.test"), []wantErr{{4, 15, at, "'_' is not allowed in a host name"}}},
		{"wildcard on an address", ruleWithHost(`"*.10.1.2.3"`), []wantErr{{4, 15, at, "a wildcard must be followed by a name, not an IP address"}}},
		{"empty", ruleWithHost(`""`), []wantErr{{4, 15, at, "empty"}}},
		{"IPv4-mapped address", ruleWithHost(`"::ffff:10.1.2.3"`), []wantErr{{4, 15, at, `"::ffff:10.1.2.3" is an IPv4-mapped address; write 10.1.2.3`}}},
		{"IPv4-mapped address in brackets", ruleWithHost(`"[::FFFF:a01:203]"`), []wantErr{{4, 15, at, "is an IPv4-mapped address; write 10.1.2.3"}}},
		{"rule without host", lines("policies:", "  default:", "    allow:", "      - ports: [443]"), []wantErr{{4, 9, "policies.default.allow[0]", "a rule needs a host"}}},
	})
}

func TestParseRejectsPublicSuffixWildcard(t *testing.T) {
	for _, pattern := range []string{"*.com", "*.co.uk", "*.uk", "*.github.io", "*.test", "*.appspot.com"} {
		t.Run(pattern, func(t *testing.T) {
			suffix := strings.TrimPrefix(pattern, "*.")
			checkParseErrors(t, []parseErrorCase{{
				name: "rule",
				src:  ruleWithHost(`"` + pattern + `"`),
				want: []wantErr{{4, 15, "policies.default.allow[0].host",
					`"` + pattern + `" is a public suffix wildcard: anyone can register names under "` + suffix + `"; list the hosts you need`}},
			}})
		})
	}
}

func TestParseAcceptsHostPatterns(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{`"*.example.com"`, "*.example.com"},
		{`"*.pythonhosted.org"`, "*.pythonhosted.org"},
		{`"*.api.github.com"`, "*.api.github.com"},
		{`"*.Example.COM."`, "*.example.com"},
		{"api.github.com", "api.github.com"},
		{"API.GitHub.com.", "api.github.com"},
		{"bücher.example", "xn--bcher-kva.example"},
		{"10.1.2.3", "10.1.2.3"},
		{`"2001:db8::1"`, "2001:db8::1"},
		{`"[2001:DB8::1]"`, "2001:db8::1"},
		{"github.com", "github.com"}, // a registrable domain itself, exact
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			c := mustParse(t, ruleWithHost(tt.in))
			if got := c.Policies["default"].Allow[0].Host.String(); got != tt.want {
				t.Errorf("host %s parsed as %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseRejectsFeaturesOfLaterVersions(t *testing.T) {
	checkParseErrors(t, []parseErrorCase{
		{
			name: "mode is case-sensitive",
			src:  lines("mode: Enforce"),
			want: []wantErr{{1, 7, "mode", `expected enforce or report, got str "Enforce"`}},
		},
	})
}

func TestParseRejectsAnchorsAndAliases(t *testing.T) {
	const msg = "YAML anchors and aliases are not supported; write the value out"
	checkParseErrors(t, []parseErrorCase{
		{
			name: "anchor and alias",
			src: lines(
				"network:",
				"  ports: &p [443]",
				"policies:",
				"  default:",
				"    allow:",
				"      - host: a.test",
				"        ports: *p",
			),
			want: []wantErr{
				{2, 10, "network.ports", msg},
				{7, 16, "policies.default.allow[0].ports", msg},
			},
		},
		{
			name: "merge key",
			src: lines(
				"policies:",
				"  default:",
				"    allow:",
				"      - &r {host: a.test}",
				"      - <<: *r",
				"        ports: [443]",
			),
			want: []wantErr{
				{4, 9, "policies.default.allow[0]", msg},
				{5, 13, "policies.default.allow[1].<<", msg},
			},
		},
		{
			name: "anchor on a static host address",
			src:  lines("network:", "  hosts:", "    mirror.test: &ip 192.0.2.1"),
			want: []wantErr{{3, 18, "network.hosts.mirror.test", msg}},
		},
		{
			name: "anchor on a key",
			src:  lines("&k mode: enforce"),
			want: []wantErr{{1, 1, "mode", msg}},
		},
		{
			// An alias key's Value is the anchor's name; it must never be read
			// as a host name.
			name: "alias as a static host name",
			src:  lines("network:", "  hosts:", "    &a mirror.test: 192.0.2.1", "    *a : 192.0.2.2"),
			want: []wantErr{
				{3, 5, "network.hosts.mirror.test", msg},
				{4, 5, "network.hosts.a", msg},
			},
		},
	})
}

func TestParseReportsYAMLSyntaxErrorLine(t *testing.T) {
	checkParseErrors(t, []parseErrorCase{
		{
			// A parser error: yaml.v3 names the 0-based line of the list's start.
			name: "unclosed flow list",
			src:  lines("policies:", "  default:", "    allow: [a.test", "mode: enforce"),
			want: []wantErr{{3, 1, "", "YAML syntax: did not find expected ',' or ']'"}},
		},
		{
			// The mapping starts on line 1; the parser trips on line 2.
			name: "unclosed flow mapping",
			src:  lines("{mode: enforce", "audit: {}"),
			want: []wantErr{{2, 1, "", "YAML syntax: did not find expected ',' or '}'"}},
		},
		{
			// A scanner error: yaml.v3 names the 1-based line.
			name: "bad indentation",
			src:  lines("listen:", "  proxy: 127.0.0.1:3128", "   admin: 127.0.0.1:9090"),
			want: []wantErr{{3, 1, "", "YAML syntax: mapping values are not allowed in this context"}},
		},
		{
			name: "tab on line 1",
			src:  "\tmode: enforce\n",
			want: []wantErr{{1, 1, "", "YAML syntax: found character that cannot start any token"}},
		},
		{
			// Reported at the --- that starts it, rather than ignored.
			name: "second document",
			src:  lines("mode: enforce", "---", "mode: report"),
			want: []wantErr{{2, 1, "", "expected one YAML document; remove the second one (after ---) or merge it into the first"}},
		},
		{
			name: "second document with a syntax error",
			src:  lines("mode: enforce", "---", "mode: [report"),
			want: []wantErr{{3, 1, "", "YAML syntax: did not find expected ',' or ']'"}},
		},
	})
}

func TestParseReportsEveryErrorInFileOrder(t *testing.T) {
	src := lines(
		"listen:",
		"  proxy: localhost:3128",
		"network:",
		"  ports: [443, 0]",
		"policies:",
		"  default:",
		"    allow:",
		`      - host: "*.com"`,
		"        methods: [get]",
		"audit:",
		"  outptu: stderr",
	)
	checkParseErrors(t, []parseErrorCase{{
		name: "five errors",
		src:  src,
		want: []wantErr{
			{2, 10, "listen.proxy", "expected a listen address"},
			{4, 16, "network.ports[1]", "expected a port number"},
			{8, 15, "policies.default.allow[0].host", "public suffix wildcard"},
			{9, 19, "policies.default.allow[0].methods[0]", `HTTP methods are case-sensitive (RFC 9110 §9.1); write "GET"`},
			{11, 3, "audit.outptu", "unknown key"},
		},
	}})

	// The joined error prints one error per line, each with its place.
	_, err := Parse(testFile, []byte(src))
	msgs := strings.Split(err.Error(), "\n")
	if len(msgs) != 5 || !strings.HasPrefix(msgs[0], "airlock.yaml:2:10: listen.proxy: ") {
		t.Errorf("err.Error() =\n%s\nwant five lines, the first starting airlock.yaml:2:10: listen.proxy:", err)
	}

	// Cross-reference checks run on a file that decodes; each is reported.
	checkParseErrors(t, []parseErrorCase{{
		name: "three validation errors",
		src: lines(
			"policies:",
			"  default: {}",
			"sandboxes:",
			"  - name: agent-1",
			"    policy: nope",
			"  - name: agent-1",
			"  - name: Agent-2",
		),
		want: []wantErr{
			{4, 5, "sandboxes[0].policy", `no policy named "nope"`},
			{6, 5, "sandboxes[1].name", `sandbox "agent-1" is defined twice`},
			{7, 5, "sandboxes[2].name", "a sandbox needs a name of lower-case letters, digits, - and _"},
		},
	}})
}

func TestParseRejectsBadSandboxes(t *testing.T) {
	head := []string{"policies:", "  default: {}", "  strict: {}", "sandboxes:"} // sandboxes start on line 5
	sandboxes := func(ls ...string) string { return lines(append(slices.Clone(head), ls...)...) }
	checkParseErrors(t, []parseErrorCase{
		{
			name: "unknown policy",
			src:  sandboxes("  - name: agent-1", "    policy: stricter"),
			want: []wantErr{{5, 5, "sandboxes[0].policy", `no policy named "stricter"; define it under policies`}},
		},
		{
			name: "no policy named default to fall back on",
			src:  lines("policies: {strict: {}}", "sandboxes:", "  - name: agent-1"),
			want: []wantErr{{3, 5, "sandboxes[0].policy", `no policy named "default"`}},
		},
		{
			name: "duplicate name",
			src:  sandboxes("  - name: agent-1", "  - name: agent-1"),
			want: []wantErr{{6, 5, "sandboxes[1].name", `sandbox "agent-1" is defined twice`}},
		},
		{
			name: "missing name",
			src:  sandboxes("  - policy: strict"),
			want: []wantErr{{5, 5, "sandboxes[0].name", "a sandbox needs a name"}},
		},
		{
			name: "upper-case name",
			src:  sandboxes("  - name: Agent-1"),
			want: []wantErr{{5, 5, "sandboxes[0].name", "a sandbox needs a name of lower-case letters"}},
		},
		{
			name: "same client range in two sandboxes",
			src:  sandboxes("  - name: agent-1", "    clients: [10.0.0.0/24]", "  - name: agent-2", "    clients: [10.0.0.0/24]"),
			want: []wantErr{{7, 5, "sandboxes[1].clients", `10.0.0.0/24 is already a client range of sandbox "agent-1"`}},
		},
		{
			// Clients are matched as IPv4 once unmapped; a mapped range would
			// never match and its clients would silently become "default".
			name: "IPv4-mapped client range",
			src:  sandboxes("  - name: agent-1", `    clients: ["::ffff:10.0.0.0/120"]`),
			want: []wantErr{{5, 5, "sandboxes[0].clients", "::ffff:10.0.0.0/120 is an IPv4-mapped range; write 10.0.0.0/24"}},
		},
		{
			name: "header_timeout under a sandbox",
			src:  sandboxes("  - name: agent-1", "    limits:", "      header_timeout: 5s"),
			want: []wantErr{{5, 5, "sandboxes[0].limits.header_timeout", "header_timeout applies to the whole listener; set it under the top-level limits"}},
		},
		{
			name: "policy name with upper case",
			src:  lines("policies:", "  Default: {}"),
			want: []wantErr{{2, 12, "policies.Default", "policy names are lower-case letters, digits, - and _"}},
		},
	})
}

func TestParseRejectsBadDuration(t *testing.T) {
	const msg = "expected a duration such as 30s, 5m or 1h30m, got "
	checkParseErrors(t, []parseErrorCase{
		{"bare number", lines("limits:", "  idle_timeout: 5"), []wantErr{{2, 17, "limits.idle_timeout", "expected a duration with a unit; did you mean 5s?"}}},
		{"words", lines("limits:", "  idle_timeout: 5 minutes"), []wantErr{{2, 17, "limits.idle_timeout", msg + `str "5 minutes"`}}},
		{"negative", lines("limits:", "  header_timeout: -1s"), []wantErr{{2, 19, "limits.header_timeout", msg + `str "-1s"`}}},
		{"days", lines("policies: {default: {}}", "sandboxes:", "  - name: agent-1", "    limits: {idle_timeout: 1d}"),
			[]wantErr{{4, 28, "sandboxes[0].limits.idle_timeout", msg + `str "1d"`}}},
	})
}

// pathsRule is a policy whose one allow rule has the given paths list; its
// first item is at line 5, column 17.
func pathsRule(paths string) string {
	return lines("policies:", "  default:", "    allow:", "      - host: a.test", "        paths: "+paths)
}

func TestParseRejectsBadMethodsAndPaths(t *testing.T) {
	const at = "policies.default.allow[0].paths[0]"
	checkParseErrors(t, []parseErrorCase{
		{"lower-case method", lines("policies:", "  default:", "    allow:", "      - host: a.test", "        methods: [GET, post]"),
			[]wantErr{{5, 24, "policies.default.allow[0].methods[1]", `HTTP methods are case-sensitive (RFC 9110 §9.1); write "POST"`}}},
		{"method with a space", lines("policies:", "  default:", "    allow:", "      - host: a.test", `        methods: ["GE T"]`),
			[]wantErr{{5, 19, "policies.default.allow[0].methods[0]", `expected an HTTP method such as GET, got str "GE T"`}}},
		{"path without leading slash", pathsRule("[repos/x]"), []wantErr{{5, 17, at, `expected a path starting with /, such as /repos/acme/**, got str "repos/x"`}}},
		{"star inside a segment", pathsRule(`["/a*b"]`), []wantErr{{5, 17, at, `"/a*b": * and ** must be whole segments`}}},
		{"triple star", pathsRule(`["/a/***"]`), []wantErr{{5, 17, at, "must be whole segments"}}},
		{"dot-dot segment", pathsRule(`["/a/../b"]`), []wantErr{{5, 17, at, `"/a/../b": write the path without dot-segments or percent-encoding`}}},
		{"dot segment", pathsRule(`["/a/./b"]`), []wantErr{{5, 17, at, "without dot-segments"}}},
		{"percent-encoding", pathsRule(`["/a%2Fb"]`), []wantErr{{5, 17, at, "without dot-segments or percent-encoding"}}},
		{"empty segment", pathsRule(`["/a//b"]`), []wantErr{{5, 17, at, `"/a//b": write the path without empty segments`}}},
		{"path as a mapping", pathsRule(`[{a: b}]`), []wantErr{{5, 17, at, "expected a path starting with /"}}},
	})
}

func TestParseRejectsBadNetworkSettings(t *testing.T) {
	checkParseErrors(t, []parseErrorCase{
		{"static host keyed by an IP", lines("network:", "  hosts:", "    192.0.2.1: 192.0.2.2"),
			[]wantErr{{3, 5, "network.hosts.192.0.2.1", `expected a host name as key, got str "192.0.2.1"`}}},
		{"static host keyed by a wildcard", lines("network:", "  hosts:", `    "*.test": 192.0.2.2`),
			[]wantErr{{3, 5, "network.hosts.*.test", "expected a host name as key"}}},
		{"static host with a name as value", lines("network:", "  hosts:", "    mirror.test: mirror.example"),
			[]wantErr{{3, 18, "network.hosts.mirror.test", `expected an IP address such as 192.0.2.10, got str "mirror.example"`}}},
		{"static host with one bad address in a list", lines("network:", "  hosts:", "    mirror.test: [192.0.2.1, 192.0.2.300]"),
			[]wantErr{{3, 30, "network.hosts.mirror.test", `got str "192.0.2.300"`}}},
		{"static host with an empty list", lines("network:", "  hosts:", "    mirror.test: []"),
			[]wantErr{{3, 18, "network.hosts.mirror.test", "expected at least one IP address"}}},
		{"static host with a zone", lines("network:", "  hosts:", `    mirror.test: "fe80::1%eth0"`),
			[]wantErr{{3, 18, "network.hosts.mirror.test", "expected an IP address"}}},
		{"hosts as a list", lines("network:", "  hosts: [mirror.test]"),
			[]wantErr{{2, 10, "network.hosts", "expected a mapping of host name to IP address, got a list"}}},
		{"resolver given as a name", lines("network:", "  resolvers: [dns.google]"),
			[]wantErr{{2, 15, "network.resolvers[0]", `expected a resolver address such as 10.0.0.2 or 10.0.0.2:53 (an IP, not a name), got str "dns.google"`}}},
		{"resolver with port 0", lines("network:", `  resolvers: ["10.0.0.2:0"]`),
			[]wantErr{{2, 15, "network.resolvers[0]", "an IP, not a name"}}},
		{"resolver as a name and port", lines("network:", `  resolvers: ["dns.google:53"]`),
			[]wantErr{{2, 15, "network.resolvers[0]", "an IP, not a name"}}},
	})
}

func TestParseAcceptsListenAddresses(t *testing.T) {
	tests := []struct {
		src          string
		proxy, admin ListenAddr
	}{
		{lines("listen: {proxy: ':3128'}"), ":3128", ""},
		{lines("listen: {proxy: '[::1]:3128', admin: '127.0.0.1:9090'}"), "[::1]:3128", "127.0.0.1:9090"},
		// An empty value means "not set", as in DESIGN.md's `dns: ""`.
		{lines(`listen: {proxy: "", dns: "", admin: ""}`), DefaultProxyAddr, ""},
	}
	for _, tt := range tests {
		c := mustParse(t, tt.src)
		if c.Listen.Proxy != tt.proxy || c.Listen.Admin != tt.admin || c.Listen.DNS != "" {
			t.Errorf("%s: listen = %+v, want proxy %q, admin %q, no dns", strings.TrimSpace(tt.src), c.Listen, tt.proxy, tt.admin)
		}
	}
}

func TestParseAppliesDefaults(t *testing.T) {
	c := mustParse(t, lines(
		"policies:",
		"  default:",
		"    allow:",
		"      - host: a.test",
		"      - host: b.test",
		"        ports: [8080]",
		"    deny:",
		"      - host: c.test",
	))
	if c.Listen.Proxy != "127.0.0.1:3128" {
		t.Errorf("listen.proxy = %q, want 127.0.0.1:3128", c.Listen.Proxy)
	}
	if c.Listen.DNS != "" || c.Listen.Admin != "" {
		t.Errorf("listen.dns = %q, listen.admin = %q, want both off", c.Listen.DNS, c.Listen.Admin)
	}
	if c.Mode != Enforce {
		t.Errorf("mode = %q, want enforce", c.Mode)
	}
	if c.Limits.HeaderTimeout != 10*time.Second || c.Limits.IdleTimeout != 5*time.Minute {
		t.Errorf("limits = %+v, want header_timeout 10s, idle_timeout 5m", c.Limits)
	}
	if c.Audit.Output != "stdout" {
		t.Errorf("audit.output = %q, want stdout", c.Audit.Output)
	}
	sb, ok := c.Sandbox(DefaultSandbox)
	if !ok || sb.Policy == nil || sb.Policy.Name() != "default" || sb.IdleTimeout != 5*time.Minute {
		t.Fatalf("default sandbox = %+v, want policy default, idle timeout 5m", sb)
	}
	if c.File() != testFile {
		t.Errorf("File() = %q, want %q", c.File(), testFile)
	}

	// network.ports defaults to [80, 443] for allow rules that name no port;
	// a deny rule without ports denies every port.
	tests := []struct {
		host string
		port uint16
		want Reason
	}{
		{"a.test", 80, Allowed},
		{"a.test", 443, Allowed},
		{"a.test", 8080, PortNotAllowed},
		{"b.test", 8080, Allowed},
		{"b.test", 443, PortNotAllowed},
		{"c.test", 443, DeniedByRule},
		{"c.test", 22, DeniedByRule},
	}
	for _, tt := range tests {
		if got := sb.Policy.Decide(mustHost(t, tt.host), tt.port); got.Reason != tt.want {
			t.Errorf("Decide(%s, %d) = %+v, want %s", tt.host, tt.port, got, tt.want)
		}
	}

	// network.ports replaces the default for every allow rule without ports.
	c = mustParse(t, lines("network: {ports: [8443]}", "policies: {default: {allow: [{host: a.test}]}}"))
	sb, _ = c.Sandbox(DefaultSandbox)
	for port, want := range map[uint16]Reason{8443: Allowed, 443: PortNotAllowed, 80: PortNotAllowed} {
		if got := sb.Policy.Decide(mustHost(t, "a.test"), port); got.Reason != want {
			t.Errorf("with network.ports [8443]: Decide(a.test, %d) = %+v, want %s", port, got, want)
		}
	}
}

func TestParseEmptyFileDeniesEverything(t *testing.T) {
	for _, src := range []string{"", "# only a comment\n", "---\n", "{}\n", "policies:\n"} {
		t.Run(src, func(t *testing.T) {
			c := mustParse(t, src)
			if c.Listen.Proxy != DefaultProxyAddr || c.Mode != Enforce || c.Audit.Output != "stdout" {
				t.Errorf("defaults not applied: %+v", c)
			}
			sb := c.SandboxFor(netip.MustParseAddr("10.0.0.1"))
			if sb == nil || sb.Name != DefaultSandbox || sb.Policy != nil {
				t.Fatalf("SandboxFor = %+v, want the default sandbox without a policy", sb)
			}
			h := mustHost(t, "api.github.com")
			want := Decision{Reason: NoPolicy}
			if got := sb.Policy.Decide(h, 443); got != want {
				t.Errorf("Policy.Decide = %+v, want %+v", got, want)
			}
			if got := sb.Policy.DecideRequest(h, 443, "GET", "/"); got != want {
				t.Errorf("Policy.DecideRequest = %+v, want %+v", got, want)
			}
			if got := c.Decide(sb, mustHost(t, "93.184.215.14"), 443); got != want {
				t.Errorf("Config.Decide(public IP) = %+v, want %+v", got, want)
			}
		})
	}
}

func TestDefaultConfigAllowsCodingAgentHosts(t *testing.T) {
	c, err := Default()
	if err != nil {
		t.Fatalf("Default: %v", err)
	}
	if c.File() != "<embedded default>" || c.Listen.Proxy != DefaultProxyAddr {
		t.Errorf("Default() = %v, listen.proxy %q", c, c.Listen.Proxy)
	}
	sb := c.SandboxFor(netip.MustParseAddr("127.0.0.1"))
	allowed := []string{
		"proxy.golang.org:443", "sum.golang.org:443",
		"registry.npmjs.org:443",
		"pypi.org:443", "files.pythonhosted.org:443",
		"crates.io:443", "static.crates.io:443",
		"deb.debian.org:80",
		"github.com:443", "api.github.com:443", "raw.githubusercontent.com:443",
		"codeload.github.com:443", "objects.githubusercontent.com:443",
		"api.anthropic.com:443", "api.openai.com:443",
	}
	for _, a := range allowed {
		h, port := mustAuthority(t, a)
		if d := c.Decide(sb, h, port); !d.Allow || d.Reason != Allowed || d.Rule == "" || d.Inspect {
			t.Errorf("Decide(%s) = %+v, want allowed by a rule, without inspection", a, d)
		}
	}
	denied := []struct {
		authority string
		want      Reason
	}{
		{"example.com:443", HostNotAllowed},
		{"evil.github.com.evil.test:443", HostNotAllowed},
		{"github.com.evil.test:443", HostNotAllowed},
		{"evil.github.com:443", HostNotAllowed},
		{"github.com:22", PortNotAllowed},
		{"api.openai.com:80", PortNotAllowed},
		{"169.254.169.254:80", AddressBlocked},
		{"localhost:443", AddressBlocked},
	}
	for _, tt := range denied {
		h, port := mustAuthority(t, tt.authority)
		if d := c.Decide(sb, h, port); d.Allow || d.Reason != tt.want {
			t.Errorf("Decide(%s) = %+v, want denied with %s", tt.authority, d, tt.want)
		}
	}
	// Without the address check, the metadata address is simply not listed.
	if d := sb.Policy.Decide(mustHost(t, "169.254.169.254"), 80); d.Reason != HostNotAllowed {
		t.Errorf("Policy.Decide(169.254.169.254:80) = %+v, want host_not_allowed", d)
	}
}

func TestDefaultYAMLReturnsACopy(t *testing.T) {
	b := DefaultYAML()
	if !strings.Contains(string(b), "policies:") {
		t.Fatalf("DefaultYAML() does not look like the default config")
	}
	clear(b)
	if _, err := Parse("copy", DefaultYAML()); err != nil {
		t.Errorf("after changing one copy, DefaultYAML() no longer parses: %v", err)
	}
	if _, err := Default(); err != nil {
		t.Errorf("after changing one copy, Default() fails: %v", err)
	}
}

func TestLoadFullConfig(t *testing.T) {
	path := filepath.Join("testdata", "full.yaml")
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	if c.File() != path || c.Listen.Proxy != "0.0.0.0:3128" || c.Listen.Admin != "127.0.0.1:9090" {
		t.Errorf("file %q, listen %+v", c.File(), c.Listen)
	}
	if got := c.Network.Ports; !slices.Equal(got, []Port{443, 8443}) {
		t.Errorf("network.ports = %v", got)
	}
	var resolvers []string
	for _, r := range c.Network.Resolvers {
		resolvers = append(resolvers, r.String())
	}
	if want := []string{"10.0.0.2:53", "10.0.0.3:5353", "[2001:db8::53]:53"}; !slices.Equal(resolvers, want) {
		t.Errorf("network.resolvers = %v, want %v", resolvers, want)
	}
	if c.Limits.HeaderTimeout != 5*time.Second || c.Limits.IdleTimeout != 2*time.Minute {
		t.Errorf("limits = %+v", c.Limits)
	}
	if c.Audit.Output != "/var/log/airlock/audit.jsonl" {
		t.Errorf("audit.output = %q", c.Audit.Output)
	}
	// Relative TLS paths are relative to the configuration file.
	if c.TLS.CACert != filepath.Join("testdata", "ca", "ca.pem") || c.TLS.CAKey != "/etc/airlock/ca-key.pem" ||
		c.TLS.UpstreamCA != filepath.Join("testdata", "upstream.pem") {
		t.Errorf("tls = %+v", c.TLS)
	}

	// Static hosts are keyed by canonical name and only answer for names.
	addrs, ok := c.StaticHost(mustHost(t, "MIRROR.internal.test"))
	if !ok || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("StaticHost(mirror.internal.test) = %v, %v", addrs, ok)
	}
	if addrs, ok := c.StaticHost(mustHost(t, "dual.internal.test")); !ok || len(addrs) != 2 {
		t.Errorf("StaticHost(dual.internal.test) = %v, %v", addrs, ok)
	}
	if _, ok := c.StaticHost(mustHost(t, "10.1.2.3")); ok {
		t.Errorf("StaticHost(10.1.2.3) answered for an IP")
	}

	// Address rules: allow_cidrs is an exception, deny_cidrs adds to the list.
	rules := c.AddressRules()
	if err := rules.Check(netip.MustParseAddr("10.1.2.3")); err != nil {
		t.Errorf("10.1.2.3 is in allow_cidrs but blocked: %v", err)
	}
	if err := rules.Check(netip.MustParseAddr("203.0.113.9")); err == nil {
		t.Errorf("203.0.113.9 is in deny_cidrs but allowed")
	}

	// agent-1 uses policy strict and its own idle timeout; the sandbox named
	// strict gets the policy of its own name.
	agent := c.SandboxFor(netip.MustParseAddr("10.8.1.1"))
	if agent.Name != "agent-1" || agent.Policy.Name() != "strict" || agent.IdleTimeout != 30*time.Second {
		t.Errorf("SandboxFor(10.8.1.1) = %+v", agent)
	}
	if sb, ok := c.Sandbox("strict"); !ok || sb.Policy.Name() != "strict" || sb.IdleTimeout != 2*time.Minute {
		t.Errorf("Sandbox(strict) = %+v, %v", sb, ok)
	}
	goproxy := mustHost(t, "proxy.golang.org")
	if d := c.Decide(agent, goproxy, 8443); !d.Allow || d.Rule != "policies.strict.allow[0]" {
		t.Errorf("agent-1: Decide(proxy.golang.org:8443) = %+v", d)
	}
	if d := c.Decide(agent, mustHost(t, "api.github.com"), 443); d.Reason != HostNotAllowed {
		t.Errorf("agent-1: Decide(api.github.com:443) = %+v, want host_not_allowed", d)
	}
	def := c.SandboxFor(netip.MustParseAddr("192.0.2.1"))
	if d := c.Decide(def, mustHost(t, "10.1.2.3"), 443); !d.Allow || d.Rule != "policies.default.allow[2]" {
		t.Errorf("default: Decide(10.1.2.3:443) = %+v, want allowed: listed and in allow_cidrs", d)
	}
	if d := c.DecideRequest(def, mustHost(t, "github.com"), 443, "POST", "/acme/widget.git/git-receive-pack"); d.Reason != DeniedByRule {
		t.Errorf("default: git push = %+v, want denied_by_rule", d)
	}
	if !strings.Contains(c.String(), "policies: default, strict") {
		t.Errorf("String() = %q", c.String())
	}
}

func TestLoadNamesTheFileInErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "airlock.yaml")
	if err := os.WriteFile(path, []byte(lines("mode: enforce", "mdoe: enforce")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.File != path || ce.Line != 2 || ce.Col != 1 {
		t.Fatalf("Load = %v, want a *ConfigError at %s:2:1", err, path)
	}
	if !strings.HasPrefix(err.Error(), path+":2:1: mdoe: unknown key") {
		t.Errorf("error = %q", err)
	}

	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if !errors.Is(err, fs.ErrNotExist) || errors.As(err, &ce) {
		t.Errorf("Load(missing) = %v, want a not-exist error that is no *ConfigError", err)
	}
}

func TestSandboxForLongestClientPrefixWins(t *testing.T) {
	c := mustParse(t, lines(
		"policies:",
		"  default: {}",
		"  ci: {allow: [{host: ci.test}]}",
		"sandboxes:",
		"  - name: agent-1",
		"    clients: [10.0.0.0/8]",
		"  - name: agent-2",
		`    clients: [10.1.0.0/16, "2001:db8::/32"]`,
		"  - name: agent-3",
		"    clients: [10.1.2.0/24]",
		"    limits: {idle_timeout: 1m}",
		"  - name: ci",
	))
	tests := []struct {
		client, want string
	}{
		{"10.2.3.4", "agent-1"},
		{"10.1.9.9", "agent-2"},
		{"10.1.2.3", "agent-3"},
		{"::ffff:10.1.2.3", "agent-3"}, // an IPv4-mapped client is its IPv4 address
		{"::ffff:10.2.3.4", "agent-1"},
		{"2001:db8::1", "agent-2"},
		{"192.0.2.1", "default"},
		{"::1", "default"},
		{"::ffff:192.0.2.1", "default"},
	}
	for _, tt := range tests {
		if got := c.SandboxFor(netip.MustParseAddr(tt.client)); got == nil || got.Name != tt.want {
			t.Errorf("SandboxFor(%s) = %+v, want %s", tt.client, got, tt.want)
		}
	}
	if got := c.SandboxFor(netip.Addr{}); got == nil || got.Name != DefaultSandbox {
		t.Errorf("SandboxFor(invalid address) = %+v, want default", got)
	}

	def, _ := c.Sandbox(DefaultSandbox)
	a1, _ := c.Sandbox("agent-1")
	a3, _ := c.Sandbox("agent-3")
	ci, ok := c.Sandbox("ci")
	if !ok || ci.Policy.Name() != "ci" {
		t.Errorf("Sandbox(ci) = %+v, want policy ci (the policy of its own name)", ci)
	}
	if a1.Policy != def.Policy || a1.Policy.Name() != "default" {
		t.Errorf("agent-1 has policy %v, want the default policy", a1.Policy)
	}
	if a1.IdleTimeout != DefaultIdleTimeout || a3.IdleTimeout != time.Minute {
		t.Errorf("idle timeouts: agent-1 %v, agent-3 %v; want 5m and 1m", a1.IdleTimeout, a3.IdleTimeout)
	}
	if sb, ok := c.Sandbox("nope"); ok || sb != nil {
		t.Errorf("Sandbox(nope) = %+v, %v; want nil, false", sb, ok)
	}
}

func TestWithAllowCIDRsDoesNotModifyOriginal(t *testing.T) {
	c := mustParse(t, lines("network: {allow_cidrs: [10.1.2.3/32]}", "policies: {default: {allow: [{host: 10.9.9.9}]}}"))
	blocked := netip.MustParseAddr("10.9.9.9")

	a, err := c.WithAllowCIDRs([]netip.Prefix{netip.MustParsePrefix("10.9.9.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.WithAllowCIDRs([]netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}

	if err := a.AddressRules().Check(blocked); err != nil {
		t.Errorf("copy with 10.9.9.0/24: Check(10.9.9.9) = %v, want allowed", err)
	}
	for name, cfg := range map[string]*Config{"original": c, "other copy": b} {
		if err := cfg.AddressRules().Check(blocked); err == nil {
			t.Errorf("%s: Check(10.9.9.9) allowed; WithAllowCIDRs changed it", name)
		}
	}
	if got := c.AddressRules().Allow; len(got) != 1 || got[0] != netip.MustParsePrefix("10.1.2.3/32") {
		t.Errorf("original allow list = %v, want [10.1.2.3/32]", got)
	}
	if got := b.AddressRules().Allow; len(got) != 2 {
		t.Errorf("second copy allow list = %v, want the original entry and its own", got)
	}

	// The copy keeps the original's sandboxes and policies.
	sb := a.SandboxFor(netip.MustParseAddr("127.0.0.1"))
	if d := a.Decide(sb, mustHost(t, "10.9.9.9"), 443); !d.Allow {
		t.Errorf("copy: Decide(10.9.9.9:443) = %+v, want allowed", d)
	}
	if d := c.Decide(sb, mustHost(t, "10.9.9.9"), 443); d.Reason != AddressBlocked || d.Rule != "policies.default.allow[0]" {
		t.Errorf("original: Decide(10.9.9.9:443) = %+v, want address_blocked naming the rule", d)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(DefaultYAML())
	if full, err := os.ReadFile(filepath.Join("testdata", "full.yaml")); err == nil {
		f.Add(full)
	}
	for _, s := range []string{
		"",
		ruleWithHost(`"*.co.uk"`),
		ruleWithHost(`"[allowed.test]"`),
		lines("network:", "  ports: &p [443]", "policies:", "  default:", "    allow:", "      - host: a.test", "        ports: *p"),
		lines("policies:", "  default:", "    allow: [a.test", "mode: enforce"),
		lines("mode: enforce", "---", "mode: report"),
		lines("policies: {default: {}}", "sandboxes:", "  - name: a", "    clients: [10.0.0.0/8]", "  - name: b", "    clients: [10.0.0.0/8]"),
		lines("network:", "  hosts:", "    &a mirror.test: 192.0.2.1", "    *a : 192.0.2.2"),
		pathsRule(`["/a//b", "/**/x/"]`),
		lines("policies:", "  default:", "    allow: [~, {host: a.test, methods: [~]}]"),
		lines("limits: {idle_timeout: 0s, header_timeout: 1h}", "listen: {dns: ''}"),
		lines(`limits: {max_request_body: "1.5 GiB", max_header_bytes: 0x4000, max_bytes_sent: 9223372036854775808, bytes_window: 1m}`),
	} {
		f.Add([]byte(s))
	}
	h := mustHost(f, "api.github.com")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned a config and %v", err)
			}
			for _, e := range unjoin(err) {
				var ce *ConfigError
				if !errors.As(e, &ce) || ce.File != "fuzz.yaml" || ce.Msg == "" {
					t.Fatalf("error %q (%T) is not a *ConfigError naming the file", e, e)
				}
				if ce.Line < 0 || ce.Col < 0 || (ce.Line > 0 && ce.Col == 0) {
					t.Fatalf("error %q has position %d:%d", e, ce.Line, ce.Col)
				}
			}
			return
		}
		sb, ok := c.Sandbox(DefaultSandbox)
		if !ok || sb == nil || sb.Name != DefaultSandbox {
			t.Fatalf("no default sandbox: %+v", sb)
		}
		if c.SandboxFor(netip.MustParseAddr("10.0.0.1")) == nil {
			t.Fatalf("SandboxFor returned nil")
		}
		if c.Mode != Enforce || c.Listen.Proxy == "" || c.Limits.HeaderTimeout <= 0 || c.Limits.IdleTimeout <= 0 {
			t.Fatalf("defaults missing: mode %q, listen %+v, limits %+v", c.Mode, c.Listen, c.Limits)
		}
		d := c.Decide(sb, h, 443)
		r := c.DecideRequest(sb, h, 443, "POST", "/repos/acme/x")
		if r.Allow && !d.Allow {
			t.Fatalf("request allowed (%+v) on a host the host-level decision denies (%+v)", r, d)
		}
		_ = c.String()
	})
}

func TestCheckAllowCIDRGuardsCloudMetadata(t *testing.T) {
	cases := []struct {
		allow string
		deny  []string
		ok    bool
	}{
		{"10.0.0.0/8", nil, true},
		{"127.0.0.1/32", nil, true},
		{"169.254.169.254/32", nil, true}, // exactly the address: deliberate
		{"169.254.0.0/16", nil, false},
		{"169.254.0.0/16", []string{"169.254.0.23/32", "169.254.169.254/32", "169.254.170.0/24"}, true},
		{"169.254.0.0/24", nil, false},  // Tencent Cloud's 169.254.0.23
		{"fd20::/16", nil, false},       // GCP's fd20:ce::254
		{"2002::/16", nil, false},       // 6to4 forms of every IPv4 metadata address
		{"::a9fe:a9fe/128", nil, false}, // IPv4-compatible 169.254.169.254
		{"0.0.0.0/0", nil, false},
		{"::/0", nil, false},
		{"fc00::/7", nil, false}, // AWS IMDS over IPv6 is fd00:ec2::254
		{"fc00::/7", []string{"fd00:ec2::/32", "fd20:ce::/32"}, true},
		{"64:ff9b::/96", nil, false},  // NAT64 form of every IPv4 address
		{"100.64.0.0/10", nil, false}, // Alibaba Cloud's 100.100.100.200
		{"168.63.129.0/24", nil, false},
	}
	for _, tc := range cases {
		var deny []netip.Prefix
		for _, d := range tc.deny {
			deny = append(deny, netip.MustParsePrefix(d))
		}
		err := CheckAllowCIDR(netip.MustParsePrefix(tc.allow), deny)
		if (err == nil) != tc.ok {
			t.Errorf("CheckAllowCIDR(%s, deny %v) = %v, want ok=%v", tc.allow, tc.deny, err, tc.ok)
		}
	}
}

func TestWarnings(t *testing.T) {
	c := mustParse(t, lines(
		"policies:",
		"  strict:",
		"    allow:",
		"      - host: 10.1.2.3",
		"    deny:",
		"      - host: 93.184.215.14",
		"sandboxes:",
		"  - name: agent",
		"    policy: strict",
	))
	got := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{
		`airlock.yaml: policies: no policy named "default"`,
		"airlock.yaml:4:9: policies.strict.allow[0]: 10.1.2.3 is a blocked address",
		"airlock.yaml:6:9: policies.strict.deny[0]: a deny rule on an IP literal does not stop names",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	if w := mustParse(t, lines("policies: {default: {allow: [{host: a.example}]}}")).Warnings(); len(w) != 0 {
		t.Errorf("a plain policy has warnings: %v", w)
	}
}

func TestEmptyAndNullListsAndQueryPatternsAreErrors(t *testing.T) {
	checkParseErrors(t, []parseErrorCase{
		{"empty methods", ruleWith("        methods: []"), []wantErr{{4, 9, "policies.default.allow[0].methods", "an empty list"}}},
		{"empty paths", ruleWith("        paths: []"), []wantErr{{4, 9, "policies.default.allow[0].paths", "an empty list"}}},
		{"null methods", ruleWith("        methods:"), []wantErr{{5, 17, "policies.default.allow[0].methods", "empty value"}}},
		{"null ports", ruleWith("        ports: ~"), []wantErr{{5, 16, "policies.default.allow[0].ports", "empty value"}}},
		{"a query in a path pattern", ruleWith(`        paths: ["/admin?debug=1"]`), []wantErr{{5, 17, "policies.default.allow[0].paths[0]", "never the query"}}},
	})
}

// ruleWith is a policy with one allow rule for api.example.com (line 4)
// and extra lines under it.
func ruleWith(extra ...string) string {
	return lines(append([]string{"policies:", "  default:", "    allow:", "      - host: api.example.com"}, extra...)...)
}

func TestWarningsForShadowedRequestRules(t *testing.T) {
	c := mustParse(t, lines(
		"policies:",
		"  default:",
		"    allow:",
		"      - host: api.example.com",
		"        methods: [GET]",
		"        paths: [\"/public/**\"]",
		"      - host: \"*.example.com\"",
	))
	got := strings.Join(c.Warnings(), "\n")
	if !strings.Contains(got, "airlock.yaml:4:9: policies.default.allow[0]: its methods and paths limit nothing: policies.default.allow[1] allows *.example.com") {
		t.Errorf("warnings:\n%s", got)
	}
}

func TestUnspecifiedAddressIsNeverAnException(t *testing.T) {
	rules := &AddressRules{Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/32"), netip.MustParsePrefix("::/128")}}
	for _, a := range []string{"0.0.0.0", "::", "::ffff:0.0.0.0"} {
		if rules.Check(netip.MustParseAddr(a)) == nil {
			t.Errorf("%s is dialable with an allow_cidrs exception; it connects to this machine", a)
		}
	}
}

func TestWildcardsOverMultiTenantCloudDomainsAreErrors(t *testing.T) {
	for _, w := range []string{`"*.amazonaws.com"`, `"*.us-east-1.amazonaws.com"`, `"*.windows.net"`, `"*.storage.googleapis.com"`, `"*.cloudfront.net"`} {
		_, err := Parse(testFile, []byte(ruleWithHost(w)))
		if err == nil || !strings.Contains(err.Error(), "list the hosts you need") {
			t.Errorf("%s: %v", w, err)
		}
	}
	// Exact names under them are fine: they are one tenant's.
	mustParse(t, ruleWithHost("my-bucket.s3.amazonaws.com"))
}

func TestCheckReload(t *testing.T) {
	base := lines(
		"listen: {proxy: 127.0.0.1:3128}",
		"network: {resolvers: [10.0.0.2]}",
		"policies:",
		"  default:",
		"    allow:",
		"      - host: a.example",
		"credentials:",
		"  c: {source: {env: T}, hosts: [a.example]}",
	)
	old := mustParse(t, base)
	// An edit that moves every position but changes no restart-bound key.
	moved := mustParse(t, "# a comment\n\n"+strings.Replace(base, "host: a.example", "host: b.example", 1))
	if err := moved.CheckReload(old); err != nil {
		t.Errorf("policy-only change: %v", err)
	}
	for _, tc := range []struct{ from, to, key string }{
		{"127.0.0.1:3128", "127.0.0.1:3129", "listen"},
		{"10.0.0.2", "10.0.0.3", "network.resolvers"},
		{"env: T", "env: U", "credentials"},
		{"policies:", "auth: {required: true}\npolicies:", "auth.required"},
		{"policies:", "limits: {header_timeout: 3s}\npolicies:", "limits.header_timeout"},
		{"policies:", "limits: {max_header_bytes: 8KiB}\npolicies:", "limits.max_header_bytes"},
	} {
		changed := mustParse(t, strings.Replace(base, tc.from, tc.to, 1))
		if err := changed.CheckReload(old); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s changed: %v", tc.key, err)
		}
	}
}

func TestRateLimitsDefaultAndOverride(t *testing.T) {
	c := mustParse(t, lines(
		"limits: {requests_per_second: 2.5}",
		"policies: {default: {allow: [{host: a.example}]}}",
		"sandboxes:",
		"  - name: fast",
		"    policy: default",
		"    limits: {requests_per_second: 100, burst: 10}",
		"  - name: bursty",
		"    policy: default",
		"    limits: {burst: 7}",
	))
	for _, tc := range []struct {
		name  string
		rps   float64
		burst int
	}{{"default", 2.5, 3}, {"fast", 100, 10}, {"bursty", 2.5, 7}} {
		sb, _ := c.Sandbox(tc.name)
		if sb.RequestsPerSecond != tc.rps || sb.Burst != tc.burst {
			t.Errorf("%s: %g/s burst %d; want %g/s burst %d", tc.name, sb.RequestsPerSecond, sb.Burst, tc.rps, tc.burst)
		}
	}
	_, err := Parse("x.yaml", []byte("limits: {requests_per_second: 1, burst: -1}\n"))
	if err == nil || !strings.Contains(err.Error(), "limits.burst") {
		t.Errorf("negative burst: %v; want an error naming limits.burst", err)
	}
	_, err = Parse("x.yaml", []byte("limits: {max_connections: -2}\n"))
	if err == nil || !strings.Contains(err.Error(), "limits.max_connections") {
		t.Errorf("negative max_connections: %v; want an error naming limits.max_connections", err)
	}
}

func TestByteLimitsParseInheritAndCheck(t *testing.T) {
	c := mustParse(t, lines(
		"limits: {max_header_bytes: 32KiB, max_request_body: 10MB, max_bytes_sent: 1073741824, bytes_window: 10m}",
		"policies: {default: {allow: [{host: a.example}]}}",
		"sandboxes:",
		"  - name: small",
		"    policy: default",
		`    limits: {max_header_bytes: 8KiB, max_request_body: "1.5 KiB", max_bytes_received: 2GiB, bytes_window: 1m}`,
	))
	def, _ := c.Sandbox(DefaultSandbox)
	small, _ := c.Sandbox("small")
	for _, tc := range []struct {
		name      string
		got, want int64
	}{
		{"default max_header_bytes", def.MaxHeaderBytes, 32 << 10},
		{"default max_request_body", def.MaxRequestBody, 10_000_000},
		{"default max_bytes_sent", def.MaxBytesSent, 1 << 30},
		{"default max_bytes_received", def.MaxBytesReceived, 0},
		{"default bytes_window", int64(def.BytesWindow), int64(10 * time.Minute)},
		{"small max_header_bytes", small.MaxHeaderBytes, 8 << 10},
		{"small max_request_body", small.MaxRequestBody, 1536},
		{"small max_bytes_sent (inherited)", small.MaxBytesSent, 1 << 30},
		{"small max_bytes_received", small.MaxBytesReceived, 2 << 30},
		{"small bytes_window", int64(small.BytesWindow), int64(time.Minute)},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if d := mustParse(t, "policies: {default: {}}\n"); d.Limits.MaxHeaderBytes != DefaultMaxHeaderBytes || d.Limits.BytesWindow != DefaultBytesWindow {
		t.Errorf("defaults: max_header_bytes %v, bytes_window %v; want 64 KiB and 1h", d.Limits.MaxHeaderBytes, d.Limits.BytesWindow)
	}

	for _, tc := range []struct{ yaml, want string }{
		{"limits: {max_request_body: -1}", "x.yaml:1:28: limits.max_request_body: expected a size in bytes"},
		{"limits: {max_request_body: ten}", "limits.max_request_body: expected a size such as 65536, 64KiB or 10MB"},
		{"limits: {max_bytes_sent: [1]}", "limits.max_bytes_sent: expected a size"},
		{"limits: {max_header_bytes: 100}", "limits.max_header_bytes: 100 B: give a size from 1KiB to 1.0 MiB"},
		{"limits: {max_header_bytes: 2MiB}", "limits.max_header_bytes: 2.0 MiB: give a size from 1KiB"},
		{lines("policies: {default: {}}", "sandboxes:", "  - name: big", "    policy: default", "    limits: {max_header_bytes: 128KiB}"),
			"sandboxes[0].limits.max_header_bytes: 128 KiB is above the listener's cap, the top-level limits.max_header_bytes (64 KiB)"},
	} {
		_, err := Parse("x.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}

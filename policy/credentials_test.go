package policy

import (
	"testing"
	"time"
)

// credConfig is a valid configuration with one credential bound to
// api.github.com and *.example.com, and a rule using it; extra lines go
// under credentials.github.
func credConfig(extra ...string) string {
	return lines(append([]string{
		"policies:",
		"  default:",
		"    allow:",
		"      - host: api.github.com",
		"        credential: github",
		"credentials:",
		"  github:",
		"    hosts: [api.github.com, \"*.example.com\"]",
	}, extra...)...)
}

func TestCredentialDefaultsAndDecision(t *testing.T) {
	c := mustParse(t, credConfig("    source: {command: [gh, auth, token]}"))
	cr := c.Credentials["github"]
	if cr.Inject.Header != "Authorization" || cr.Inject.Format != "Bearer {token}" ||
		cr.Source.TTL != 5*time.Minute || cr.Source.Timeout != 10*time.Second {
		t.Errorf("defaults: %+v %+v", cr.Inject, cr.Source)
	}
	if !c.NeedsInterception() {
		t.Error("a credential rule needs interception")
	}
	sb, _ := c.Sandbox(DefaultSandbox)
	h := mustHost(t, "api.github.com")
	if d := c.Decide(sb, h, 443); !d.Allow || !d.Inspect || d.Credential != "" {
		t.Errorf("host-level decision: %+v (want allow, inspect, no credential yet)", d)
	}
	if d := c.DecideRequest(sb, h, 443, "GET", "/user"); !d.Allow || d.Credential != "github" {
		t.Errorf("request-level decision: %+v, want credential github", d)
	}
}

func TestCredentialErrors(t *testing.T) {
	checkParseErrors(t, []parseErrorCase{
		{"no source", credConfig(), []wantErr{{8, 5, "credentials.github.source", "exactly one of env, file, command, jwt, oauth2 or github_app"}}},
		{"two sources", credConfig("    source: {env: T, file: t.txt}"), []wantErr{{9, 13, "credentials.github.source", "exactly one of env, file, command, jwt, oauth2 or github_app"}}},
		{"a jwt minter without a key", credConfig("    source: {jwt: {}}"), []wantErr{{9, 13, "credentials.github.source.jwt.key", "signing key as exactly one of env or file"}}},
		{"a jwt minter with a bad algorithm and ttl", credConfig("    source: {jwt: {algorithm: none, key: {env: K}, ttl: 24h}}"), []wantErr{
			{9, 19, "credentials.github.source.jwt.algorithm", "expected ES256, RS256, EdDSA or HS256"},
			{9, 19, "credentials.github.source.jwt.ttl", "from 1m to 1h"}}},
		{"an oauth2 minter over plain http", credConfig("    source: {oauth2: {token_url: \"http://auth.test/token\", client_id: a, client_secret: {env: S}}}"), []wantErr{
			{9, 22, "credentials.github.source.oauth2.token_url", "https://"}}},
		{"a github_app minter with an owner in a repository and a bad permission", credConfig(
			"    source:",
			"      github_app: {app_id: \"1\", installation_id: 2, private_key: {file: k.pem}, repositories: [acme/repo], permissions: {contents: all}}"), []wantErr{
			{10, 19, "credentials.github.source.github_app.repositories[0]", "without the owner"},
			{10, 19, "credentials.github.source.github_app.permissions.contents", "expected read, write or admin"}}},
		{"ttl on an env source", credConfig("    source: {env: T, ttl: 1m}"), []wantErr{{9, 13, "credentials.github.source", "command sources only"}}},
		{"reserved header", credConfig("    source: {env: T}", "    inject: {header: Host}"), []wantErr{{10, 13, "credentials.github.inject.header", "managed by HTTP"}}},
		{"format without token", credConfig("    source: {env: T}", "    inject: {format: Bearer}"), []wantErr{{10, 13, "credentials.github.inject.format", "{token} exactly once"}}},
		{"short placeholder", credConfig("    source: {env: T}", "    placeholder: short"), []wantErr{{8, 5, "credentials.github.placeholder", "at least 16"}}},
		{"a rule for a host the credential is not bound to", lines(
			"policies:", "  default:", "    allow:", "      - host: evil.test", "        credential: github",
			"credentials:", "  github:", "    source: {env: T}", "    hosts: [api.github.com]"),
			[]wantErr{{4, 9, "policies.default.allow[0].credential", `not bound to evil.test`}}},
		{"a wildcard rule wider than the binding", lines(
			"policies:", "  default:", "    allow:", "      - host: \"*.github.com\"", "        credential: github",
			"credentials:", "  github:", "    source: {env: T}", "    hosts: [api.github.com]"),
			[]wantErr{{4, 9, "policies.default.allow[0].credential", `not bound to *.github.com`}}},
		{"a credential on a deny rule", lines(
			"policies:", "  default:", "    deny:", "      - host: api.github.com", "        credential: github",
			"credentials:", "  github:", "    source: {env: T}", "    hosts: [api.github.com]"),
			[]wantErr{{4, 9, "policies.default.deny[0].credential", "only allow rules"}}},
		{"no hosts", lines("credentials:", "  github:", "    source: {env: T}"), []wantErr{{3, 5, "credentials.github.hosts", "list the hosts"}}},
	})
}

func TestHostPatternCoversAndMatches(t *testing.T) {
	pat := func(s string) HostPattern {
		h, w, err := ParseHostPattern(s)
		if err != nil {
			t.Fatal(err)
		}
		return HostPattern{Host: h, Wildcard: w}
	}
	cases := []struct {
		p, q string
		want bool
	}{
		{"api.github.com", "api.github.com", true},
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "*.a.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "*.example.com", true},
		{"api.github.com", "*.github.com", false},
		{"*.amazonaws.com", "bucket.s3.amazonaws.com", false},
		{"10.1.2.3", "10.1.2.3", true},
		{"*.example.com", "10.1.2.3", false},
	}
	for _, tc := range cases {
		if got := pat(tc.p).Covers(pat(tc.q)); got != tc.want {
			t.Errorf("%s covers %s = %v, want %v", tc.p, tc.q, got, tc.want)
		}
	}
	if !pat("*.example.com").Matches(mustHost(t, "a.b.example.com")) || pat("*.example.com").Matches(mustHost(t, "example.com")) {
		t.Error("Matches disagrees with rule semantics")
	}
}

package audit

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/policy"
)

func policyParse(b []byte) (*policy.Config, error) { return policy.Parse("suggested.yaml", b) }

func suggest(t *testing.T, opts SuggestOptions, recs []Record) (string, *policy.Config) {
	t.Helper()
	z := NewSuggester(opts)
	for i := range recs {
		z.Add(&recs[i])
	}
	var b bytes.Buffer
	if err := z.WriteYAML(&b); err != nil {
		t.Fatal(err)
	}
	cfg, err := policyParse(b.Bytes())
	if err != nil {
		t.Fatalf("the suggestion does not parse: %v\n%s", err, b.String())
	}
	return b.String(), cfg
}

func decide(t *testing.T, cfg *policy.Config, sandbox, host string, port uint16) bool {
	t.Helper()
	sb, ok := cfg.Sandbox(sandbox)
	if !ok {
		t.Fatalf("no sandbox %s in the suggestion", sandbox)
	}
	h, _, err := policy.ParseHostPattern(host) // takes IPv6 without brackets, as logs write it
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Decide(sb, h, port).Allow
}

func TestSuggestionFromARecordedLog(t *testing.T) {
	data, err := os.ReadFile("testdata/recorded.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	Read(bytes.NewReader(data), "recorded.jsonl", func(r *Record) { recs = append(recs, *r) })
	out, cfg := suggest(t, SuggestOptions{}, recs)

	for _, c := range []struct {
		sandbox, host string
		port          uint16
		allow         bool
		why           string
	}{
		{"default", "deb.debian.org", 80, true, "allowed in the log"},
		{"default", "proxy.golang.org", 443, true, "a tunnel in the log"},
		{"default", "deb.debian.org", 443, false, "only port 80 was seen"},
		{"default", "pastebin.com", 443, false, "only ever refused"},
		{"default", "169.254.169.254", 80, false, "an internal address"},
		{"default", "api.github.com", 443, false, "a placeholder was caught going there"},
		{"default", "example.com", 80, false, "another sandbox's host"},
		{"agent-1", "example.com", 80, true, "would_deny in report mode, then allowed"},
	} {
		if got := decide(t, cfg, c.sandbox, c.host, c.port); got != c.allow {
			t.Errorf("%s %s:%d: allow=%v, want %v (%s)\n%s", c.sandbox, c.host, c.port, got, c.allow, c.why, out)
		}
	}
	for _, want := range []string{
		"# 2 requests, 0 tunnels; first 2026-11-29T21:59:47Z, last 2026-11-29T21:59:48Z\n      - host: deb.debian.org\n        ports: [80]",
		"left out (placeholder_exfiltration): api.github.com:443",
		"(1 would_deny)",
		"  - name: agent-1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("suggestion lacks %q:\n%s", want, out)
		}
	}
}

func rec(sandbox, decision, reason, host string, port uint16, at int) Record {
	return Record{Time: time.Date(2026, 11, 29, 10, 0, at, 0, time.UTC), Event: KindTunnel, Sandbox: sandbox,
		Decision: decision, Reason: reason, Host: host, Port: port}
}

func TestSuggestFoldsOnlyWhereSafe(t *testing.T) {
	var recs []Record
	for i := range 6 {
		recs = append(recs,
			rec("default", "allow", "allowed", fmt.Sprintf("n%d.cdn.example", i), 443, i),
			rec("default", "allow", "allowed", fmt.Sprintf("b%d.s3.amazonaws.com", i), 443, i), // s3.amazonaws.com is a public suffix
			rec("default", "allow", "allowed", fmt.Sprintf("x%d.mixed.example", i), 443, i),
			rec("default", "allow", "allowed", fmt.Sprintf("f%d.few.example", i%3), 443, i))
	}
	recs = append(recs,
		rec("default", "deny", "host_not_allowed", "evil.mixed.example", 443, 9), // refused under mixed.example: no wildcard
		rec("default", "allow", "allowed", "cdn.example", 443, 9))
	out, cfg := suggest(t, SuggestOptions{}, recs)
	for _, c := range []struct {
		host  string
		allow bool
	}{
		{"n0.cdn.example", true}, {"new.cdn.example", true}, // folded into *.cdn.example
		{"cdn.example", true}, // the apex, seen on its own
		{"b0.s3.amazonaws.com", true}, {"other-bucket.s3.amazonaws.com", false},
		{"x0.mixed.example", true}, {"evil.mixed.example", false}, {"new.mixed.example", false},
		{"f0.few.example", true}, {"f5.few.example", false}, // 3 names: below the fold
	} {
		if got := decide(t, cfg, "default", c.host, 443); got != c.allow {
			t.Errorf("%s: allow=%v, want %v\n%s", c.host, got, c.allow, out)
		}
	}
	if !strings.Contains(out, "# 6 names: n0.cdn.example, n1.cdn.example, n2.cdn.example, n3.cdn.example, n4.cdn.example, and 1 more") {
		t.Errorf("the wildcard's comment does not list its names:\n%s", out)
	}
	if noFold, cfg := suggest(t, SuggestOptions{FoldMin: -1}, recs); strings.Contains(noFold, "*.") || decide(t, cfg, "default", "new.cdn.example", 443) {
		t.Errorf("--fold-min -1 folded:\n%s", noFold)
	}
}

func TestSuggestLeavesOutInternalAndTaintedHosts(t *testing.T) {
	out, cfg := suggest(t, SuggestOptions{}, []Record{
		rec("default", "allow", "allowed", "10.1.2.3", 443, 1), // allowed through allow_cidrs, still internal
		rec("default", "allow", "allowed", "localhost", 80, 2),
		rec("default", "allow", "allowed", "203.0.113.9", 443, 3), // documentation range: special-purpose
		rec("default", "allow", "allowed", "rebind.example", 443, 4),
		rec("default", "deny", "address_blocked", "rebind.example", 443, 5),
		rec("default", "would_deny", "host_not_allowed", "fronted.example", 443, 6),
		rec("default", "deny", "authority_mismatch", "fronted.example", 443, 7),
		rec("default", "allow", "allowed", "Not Canonical", 443, 8),
		rec("default", "allow", "allowed", "8.8.8.8", 53, 9),
	})
	for _, h := range []struct {
		host string
		port uint16
	}{{"10.1.2.3", 443}, {"localhost", 80}, {"203.0.113.9", 443}, {"rebind.example", 443}, {"fronted.example", 443}} {
		if decide(t, cfg, "default", h.host, h.port) {
			t.Errorf("%s:%d is suggested:\n%s", h.host, h.port, out)
		}
	}
	if !decide(t, cfg, "default", "8.8.8.8", 53) {
		t.Errorf("a public IP literal that was reached is not suggested:\n%s", out)
	}
	for _, want := range []string{"left out (address_blocked): rebind.example:443", "left out (authority_mismatch): fronted.example:443", "left out (internal"} {
		if !strings.Contains(out, want) {
			t.Errorf("no note %q:\n%s", want, out)
		}
	}
}

// The same logs in any order give the same file.
func TestSuggestIsDeterministic(t *testing.T) {
	var recs []Record
	for i := range 40 {
		recs = append(recs, rec(fmt.Sprintf("s%d", i%3), "allow", "allowed", fmt.Sprintf("h%d.d%d.example", i, i%4), uint16(443+i%2), i%60))
	}
	first, _ := suggest(t, SuggestOptions{}, recs)
	for range 5 {
		rand.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
		if again, _ := suggest(t, SuggestOptions{}, recs); again != first {
			t.Fatalf("shuffled input, different output:\n%s\n---\n%s", first, again)
		}
	}
}

// What an attack on suggest found: each of these must stay out.
func TestSuggestLeavesOutDeniedTaintedAndInternalNames(t *testing.T) {
	dns := func(name, alert string, at int) Record {
		return Record{Time: time.Date(2026, 11, 29, 10, 0, at, 0, time.UTC), Event: KindDNS, Sandbox: "default",
			Decision: "deny", Reason: "domain_quota", QName: name, Alert: alert}
	}
	recs := []Record{
		// A deny rule, let through by report mode.
		rec("default", "would_deny", "denied_by_rule", "secret.example", 443, 1),
		// A rebinding host refused on one port, reached on another.
		rec("default", "deny", "address_blocked", "rebind.example", 443, 2),
		rec("default", "allow", "allowed", "rebind.example", 80, 3),
		// A DNS alert under a domain, and names reached under it.
		dns("mzxw6ytboi.attacker.example", "dns_exfiltration", 4),
		rec("default", "allow", "allowed", "mzxw6ytboi.attacker.example", 443, 5),
		// Names that exist only inside networks.
		rec("default", "allow", "allowed", "metadata", 80, 6),
		rec("default", "allow", "allowed", "metadata.google.internal", 80, 7),
		rec("default", "allow", "allowed", "printer.lan", 80, 8),
		rec("default", "allow", "allowed", "router.home.arpa", 80, 9),
		// An IPv6 literal, as Airlock logs it (no brackets): suggested.
		rec("default", "allow", "allowed", "2606:4700::6810:84e5", 443, 10),
		// Sandboxes a policy cannot be named after.
		rec("Agent.1", "allow", "allowed", "ok.example", 443, 11),
		rec("-x", "allow", "allowed", "ok.example", 443, 12),
	}
	for i := range 6 {
		recs = append(recs, rec("default", "would_deny", "host_not_allowed", fmt.Sprintf("n%d.attacker.example", i), 443, 20+i))
	}
	out, cfg := suggest(t, SuggestOptions{}, recs)
	for _, h := range []struct {
		host string
		port uint16
	}{
		{"secret.example", 443}, {"rebind.example", 80}, {"mzxw6ytboi.attacker.example", 443}, {"other.attacker.example", 443},
		{"metadata", 80}, {"metadata.google.internal", 80}, {"printer.lan", 80}, {"router.home.arpa", 80},
	} {
		if decide(t, cfg, "default", h.host, h.port) {
			t.Errorf("%s:%d is suggested:\n%s", h.host, h.port, out)
		}
	}
	if !decide(t, cfg, "default", "2606:4700::6810:84e5", 443) {
		t.Errorf("an IPv6 literal that was reached is not suggested:\n%s", out)
	}
	for _, want := range []string{"left out (denied_by_rule): secret.example:443", "left out (address_blocked): rebind.example:80",
		"left out (dns_exfiltration): mzxw6ytboi.attacker.example:443", "left out (internal name)", "names cannot name a policy: Agent.1, -x"} {
		if !strings.Contains(out, want) {
			t.Errorf("no note %q:\n%s", want, out)
		}
	}
}

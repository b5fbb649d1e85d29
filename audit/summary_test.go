package audit

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

func summarize(t *testing.T, opts SummaryOptions) Summary {
	t.Helper()
	f, err := os.Open("testdata/recorded.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z := NewSummarizer(opts)
	st, err := Read(f, "recorded.jsonl", z.Add)
	if err != nil {
		t.Fatal(err)
	}
	z.Stats(st)
	return z.Summary()
}

// The recorded log has known answers: this test spells them out.
func TestSummaryOfARecordedLog(t *testing.T) {
	s := summarize(t, SummaryOptions{})
	if s.Lines != 16 || s.Malformed != 3 {
		t.Errorf("lines %d, malformed %d; want 16 (blank lines aside) and 3", s.Lines, s.Malformed)
	}
	if len(s.Examples) != 3 || !strings.HasPrefix(s.Examples[0], "recorded.jsonl:6: ") {
		t.Errorf("malformed examples %q; want 3, the first at line 6", s.Examples)
	}
	if want := time.Date(2026, 11, 29, 21, 59, 47, 0, time.UTC); !s.From.Equal(want) {
		t.Errorf("from %v, want %v", s.From, want)
	}
	if len(s.Sandboxes) != 2 || s.Sandboxes[0].Sandbox != "agent-1" || s.Sandboxes[1].Sandbox != "default" {
		t.Fatalf("sandboxes %+v; want agent-1 and default, sorted", s.Sandboxes)
	}
	a1, def := s.Sandboxes[0], s.Sandboxes[1]

	if def.Requests != 5 || def.Tunnels != 2 || def.DNSQueries != 3 {
		t.Errorf("default: %d requests, %d tunnels, %d DNS; want 5, 2, 3", def.Requests, def.Tunnels, def.DNSQueries)
	}
	if len(def.Hosts) != 3 {
		t.Fatalf("default hosts %+v; want deb.debian.org, api.github.com, proxy.golang.org", def.Hosts)
	}
	deb := def.Hosts[0]
	if deb.Host != "deb.debian.org" || deb.Port != 80 || deb.Requests != 2 || deb.BytesReceived != 5220 ||
		deb.Status["2xx"] != 1 || deb.Status["4xx"] != 1 {
		t.Errorf("busiest host %+v; want deb.debian.org:80, 2 requests, 5220 bytes, one 2xx and one 4xx", deb)
	}
	if def.Hosts[1].Host != "api.github.com" || def.Hosts[2].Host != "proxy.golang.org" || def.Hosts[2].BytesSent != 777 {
		t.Errorf("hosts %+v; ties sorted by name", def.Hosts)
	}
	wantCounts(t, "default denials", def.Denials, []Count{
		{Key: "address_blocked", Host: "169.254.169.254", Port: 80, Count: 1},
		{Key: "credential_host_mismatch", Host: "api.github.com", Port: 443, Count: 1},
		{Key: "host_not_allowed", Host: "pastebin.com", Port: 443, Count: 1},
	})
	wantCounts(t, "default credentials", def.Credentials, []Count{{Key: "github", Count: 1}})
	wantCounts(t, "default DNS refusals", def.DNSRefusals, []Count{
		{Key: "domain_quota", Host: "x1.allowed-cdn.test", Count: 1},
		{Key: "host_not_allowed", Host: "aGVsbG8.evil.test", Count: 1},
	})
	wantCounts(t, "default alerts", def.Alerts, []Count{
		{Key: "dns_exfiltration", Host: "x1.allowed-cdn.test", Count: 1},
		{Key: "placeholder_exfiltration", Host: "api.github.com", Count: 1},
	})

	if len(a1.Hosts) != 1 || a1.Hosts[0].Requests != 2 || a1.Hosts[0].WouldDeny != 1 {
		t.Errorf("agent-1 hosts %+v; want example.com:80 with 2 requests, 1 would_deny", a1.Hosts)
	}
	wantCounts(t, "agent-1 would_deny", a1.WouldDeny, []Count{{Key: "host_not_allowed", Host: "example.com", Port: 80, Count: 1}})
	wantCounts(t, "agent-1 limits", a1.Limits, []Count{{Key: "requests_per_second", Count: 1}})
}

func wantCounts(t *testing.T, what string, got, want []Count) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func TestSummaryFilters(t *testing.T) {
	s := summarize(t, SummaryOptions{Sandboxes: []string{"agent-1"}})
	if len(s.Sandboxes) != 1 || s.Sandboxes[0].Sandbox != "agent-1" {
		t.Errorf("--sandbox agent-1: %+v", s.Sandboxes)
	}
	s = summarize(t, SummaryOptions{Since: time.Date(2026, 11, 29, 21, 59, 57, 0, time.UTC)})
	if len(s.Sandboxes) != 1 || s.Sandboxes[0].Requests != 3 {
		t.Errorf("--since 21:59:57: %+v; want agent-1's 3 requests only", s.Sandboxes)
	}
}

func TestSummaryFormats(t *testing.T) {
	s := summarize(t, SummaryOptions{})
	for format, want := range map[string][]string{
		FormatTable:    {"SANDBOX default", "deb.debian.org    80    2         0", "5.1 KiB", "credential_host_mismatch  api.github.com:443", "malformed: recorded.jsonl:6:"},
		FormatMarkdown: {"## Sandbox default", "| `deb.debian.org` | 80 | 2 | 0 | 0 B | 5.1 KiB | 1 | 0 | 1 | 0 | 0 |", "### Alerts"},
		FormatJSON:     {`"bytes_received": 5220`, `"sandbox": "agent-1"`},
	} {
		var b bytes.Buffer
		if err := WriteSummary(&b, s, format); err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s output lacks %q:\n%s", format, w, b.String())
			}
		}
	}
	if err := WriteSummary(&bytes.Buffer{}, s, "yaml"); err == nil || !strings.Contains(err.Error(), "table, json or markdown") {
		t.Errorf("unknown format: %v", err)
	}
}

// A log of random names folds past MaxKeys into "(other)" instead of
// growing without bound.
func TestSummaryTablesAreBounded(t *testing.T) {
	z := NewSummarizer(SummaryOptions{})
	r := Record{Time: time.Now(), Event: KindDNS, Sandbox: "a", Decision: "deny", Reason: "host_not_allowed"}
	for i := range MaxKeys + 10 {
		r.QName = "n" + string(rune('a'+i%26)) + strings.Repeat("x", i%7) + "." + itoa(i) + ".evil.test"
		z.Add(&r)
	}
	s := z.Summary()
	refusals := s.Sandboxes[0].DNSRefusals
	// The sandbox is one key; the names fill the rest, and the 11 past the
	// cap are counted under (other).
	if len(refusals) != MaxKeys || refusals[0].Host != OtherHost || refusals[0].Count != 11 {
		t.Errorf("%d rows, first %+v; want %d rows with the 11 past the cap under %s", len(refusals), refusals[0], MaxKeys, OtherHost)
	}
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

// A name a sandbox chose is text in Markdown, never a link or markup.
func TestMarkdownCellsCannotCarryMarkup(t *testing.T) {
	z := NewSummarizer(SummaryOptions{})
	z.Add(&Record{Time: time.Now(), Event: KindDNS, Sandbox: "a", Decision: "deny", Reason: "host_not_allowed",
		QName: "<https://evil.example/approve>|**urgent**`x`"})
	var b bytes.Buffer
	WriteSummary(&b, z.Summary(), FormatMarkdown)
	if !strings.Contains(b.String(), "| `<https://evil.example/approve>¦**urgent**'x'` | 1 |") {
		t.Errorf("the hostile name is not a plain code span:\n%s", b.String())
	}
}

// An intercepted tunnel's bytes are counted once: from its tunnel line,
// not again from the requests inside it.
func TestInterceptedBytesAreCountedOnce(t *testing.T) {
	z := NewSummarizer(SummaryOptions{})
	now := time.Now()
	z.Add(&Record{Time: now, Event: KindRequest, Sandbox: "a", Decision: "allow", Host: "h.example", Port: 443, Intercepted: true, BytesReceived: 1000, Status: 200})
	z.Add(&Record{Time: now, Event: KindTunnel, Sandbox: "a", Decision: "allow", Host: "h.example", Port: 443, Intercepted: true, BytesReceived: 1100, Status: 200})
	h := z.Summary().Sandboxes[0].Hosts[0]
	if h.BytesReceived != 1100 || h.Requests != 1 || h.Tunnels != 1 {
		t.Errorf("%+v; want 1100 bytes (the tunnel's), 1 request, 1 tunnel", h)
	}
}

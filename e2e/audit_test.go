package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil"
)

// Logs recorded by real Airlock runs (one in report mode, one enforcing,
// the second gzipped) are summarised and turned into a policy that
// `policy check` accepts and that, run through `policy test`, allows
// every host the logs show allowed and nothing they show refused.
func TestAuditSummaryAndSuggestOverRecordedLogs(t *testing.T) {
	t.Parallel()
	up := testutil.NewUpstream(t)
	ca := testutil.NewCA(t)
	tlsUp := testutil.NewTLSUpstream(t, ca, "allowed.test")
	dir := t.TempDir()

	report := testutil.StartProxy(t, "mode: report\n"+localConfig(up.Port(), tlsUp.Port()))
	c := httpClient(report.URL(), ca.Pool())
	get(t, c, fmt.Sprintf("http://allowed.test:%d/", up.Port()))
	get(t, c, fmt.Sprintf("http://other.allowed.test:%d/", up.Port())) // a port localConfig allows: allowed
	get(t, c, fmt.Sprintf("http://internal.test:%d/", up.Port()))      // not listed: would_deny
	get(t, c, "http://169.254.169.254/latest/meta-data/")              // address_blocked even in report mode
	get(t, c, fmt.Sprintf("https://allowed.test:%d/", tlsUp.Port()))   // a tunnel
	report.StopAndFlush(t)
	a := filepath.Join(dir, "report.jsonl")
	os.WriteFile(a, []byte(strings.Join(report.AuditLines(), "\n")+"\nthis line is not JSON\n"), 0o644)

	enforce := testutil.StartProxy(t, localConfig(up.Port()))
	c = httpClient(enforce.URL(), nil)
	get(t, c, fmt.Sprintf("http://allowed.test:%d/bytes?n=1000", up.Port()))
	get(t, c, fmt.Sprintf("http://denied.test:%d/", up.Port())) // host_not_allowed
	enforce.StopAndFlush(t)
	b := filepath.Join(dir, "enforce.jsonl.gz")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(strings.Join(enforce.AuditLines(), "\n") + "\n"))
	zw.Close()
	os.WriteFile(b, gz.Bytes(), 0o644)

	bin := testutil.Binary(t)
	out, err := exec.Command(bin, "audit", "summary", "--format", "json", a, b).Output()
	if err != nil {
		t.Fatalf("audit summary: %v", err)
	}
	var sum struct {
		Lines, Malformed int64
		Sandboxes        []struct {
			Sandbox string
			Hosts   []struct {
				Host              string
				Port              int
				Requests, Tunnels int64
				WouldDeny         int64 `json:"would_deny"`
				BytesReceived     int64 `json:"bytes_received"`
			}
			Denials []struct {
				Key, Host string
				Count     int64
			}
		}
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatalf("summary JSON: %v\n%s", err, out)
	}
	if sum.Lines != 8 || sum.Malformed != 1 || len(sum.Sandboxes) != 1 {
		t.Fatalf("summary: %d lines, %d malformed, %d sandboxes; want 8, 1, 1:\n%s", sum.Lines, sum.Malformed, len(sum.Sandboxes), out)
	}
	hosts := map[string]string{}
	for _, h := range sum.Sandboxes[0].Hosts {
		hosts[fmt.Sprintf("%s:%d", h.Host, h.Port)] = fmt.Sprintf("%d/%d/%d/%d", h.Requests, h.Tunnels, h.WouldDeny, h.BytesReceived)
	}
	want := map[string]string{
		fmt.Sprintf("allowed.test:%d", up.Port()):       "2/0/0/1020",
		fmt.Sprintf("other.allowed.test:%d", up.Port()): "1/0/0/20",
		fmt.Sprintf("internal.test:%d", up.Port()):      "1/0/1/20",
		fmt.Sprintf("allowed.test:%d", tlsUp.Port()):    "0/1/0/",
	}
	for k, v := range want {
		got, ok := hosts[k]
		if !ok || (strings.HasSuffix(v, "/") && !strings.HasPrefix(got, v)) || (!strings.HasSuffix(v, "/") && got != v) {
			t.Errorf("host %s: %q, want %q (requests/tunnels/would_deny/bytes received)\n%s", k, got, v, out)
		}
	}
	denied := map[string]bool{}
	for _, d := range sum.Sandboxes[0].Denials {
		denied[d.Key+" "+d.Host] = true
	}
	if !denied["address_blocked 169.254.169.254"] || !denied["host_not_allowed denied.test"] || len(denied) != 2 {
		t.Errorf("denials %v; want address_blocked 169.254.169.254 and host_not_allowed denied.test", denied)
	}

	suggested, err := exec.Command(bin, "audit", "suggest", a, b).Output()
	if err != nil {
		t.Fatalf("audit suggest: %v", err)
	}
	// policy test resolves allowed names: point it at a stub that knows
	// none, so no query leaves loopback.
	stub := testutil.NewDNSStub(t, nil)
	pfile := filepath.Join(dir, "suggested.yaml")
	os.WriteFile(pfile, append(suggested, fmt.Sprintf("network:\n  resolvers: [%q]\n", stub.Addr.String())...), 0o644)
	if out, err := execOutput(bin, "policy", "check", pfile); err != nil {
		t.Fatalf("policy check of the suggestion: %v\n%s\n%s", err, out, suggested)
	}
	for target, allow := range map[string]bool{
		fmt.Sprintf("allowed.test:%d", up.Port()):       true,
		fmt.Sprintf("other.allowed.test:%d", up.Port()): true,
		fmt.Sprintf("internal.test:%d", up.Port()):      true, // would_deny: reached in report mode
		fmt.Sprintf("allowed.test:%d", tlsUp.Port()):    true,
		"169.254.169.254:80":                            false,
		fmt.Sprintf("denied.test:%d", up.Port()):        false,
		fmt.Sprintf("allowed.test:%d", up.Port()+1):     false,
	} {
		out, _ := execOutput(bin, "policy", "test", "--config", pfile, target)
		if got := strings.Contains(out, "decision: allow"); got != allow {
			t.Errorf("policy test %s: allow=%v, want %v\n%s\nsuggestion:\n%s", target, got, allow, out, suggested)
		}
	}
}

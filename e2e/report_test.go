package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testutil"
)

// Report mode (here for one sandbox): what the allowlist would refuse goes
// through and is logged as would_deny; internal addresses and the TLS
// authority check are still enforced.
func TestReportModeAllowsAndLogsButStillBlocksMetadata(t *testing.T) {
	ca := testutil.NewCA(t)
	tlsUp := testutil.NewTLSUpstream(t, ca, "allowed.test")
	up := testutil.NewUpstream(t)
	p := testutil.StartProxy(t, fmt.Sprintf(`
network:
  allow_cidrs: [127.0.0.1/32]
  hosts: {unlisted.test: 127.0.0.1, allowed.test: 127.0.0.1}
policies:
  default:
    allow:
      - host: allowed.test
        ports: [%d]
sandboxes:
  - name: trial
    policy: default
    mode: report
    clients: [127.0.0.1/32]
`, tlsUp.Port()))
	c := httpClient(p.URL(), nil)

	resp, body := get(t, c, fmt.Sprintf("http://unlisted.test:%d/", up.Port()))
	if resp.StatusCode != 200 || body != "hello from upstream\n" {
		t.Fatalf("report mode, unlisted host: %d %q", resp.StatusCode, body)
	}
	resp, _ = get(t, c, "http://169.254.169.254/latest/meta-data/")
	if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") != "address_blocked" {
		t.Fatalf("report mode, metadata: %d %s", resp.StatusCode, resp.Header.Get("X-Airlock-Decision"))
	}
	// An opaque tunnel to a host the allowlist refuses, on an unlisted port.
	tlsUp2 := testutil.NewTLSUpstream(t, ca, "allowed.test")
	_, tc := tlsTunnel(t, p, tlsUp2.Port(), ca.Pool(), "allowed.test")
	if err := tc.Handshake(); err != nil {
		t.Fatalf("report mode, CONNECT on an unlisted port: %v", err)
	}
	tc.Close()
	// The SNI check is not the allowlist: still enforced.
	_, bad := tlsTunnel(t, p, tlsUp2.Port(), ca.Pool(), "exfil.attacker.example")
	if err := bad.Handshake(); err == nil {
		t.Fatal("report mode let a mismatched SNI through")
	}

	var would, blocked int
	for _, ev := range p.WaitAudit(t, 3) {
		switch {
		case ev["decision"] == "would_deny":
			would++
			if ev["sandbox"] != "trial" {
				t.Errorf("would_deny for sandbox %v", ev["sandbox"])
			}
		case ev["reason"] == "address_blocked":
			blocked++
		}
	}
	if would < 2 || blocked != 1 {
		t.Errorf("would_deny lines %d (want the request and the tunnel), address_blocked %d:\n%s", would, blocked, strings.Join(p.AuditLines(), "\n"))
	}
}

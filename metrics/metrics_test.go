package metrics

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlockhq/airlock/audit"
)

func TestMetricsCountEventsReloadsAndMints(t *testing.T) {
	m := New()
	m.Observe(&audit.Event{Kind: audit.KindRequest, Decision: "deny", Reason: "host_not_allowed", Sandbox: "a"})
	m.Observe(&audit.Event{Kind: audit.KindTunnel, Decision: "allow", Reason: "allowed", Sandbox: "a", BytesSent: 10, BytesReceived: 90})
	m.Observe(&audit.Event{Kind: audit.KindRequest, Decision: "deny", Reason: "credential_host_mismatch", Sandbox: "a", Alert: "placeholder_exfiltration"})
	m.Observe(&audit.Event{Kind: audit.KindRequest, Decision: "deny", Reason: "quota_exceeded", Sandbox: "a", Limit: "max_bytes_sent"})
	m.Observe(&audit.Event{Kind: audit.KindTunnel, Decision: "allow", Reason: "allowed", Sandbox: "a", CloseReason: "quota_exceeded", Limit: "max_bytes_sent"})
	m.Reload(nil)
	m.Reload(errors.New("bad file"))
	m.Mint("gh", 20*time.Millisecond, nil)
	m.Mint("gh", time.Second, errors.New("401"))
	for _, c := range []struct {
		got, want float64
		what      string
	}{
		{testutil.ToFloat64(m.events.WithLabelValues("http.request", "deny", "host_not_allowed", "a")), 1, "denied request"},
		{testutil.ToFloat64(m.bytes.WithLabelValues("received", "a")), 90, "bytes received"},
		{testutil.ToFloat64(m.alerts.WithLabelValues("placeholder_exfiltration", "a")), 1, "alert"},
		{testutil.ToFloat64(m.quotas.WithLabelValues("max_bytes_sent", "a")), 2, "byte quota refusal and cut-off tunnel"},
		{testutil.ToFloat64(m.reloads.WithLabelValues("failure")), 1, "failed reload"},
		{testutil.ToFloat64(m.mints.WithLabelValues("gh", "success")), 1, "mint"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if n, err := testutil.GatherAndCount(m.reg, "airlock_credential_mint_seconds"); err != nil || n != 1 {
		t.Errorf("mint histogram: %d series, %v", n, err)
	}
}

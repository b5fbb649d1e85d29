package e2e

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/airlockhq/airlock/internal/testutil"
)

// scrape fetches the admin listener's /metrics and parses it with the
// Prometheus text parser. The returned function sums the counters and
// gauges of one metric whose labels include labels; it fails the test if
// the metric is missing.
func scrape(t *testing.T, adminPort int) func(name string, labels map[string]string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", adminPort))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the metrics do not parse: %v", err)
	}
	return func(name string, labels map[string]string) float64 {
		t.Helper()
		f, ok := fams[name]
		if !ok {
			t.Fatalf("no metric %s", name)
		}
		total := 0.0
	next:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
		return total
	}
}

// The admin listener's /metrics, scraped and parsed with the Prometheus
// text parser, counts what the audit log records.
func TestMetricsAreScrapedAndParsed(t *testing.T) {
	up := testutil.NewUpstream(t)
	adminPort := freePort(t)
	p := testutil.StartProxy(t, fmt.Sprintf("listen:\n  admin: 127.0.0.1:%d\n", adminPort)+localConfig(up.Port()))
	c := httpClient(p.URL(), nil)
	get(t, c, fmt.Sprintf("http://allowed.test:%d/", up.Port()))
	get(t, c, fmt.Sprintf("http://unlisted.test:%d/", up.Port()))
	p.WaitAudit(t, 2)

	count := scrape(t, adminPort)
	if n := count("airlock_events_total", map[string]string{"event": "http.request", "decision": "allow", "sandbox": "default"}); n != 1 {
		t.Errorf("allowed requests: %v", n)
	}
	if n := count("airlock_events_total", map[string]string{"decision": "deny", "reason": "host_not_allowed"}); n != 1 {
		t.Errorf("denied requests: %v", n)
	}
	if n := count("airlock_bytes_total", map[string]string{"direction": "received"}); n != 20 {
		t.Errorf("bytes received: %v", n)
	}
	count("airlock_open_tunnels", nil)
	if count("go_goroutines", nil) == 0 {
		t.Error("no Go runtime metrics")
	}
}

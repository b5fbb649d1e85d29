// Package metrics exposes Airlock's Prometheus metrics on the admin
// listener: requests, tunnels and DNS queries by decision, reason and
// sandbox, bytes moved, limits hit, open tunnels, credential mints and their latency,
// and reloads by outcome. It derives most of them from audit events, so a
// metric never disagrees with the audit log; it never records hosts,
// paths or any request data as labels (their number is the sandbox's to
// choose).
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlockhq/airlock/audit"
)

// Metrics holds Airlock's collectors in a registry of their own.
type Metrics struct {
	reg      *prometheus.Registry
	events   *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	alerts   *prometheus.CounterVec
	quotas   *prometheus.CounterVec
	reloads  *prometheus.CounterVec
	mints    *prometheus.CounterVec
	mintTime *prometheus.HistogramVec
}

// New returns Metrics with every collector registered, the Go runtime and
// process collectors included.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_events_total",
			Help: "Audit events: HTTP requests, CONNECT tunnels and DNS queries, by decision (allow, deny, would_deny), reason and sandbox.",
		}, []string{"event", "decision", "reason", "sandbox"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_bytes_total",
			Help: "Bytes moved: plain-HTTP bodies and CONNECT tunnels (for intercepted tunnels, their TLS records), by direction (sent: client to upstream; received: upstream to client) and sandbox.",
		}, []string{"direction", "sandbox"}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_alerts_total",
			Help: "High-severity audit events (placeholder_exfiltration, dns_exfiltration), by alert and sandbox.",
		}, []string{"alert", "sandbox"}),
		quotas: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_quota_exceeded_total",
			Help: "Requests refused and transfers or tunnels cut off by a sandbox limit, by limit (the limits key: requests_per_second, max_connections, max_bytes_sent, max_bytes_received, max_request_body, max_header_bytes, idle_timeout, max_tunnel_lifetime) and sandbox.",
		}, []string{"limit", "sandbox"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_reloads_total",
			Help: "Configuration reloads, by outcome (success, failure).",
		}, []string{"outcome"}),
		mints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_credential_mints_total",
			Help: "Credential mints (token endpoint calls and JWT signings), by credential and outcome.",
		}, []string{"credential", "outcome"}),
		mintTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_credential_mint_seconds",
			Help:    "Time a credential mint took, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8), // 1 ms to 16 s
		}, []string{"credential"}),
	}
	m.reg.MustRegister(m.events, m.bytes, m.alerts, m.quotas, m.reloads, m.mints, m.mintTime,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Observe counts one audit event (give it to audit.Logger.OnEvent).
func (m *Metrics) Observe(e *audit.Event) {
	m.events.WithLabelValues(e.Kind, e.Decision, e.Reason, e.Sandbox).Inc()
	// A request inside an intercepted tunnel is counted in its tunnel's
	// bytes (TLS records): counting its body too would count it twice.
	if !(e.Intercepted && e.Kind == audit.KindRequest) {
		if e.BytesSent > 0 {
			m.bytes.WithLabelValues("sent", e.Sandbox).Add(float64(e.BytesSent))
		}
		if e.BytesReceived > 0 {
			m.bytes.WithLabelValues("received", e.Sandbox).Add(float64(e.BytesReceived))
		}
	}
	if e.Limit != "" {
		m.quotas.WithLabelValues(e.Limit, e.Sandbox).Inc()
	}
	if e.Alert != "" {
		m.alerts.WithLabelValues(e.Alert, e.Sandbox).Inc()
	}
}

// OpenTunnels exports f, the number of CONNECT tunnels open now, as the
// gauge airlock_open_tunnels.
func (m *Metrics) OpenTunnels(f func() int64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "airlock_open_tunnels",
		Help: "CONNECT tunnels open now (opaque and intercepted).",
	}, func() float64 { return float64(f()) }))
}

// Reload counts a reload attempt.
func (m *Metrics) Reload(err error) {
	outcome := "success"
	if err != nil {
		outcome = "failure"
	}
	m.reloads.WithLabelValues(outcome).Inc()
}

// Mint counts a credential mint that took d and failed with err (nil:
// succeeded).
func (m *Metrics) Mint(credential string, d time.Duration, err error) {
	outcome := "success"
	if err != nil {
		outcome = "failure"
	}
	m.mints.WithLabelValues(credential, outcome).Inc()
	m.mintTime.WithLabelValues(credential).Observe(d.Seconds())
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

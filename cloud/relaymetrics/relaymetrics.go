// Package relaymetrics exposes the relay's Prometheus metrics (agent
// connections and heartbeats, public API requests, webhook attempts and the
// outbox) on a registry of its own, served at /metrics. It reads the
// counters the relay's parts already keep at scrape time where it can (the
// agent endpoint's atomics and latency histogram, the webhook dispatcher's
// queue), so the hot paths pay next to nothing; the API middleware and the
// webhook dispatcher report through small observer interfaces whose label
// children are resolved once and cached. docs/metrics.md lists every metric.
package relaymetrics

import (
	"net/http"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every relay metric.
const Namespace = "fleet_relay"

// Path is where the metrics are served.
const Path = "/metrics"

// Metrics is the relay's metric registry with the collectors of its parts.
// Create it with New; attach the parts with WatchAgentLink and
// WatchWebhooks; pass Requests to the API and Webhooks to the dispatcher.
type Metrics struct {
	reg      *prometheus.Registry
	requests *Requests
	webhooks *Webhooks
}

// New returns the metrics with the Go runtime and process collectors, the
// build information, the API request metrics and the webhook attempt
// metrics registered.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg, requests: newRequests(), webhooks: newWebhooks()}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(),
	)
	m.requests.register(reg)
	m.webhooks.register(reg)
	return m
}

// Registry returns the registry, for extra collectors and for tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition formats. A
// collector that fails is reported in the response, not as a failed scrape
// of everything else.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}

// Requests returns the API request observer (api.Config.Requests).
func (m *Metrics) Requests() *Requests { return m.requests }

// Webhooks returns the webhook attempt observer (webhook.Config.Observer).
func (m *Metrics) Webhooks() *Webhooks { return m.webhooks }

// buildInfo is fleet_relay_build_info: 1, labelled with the module version,
// the VCS revision when the binary was built from a checkout, and the Go
// version.
func buildInfo() prometheus.Collector {
	version, revision := "(devel)", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; the labels tell which relay build runs: module version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

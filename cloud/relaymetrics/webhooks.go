package relaymetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleet/fleet/cloud/webhook"
)

// Outcomes of a webhook attempt (the outcome label).
const (
	OutcomeDelivered = "delivered" // a 2xx: the delivery ended
	OutcomeRetry     = "retry"     // a transient failure: it will be retried
	OutcomeFailed    = "failed"    // a status not retried, or a refused address: the delivery ended
	OutcomeExhausted = "exhausted" // the last retry failed: the delivery ended
)

var (
	webhookKinds    = [...]string{webhook.KindSignal, webhook.KindAlert}
	webhookOutcomes = [...]string{OutcomeDelivered, OutcomeRetry, OutcomeFailed, OutcomeExhausted}
)

// webhookBuckets are the bounds of the webhook latency histograms, in
// seconds: from a fast receiver on the same network to the retry schedule's
// minutes.
var webhookBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600}

// Webhooks counts webhook attempts by kind and outcome, with latency
// histograms. It satisfies webhook.Observer; its children are resolved at
// creation.
type Webhooks struct {
	attempts *prometheus.CounterVec
	dropped  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	latency  *prometheus.HistogramVec

	attemptsC [len(webhookKinds)][len(webhookOutcomes)]prometheus.Counter
	droppedC  [len(webhookKinds)]prometheus.Counter
	durationC [len(webhookKinds)]prometheus.Observer
	latencyC  [len(webhookKinds)]prometheus.Observer
}

var _ webhook.Observer = (*Webhooks)(nil)

func newWebhooks() *Webhooks {
	w := &Webhooks{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "webhook", Name: "attempts_total",
			Help: "Webhook attempts made, by kind (signal, alert) and outcome (delivered, retry, failed, exhausted).",
		}, []string{"kind", "outcome"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "webhook", Name: "dropped_total",
			Help: "Webhook deliveries dropped unsent because more than --webhook-queue-limit waited for one device at one endpoint, by kind.",
		}, []string{"kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "webhook", Name: "attempt_duration_seconds",
			Help:    "Duration of one webhook attempt's HTTP exchange (connect, TLS, request, response), by kind.",
			Buckets: webhookBuckets,
		}, []string{"kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "webhook", Name: "delivery_latency_seconds",
			Help:    "Time from a webhook delivery's creation to its successful attempt (retries included), by kind.",
			Buckets: webhookBuckets,
		}, []string{"kind"}),
	}
	for i, k := range webhookKinds {
		for j, o := range webhookOutcomes {
			w.attemptsC[i][j] = w.attempts.WithLabelValues(k, o)
		}
		w.droppedC[i] = w.dropped.WithLabelValues(k)
		w.durationC[i] = w.duration.WithLabelValues(k)
		w.latencyC[i] = w.latency.WithLabelValues(k)
	}
	return w
}

func (w *Webhooks) register(reg prometheus.Registerer) {
	reg.MustRegister(w.attempts, w.dropped, w.duration, w.latency)
}

func kindIndex(kind string) int {
	if kind == webhook.KindAlert {
		return 1
	}
	return 0
}

// AttemptEnded implements webhook.Observer.
func (w *Webhooks) AttemptEnded(r webhook.AttemptResult) {
	k := kindIndex(r.Kind)
	var o int
	switch r.State {
	case webhook.StateDelivered:
		o = 0
		w.latencyC[k].Observe(r.Age.Seconds())
	case webhook.StatePending:
		o = 1
	case webhook.StateFailed:
		o = 2
	default:
		o = 3
	}
	w.attemptsC[k][o].Inc()
	w.durationC[k].Observe(r.Duration.Seconds())
}

// Dropped implements webhook.Observer.
func (w *Webhooks) Dropped(kind string) { w.droppedC[kindIndex(kind)].Inc() }

// WebhookSource is what the queue metrics read at scrape time;
// *webhook.Dispatcher satisfies it.
type WebhookSource interface {
	Backlog() (pending, inflight int)
	Stats() webhook.Stats
}

// WatchWebhooks registers the dispatcher's queue metrics, read at scrape
// time.
func (m *Metrics) WatchWebhooks(d WebhookSource) error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: "webhook", Name: "queue_depth",
			Help: "Webhook deliveries not yet ended: stored in the outbox and waiting for their first attempt, a retry or an attempt in flight.",
		}, func() float64 { p, _ := d.Backlog(); return float64(p) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: "webhook", Name: "attempts_in_flight",
			Help: "Webhook attempts in flight.",
		}, func() float64 { _, n := d.Backlog(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "webhook", Name: "enqueued_total",
			Help: "Webhook deliveries written to the outbox by this process.",
		}, func() float64 { return float64(d.Stats().Enqueued) }),
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

package relaymetrics

import (
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Unmatched is the route label of requests that matched no API route.
const Unmatched = "unmatched"

// requestBuckets are the bounds of the API latency histogram, in seconds:
// the API answers in well under a millisecond when its caches hit.
var requestBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Requests counts the public API's requests by route pattern, method and
// status, with a latency histogram by route and method. It satisfies
// api.RequestObserver. Label children are resolved once per combination
// and cached, so a request costs a lock-free map lookup, one counter
// increment and one histogram observation.
type Requests struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec

	// children is copied on write (each combination is written once), so
	// readers share no lock.
	children atomic.Pointer[map[reqKey]reqChild]
	mu       sync.Mutex // writers
}

type reqKey struct {
	route, method string
	status        int
}

type reqChild struct {
	count prometheus.Counter
	dur   prometheus.Observer
}

// maxRequestChildren bounds the cache (and so the series): routes, methods
// and status codes are bounded already; this is a backstop.
const maxRequestChildren = 4096

func newRequests() *Requests {
	return &Requests{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "http", Name: "requests_total",
			Help: `Public API requests answered, by route pattern (e.g. /api/v1/public/devices/{id}; "unmatched" when no route matched), method and status code.`,
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time from receiving a public API request's headers to the end of its handler, by route pattern and method.",
			Buckets: requestBuckets,
		}, []string{"route", "method"}),
	}
}

func (r *Requests) register(reg prometheus.Registerer) {
	reg.MustRegister(r.total, r.duration)
}

// ObserveRequest records one answered request. route is chi's route pattern,
// "" when no route matched.
func (r *Requests) ObserveRequest(route, method string, status int, d time.Duration) {
	if route == "" {
		route = Unmatched
	}
	method = boundMethod(method)
	k := reqKey{route, method, status}
	var c reqChild
	ok := false
	if m := r.children.Load(); m != nil {
		c, ok = (*m)[k]
	}
	if !ok {
		c = r.child(k)
	}
	c.count.Inc()
	c.dur.Observe(d.Seconds())
}

func (r *Requests) child(k reqKey) reqChild {
	c := reqChild{
		count: r.total.WithLabelValues(k.route, k.method, strconv.Itoa(k.status)),
		dur:   r.duration.WithLabelValues(k.route, k.method),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.children.Load()
	if old != nil && len(*old) >= maxRequestChildren {
		return c
	}
	m := make(map[reqKey]reqChild, 16)
	if old != nil {
		maps.Copy(m, *old)
	}
	m[k] = c
	r.children.Store(&m)
	return c
}

// boundMethod keeps the method label to the standard methods.
func boundMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

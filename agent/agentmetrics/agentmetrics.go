// Package agentmetrics serves fleet-agent's own Prometheus metrics (the
// relay link, the spool, the applied configuration, channel and metric
// collector errors) at /metrics on the address of --metrics-listen. It is
// off by default: the agent creates it only when that flag is set. The
// gateway's system metrics that the agent reports to the relay are package
// agent/metrics; this package is about the agent itself.
//
// Values are read at scrape time from the parts' own counters (link.Stats,
// spool.Stats), so nothing is added to the agent's work between scrapes;
// errors are counted as they are reported.
package agentmetrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleet/fleet/agent/link"
	"github.com/fleet/fleet/agent/spool"
	"github.com/fleet/fleet/shared/protocol"
)

// Namespace prefixes every agent metric.
const Namespace = "fleet_agent"

// Path is where the metrics are served.
const Path = "/metrics"

// Spool is what the spool metrics read; *spool.Spool satisfies it.
type Spool interface {
	Stats() spool.Stats
	OldestPending() (time.Time, bool, error)
}

// Source is where the metrics come from, read at scrape time.
type Source struct {
	Link  func() link.Stats
	Spool Spool
	// ConfigVersion returns the desired-configuration version applied.
	ConfigVersion func() int64
	// Channels returns the channels' current state.
	Channels func() []protocol.ChannelState
	// Version is the agent's version (fleet_agent_build_info).
	Version string
	// Now replaces time.Now.
	Now func() time.Time
}

// Metrics is the agent's registry.
type Metrics struct {
	reg             *prometheus.Registry
	channelErrors   *prometheus.CounterVec
	collectorErrors *prometheus.CounterVec
	spoolDropped    prometheus.Counter
	// known bounds the label values of the channel error counter.
	known map[string]bool
}

// New returns the metrics of src. channels names every channel that may
// report an error (other label values are counted as "other").
func New(src Source, channels []string) *Metrics {
	if src.Now == nil {
		src.Now = time.Now
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		channelErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "channel_errors_total",
			Help: "serial.error events of the agent's channels (device failures, configuration that could not be applied), by channel.",
		}, []string{"channel"}),
		collectorErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "metric_collection_errors_total",
			Help: "Failed system metric reads, by collector (cpu, mem, disk, thermal, load); the sample is still sent with that field at 0.",
		}, []string{"collector"}),
		spoolDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "spool_dropped_records_total",
			Help: "Records dropped from the spool before the relay stored them (size or age bound).",
		}),
		known: map[string]bool{},
	}
	for _, c := range channels {
		m.known[c] = true
		m.channelErrors.WithLabelValues(c)
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; the labels tell which agent runs.",
		ConstLabels: prometheus.Labels{"version": src.Version},
	})
	info.Set(1)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info, m.channelErrors, m.collectorErrors, m.spoolDropped,
		newCollector(src),
	)
	return m
}

// Registry returns the registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ChannelError counts a serial.error event of channel.
func (m *Metrics) ChannelError(channel string) {
	if !m.known[channel] {
		channel = "other"
	}
	m.channelErrors.WithLabelValues(channel).Inc()
}

// CollectorError counts a failed read of a metric collector (the names of
// agent/metrics' collectors: a fixed set).
func (m *Metrics) CollectorError(collector string) {
	m.collectorErrors.WithLabelValues(collector).Inc()
}

// SpoolDropped counts n records dropped by the spool's bounds.
func (m *Metrics) SpoolDropped(n uint64) { m.spoolDropped.Add(float64(n)) }

// Handler serves the metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 2, Timeout: 10 * time.Second,
	})
}

// Server serves the metrics on one address.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Listen starts serving the metrics at Path on addr (host:port; port 0
// picks one). Every other path is 404.
func (m *Metrics) Listen(addr string, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, m.Handler())
	s := &Server{ln: ln, done: make(chan struct{}), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, letting a scrape in flight finish for up to a
// second.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// collector reads the link, spool and channel figures at scrape time.
type collector struct {
	src Source

	connected, sessions, reconnects, heartbeats, spooled, acked, pending, bytes, oldest, version, channelErr *prometheus.Desc

	// The oldest pending record's time is read from the spool file: it is
	// remembered for as long as the acknowledged floor stays the same.
	mu         sync.Mutex
	oldestAt   time.Time
	oldestOK   bool
	oldestFor  uint64
	oldestRead bool
}

func newCollector(src Source) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
	}
	return &collector{
		src:        src,
		connected:  d("link_connected", "1 while the websocket session with the relay is established, else 0."),
		sessions:   d("link_sessions_total", "Sessions established with the relay (welcome received)."),
		reconnects: d("link_reconnects_total", "Times the relay link went down or a connection attempt failed and a reconnect was scheduled."),
		heartbeats: d("heartbeats_sent_total", "Heartbeats written to the relay."),
		spooled:    d("spool_records_total", "Records (metric samples and events) appended to the spool: its last sequence number, kept across restarts."),
		acked:      d("spool_acknowledged_records_total", "Records the relay acknowledged (or the spool's bounds dropped): the spool's acknowledged sequence number."),
		pending:    d("spool_pending_records", "Records in the spool not yet acknowledged by the relay."),
		bytes:      d("spool_bytes", "Size of the spool's segment files."),
		oldest:     d("spool_oldest_pending_age_seconds", "Age of the oldest record not yet acknowledged (0 when none is pending)."),
		version:    d("config_version_applied", "Version of the desired serial configuration the agent applied (0: none yet)."),
		channelErr: d("channel_error", "1 while a channel reports an error (device missing, open failed), else 0.", "channel"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connected, c.sessions, c.reconnects, c.heartbeats, c.spooled, c.acked, c.pending, c.bytes, c.oldest, c.version, c.channelErr} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	if c.src.Link != nil {
		ls := c.src.Link()
		connected := 0.0
		if ls.Connected {
			connected = 1
		}
		gauge(c.connected, connected)
		counter(c.sessions, ls.Sessions)
		counter(c.reconnects, ls.Reconnects)
		counter(c.heartbeats, ls.HeartbeatsSent)
	}
	if c.src.Spool != nil {
		st := c.src.Spool.Stats()
		counter(c.spooled, st.LastSeq)
		counter(c.acked, st.Acked)
		gauge(c.pending, float64(st.Pending))
		gauge(c.bytes, float64(st.Bytes))
		if at, ok, err := c.oldestPending(st); err == nil {
			age := 0.0
			if ok {
				age = max(c.src.Now().Sub(at).Seconds(), 0)
			}
			gauge(c.oldest, age)
		} else {
			ch <- prometheus.NewInvalidMetric(c.oldest, err)
		}
	}
	if c.src.ConfigVersion != nil {
		gauge(c.version, float64(c.src.ConfigVersion()))
	}
	if c.src.Channels != nil {
		for _, s := range c.src.Channels() {
			v := 0.0
			if s.Error != "" {
				v = 1
			}
			gauge(c.channelErr, v, s.ID)
		}
	}
}

// oldestPending returns the spool's oldest pending record time, read again
// only when the acknowledged floor moved or something was appended to an
// empty spool.
func (c *collector) oldestPending(st spool.Stats) (time.Time, bool, error) {
	if st.Pending == 0 {
		return time.Time{}, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.oldestRead && c.oldestFor == st.Acked && c.oldestOK {
		return c.oldestAt, true, nil
	}
	at, ok, err := c.src.Spool.OldestPending()
	if err != nil {
		return time.Time{}, false, err
	}
	c.oldestAt, c.oldestOK, c.oldestFor, c.oldestRead = at, ok, st.Acked, true
	return at, ok, nil
}

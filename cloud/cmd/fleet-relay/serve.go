package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/go-chi/httprate"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
	"github.com/fleet/fleet/cloud/relaymetrics"
	"github.com/fleet/fleet/shared/tick"
)

// ServeConfig is the configuration of `fleet-relay serve`.
type ServeConfig struct {
	DB        string
	Listen    string
	RateLimit int
	Retention time.Duration
	// RetentionInterval is how often the retention sweep runs.
	RetentionInterval time.Duration
	TLSCert, TLSKey   string
	// ShutdownTimeout bounds the wait for in-flight requests on Close.
	ShutdownTimeout time.Duration
	// DrainDelay is how long Close keeps serving with /readyz at 503
	// before it tells agents to reconnect and stops accepting, so that a
	// load balancer's health checks see the relay leave first.
	DrainDelay time.Duration
	LogLevel   string
	// TrustedProxies lists the reverse proxies and load balancers (IP
	// addresses and CIDR ranges, comma-separated) whose X-Forwarded-For
	// names the client (cloud/internal/clientaddr); empty: none.
	TrustedProxies string

	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
}

// extension is a part of the relay that serve starts beside the public API
// (the agent endpoint, the alert engine, the webhook dispatcher). flags
// registers its flags; start runs after the store is open and before the
// listener accepts: it may mount handlers on mux, append to m.Observers,
// m.AlertObservers and m.ConfigObservers, and start goroutines bound to ctx.
// The stop it returns runs at shutdown, after the HTTP server drained and
// before the store closes; stops run in the reverse order of the starts.
// What must leave before the HTTP server stops (agents' websockets, which
// http.Server.Shutdown does not track) appends a drain to m.drains.
type extension struct {
	name  string
	flags func(fs *flag.FlagSet)
	start func(ctx context.Context, m *Main, mux *http.ServeMux) (stop func(context.Context) error, err error)
}

// extensions lists what serve starts beside the API. Areas add theirs in
// their own files and one line each here.
func extensions() []extension {
	return []extension{
		metricsExtension(),
		redisExtension(),
		webhookExtension(), // before the agent endpoint: stops after it
		agentLinkExtension(),
		panelExtension(),
	}
}

// Main is the relay process behind `fleet-relay serve`: ParseFlags, then
// Run (returns once listening), then Close (graceful). Tests run it on port
// 0 with a temporary database.
type Main struct {
	Config ServeConfig
	Logger *slog.Logger

	// Set by Run. DB is the store named by --db (either dialect).
	DB    *cloud.Stores
	Store Services
	// Metrics is the Prometheus registry of the relay's parts; extensions
	// attach theirs in start.
	Metrics *relaymetrics.Metrics
	// Observers hear what agents reported; AlertObservers hear alert state
	// changes (API and alert engine); ConfigObservers hear desired serial
	// configuration changes. Extensions append to them in start.
	Observers       observerList
	AlertObservers  alertObserverList
	ConfigObservers configObserverList
	// Cluster holds what the relay's parts do with other relays' changes
	// (a store several relays share); extensions append to it in start.
	Cluster clusterHandlers

	// rateCounter holds the API's rate-limit counts when they are shared
	// (set by the redis extension); nil counts in memory.
	rateCounter httprate.LimitCounter

	ready    *readiness
	front    swapHandler
	trusted  *clientaddr.Trusted // from Config.TrustedProxies
	drains   []func(context.Context) error
	server   *http.Server
	ln       net.Listener
	exts     []extension
	stops    []func(context.Context) error
	cancel   context.CancelFunc
	done     chan struct{}
	serveErr error
	logOut   io.Writer
	access   *logBatch    // the access log's batches (Run starts it, Close flushes it)
	logLevel slog.Leveler // the level ParseFlags set

	metricsAddr string // set by the metrics extension with --metrics-listen
}

// Services are the store's service implementations; extensions set their
// observers in start.
type Services struct {
	Devices cloud.DeviceService
	Serial  cloud.SerialService
	Alerts  cloud.AlertService
	Auth    *apikey.Authenticator
}

// NewMain returns a Main with the default configuration, logging JSON to
// logOut.
func NewMain(logOut io.Writer) *Main {
	return &Main{
		Config: ServeConfig{
			DB: "fleet.db", Listen: "127.0.0.1:8080", RateLimit: api.DefaultRateLimit,
			Retention: cloud.DefaultRetention, RetentionInterval: time.Hour, ShutdownTimeout: 30 * time.Second,
			LogLevel:          "info",
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second,
		},
		Logger: slog.New(slog.NewJSONHandler(logOut, nil)),
		exts:   extensions(),
		logOut: logOut,
	}
}

// ParseFlags reads serve's flags from args and FLEET_ environment variables.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("fleet-relay serve", flag.ContinueOnError)
	c := &m.Config
	fs.StringVar(&c.DB, "db", c.DB, "SQLite database file (created if missing), or a postgres:// URL (FLEET_DB keeps a password out of ps)")
	fs.StringVar(&c.Listen, "listen", c.Listen, "address to listen on (host:port; port 0 picks one)")
	fs.IntVar(&c.RateLimit, "rate-limit", c.RateLimit, "requests per minute per API key (and per client address before authentication)")
	fs.DurationVar(&c.Retention, "retention", c.Retention, "how long metrics and events are kept")
	fs.DurationVar(&c.RetentionInterval, "retention-interval", c.RetentionInterval, "how often the retention sweep runs")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "TLS certificate file (PEM); serve HTTPS when set with --tls-key")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "TLS private key file (PEM)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long shutdown waits for in-flight requests")
	fs.DurationVar(&c.DrainDelay, "drain-delay", c.DrainDelay, "on SIGTERM, how long /readyz answers 503 before agents are told to reconnect and the listener closes (longer than the load balancer takes to notice; 0 without one)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&c.TrustedProxies, "trusted-proxies", c.TrustedProxies, "reverse proxies and load balancers in front of the relay (IP addresses and CIDR ranges, comma-separated): a request from one is the client's that its X-Forwarded-For names, for rate limits, sign-in throttles and logs; empty: every peer is the client")
	for _, e := range m.exts {
		if e.flags != nil {
			e.flags(fs)
		}
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case c.DB == "":
		return fmt.Errorf("%w: --db must not be empty", errUsage)
	case c.RateLimit < 1:
		return fmt.Errorf("%w: --rate-limit must be at least 1", errUsage)
	case c.Retention < time.Hour:
		return fmt.Errorf("%w: --retention must be at least 1h", errUsage)
	case c.DrainDelay < 0:
		return fmt.Errorf("%w: --drain-delay must not be negative", errUsage)
	case c.RetentionInterval < time.Second:
		return fmt.Errorf("%w: --retention-interval must be at least 1s", errUsage)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("%w: --log-level: %v", errUsage, err)
	}
	if _, err := clientaddr.Parse(c.TrustedProxies); err != nil {
		return fmt.Errorf("%w: --trusted-proxies: %v", errUsage, err)
	}
	m.Logger = slog.New(slog.NewJSONHandler(m.logOut, &slog.HandlerOptions{Level: lvl}))
	m.logLevel = lvl
	return nil
}

// The access log (a line per API request) is written in batches of up to
// accessLogBatch bytes, at least every accessLogInterval (logBatch).
const (
	accessLogBatch    = 64 << 10
	accessLogInterval = 200 * time.Millisecond
)

// Run starts the HTTP server (answering /healthz, and 503 elsewhere, while
// the store opens), opens the store (applying migrations), starts the
// extensions and the retention sweep, and returns once the relay serves
// its API and /readyz answers 200.
func (m *Main) Run(ctx context.Context) (err error) {
	c := m.Config
	bg, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.ready = newReadiness(m.Logger.With("component", "readiness"))
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if err := m.listen(bg); err != nil {
		return err
	}
	m.DB, err = openStore(ctx, c.DB, storeOptions{Create: true})
	if err != nil {
		return err
	}
	m.DB.Observe(&m.ConfigObservers, &m.AlertObservers)
	m.Store = Services{
		Devices: m.DB.Devices(),
		Serial:  m.DB.Serial(),
		Alerts:  m.DB.Alerts(),
		Auth:    apikey.NewAuthenticator(m.DB.Keys(), m.DB.Now, 0),
	}
	m.Metrics = relaymetrics.New()
	mux := http.NewServeMux()
	for _, e := range m.exts {
		stop, err := e.start(bg, m, mux)
		if err != nil {
			return fmt.Errorf("start %s: %w", e.name, err)
		}
		if stop != nil {
			m.stops = append(m.stops, stop)
		}
	}
	m.access = newLogBatch(m.logOut, accessLogBatch, accessLogInterval)
	access := slog.New(slog.NewJSONHandler(m.access, &slog.HandlerOptions{Level: m.logLevel})).With("component", "api")
	apiServer := api.NewServer(api.Config{
		Devices: m.Store.Devices, Serial: m.Store.Serial, Alerts: m.Store.Alerts, Auth: m.Store.Auth,
		Versioner: m.DB.Versioner(), RateLimit: c.RateLimit, Logger: m.Logger.With("component", "api"), AccessLog: access, Now: m.DB.Now,
		Requests: m.Metrics.Requests(), Ready: m.ready.Ready, RateCounter: m.rateCounter,
	})
	mux.Handle("/", apiServer)
	m.front.set(mux)
	m.ready.serving(storePinger(m.DB.Store))

	if m.DB.Cluster != nil {
		go m.DB.Cluster.Listen(bg, m.Cluster.handlers(), m.Logger.With("component", "cluster"))
	}
	rlog := m.Logger.With("component", "retention")
	go runRetention(bg, m.DB, leaseHolder(m.DB, "retention", 2*c.RetentionInterval+time.Minute, rlog), c.Retention, c.RetentionInterval, rlog)
	scheme := "http"
	if c.TLSCert != "" {
		scheme = "https"
	}
	attrs := []any{"addr", m.ln.Addr().String(), "scheme", scheme, "db", redactDB(c.DB), "rate_limit", c.RateLimit, "retention", c.Retention.String()}
	if m.trusted != nil {
		attrs = append(attrs, "trusted_proxies", m.trusted.String())
	}
	m.Logger.Info("relay listening", attrs...)
	return nil
}

// listen binds the listener and serves startingHandler until Run swaps in
// the relay's mux.
func (m *Main) listen(bg context.Context) (err error) {
	c := m.Config
	if m.trusted, err = clientaddr.Parse(c.TrustedProxies); err != nil {
		return fmt.Errorf("trusted proxies: %w", err)
	}
	m.front.set(http.HandlerFunc(startingHandler))
	m.ln, err = net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	m.server = &http.Server{
		Handler:           m.trusted.Handler(&m.front),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(m.Logger.With("component", "http").Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return bg },
		ConnContext:       api.ConnContext,
	}
	m.done = make(chan struct{})
	go func() {
		defer close(m.done)
		var err error
		if c.TLSCert != "" {
			err = m.server.ServeTLS(api.Listener(m.ln), c.TLSCert, c.TLSKey)
		} else {
			err = m.server.Serve(api.Listener(m.ln))
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.serveErr = err
			m.Logger.Error("http server stopped", "err", err)
		}
	}()
	return nil
}

// Addr returns the address the relay listens on (after Run).
func (m *Main) Addr() string {
	if m.ln == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// Done is closed when the HTTP server stopped (after Run).
func (m *Main) Done() <-chan struct{} { return m.done }

// Close drains and shuts down: /readyz turns 503 (and stays so for
// DrainDelay while the relay still serves), agents are told to reconnect
// elsewhere (websocket close 1012), the listener stops accepting and
// in-flight requests finish (up to ShutdownTimeout), then the extensions
// and background work stop and the store closes.
func (m *Main) Close() error {
	var errs []error
	if m.ready != nil && m.ready.drain() && m.Config.DrainDelay > 0 {
		m.Logger.Info("draining: /readyz answers 503", "drain_delay", m.Config.DrainDelay.String())
		time.Sleep(m.Config.DrainDelay)
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownTimeout)
	defer cancel()
	for _, d := range m.drains {
		if err := d(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drain: %w", err))
		}
	}
	m.drains = nil
	if m.server != nil {
		if err := m.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
		<-m.done
	}
	for i := len(m.stops) - 1; i >= 0; i-- {
		if err := m.stops[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	m.stops = nil
	if m.access != nil {
		m.access.Close()
	}
	if m.cancel != nil {
		m.cancel()
	}
	if m.DB != nil {
		if err := m.DB.Close(); err != nil {
			errs = append(errs, err)
		}
		m.DB = nil
	}
	if m.server != nil {
		m.Logger.Info("relay stopped")
		m.server = nil
	}
	return errors.Join(errs...)
}

// runRetention sweeps metrics and events older than keep every interval
// while this relay is the leader (one relay of a cluster at a time), until
// ctx ends, logging what it removed and any failure.
func runRetention(ctx context.Context, st cloud.Store, leader func(context.Context) bool, keep, interval time.Duration, log *slog.Logger) {
	tick.NowAndEvery(ctx, interval, func() {
		if !leader(ctx) {
			return
		}
		m, e, err := st.SweepRetention(ctx, keep)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("retention sweep failed", "err", err)
		case m+e > 0:
			log.Info("retention sweep", "metrics_deleted", m, "events_deleted", e)
		}
	})
}

// runServe is `fleet-relay serve`: run until ctx ends (SIGINT, SIGTERM),
// then shut down gracefully.
func (a *app) runServe(ctx context.Context, args []string, stdout io.Writer) error {
	m := NewMain(a.stderr)
	if err := m.ParseFlags(args); err != nil {
		return err
	}
	if err := m.Run(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		m.Logger.Info("shutting down")
	case <-m.Done():
	}
	err := m.Close()
	if m.serveErr != nil {
		return m.serveErr
	}
	return err
}

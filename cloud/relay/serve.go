package relay

import (
	"context"
	"crypto/tls"
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
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
	"github.com/fleet/fleet/cloud/internal/logbatch"
	"github.com/fleet/fleet/cloud/relaygc"
	"github.com/fleet/fleet/cloud/relaymetrics"
	"github.com/fleet/fleet/cloud/webhook"
)

// Main is the relay process behind `fleet-relay serve`: ParseFlags, then
// Run (returns once listening), then Close (graceful). Tests run it on port
// 0 with a temporary database.
type Main struct {
	Config Config
	Logger *slog.Logger

	// Set by Run. DB is the store named by --db (either dialect).
	DB    *cloud.Stores
	Store Services
	// Metrics is the Prometheus registry of the relay's parts; each part
	// attaches its own as it starts.
	Metrics *relaymetrics.Metrics
	// AlertObservers hear alert state changes (API and alert engine);
	// ConfigObservers hear desired serial configuration changes. The
	// store tells them; parts append to them as they start.
	AlertObservers  alertObserverList
	ConfigObservers configObserverList
	// CommandObservers hear that devices were given commands (the agent
	// endpoint sends them to the agents it holds).
	CommandObservers commandObserverList
	// Cluster holds what the relay's parts do with other relays' changes
	// (a store several relays share); parts append to it as they start.
	Cluster clusterHandlers

	parts []part // what Run starts beside the API (relayParts)
	// Set by the parts that others hear: the alert engine and the webhook
	// notifier hear the agent endpoint.
	alerts   *alert.Engine
	notifier *webhook.Notifier
	// rateCounter holds the API's rate-limit counts when they are shared
	// (set by the rate limits part with --redis); nil counts in memory.
	rateCounter httprate.LimitCounter

	ready    *readiness
	front    swapHandler
	trusted  *clientaddr.Trusted // from Config.TrustedProxies
	drains   []func(context.Context) error
	server   *http.Server
	ln       net.Listener
	stops    []func(context.Context) error
	cancel   context.CancelFunc
	done     chan struct{}
	serveErr error
	logOut   io.Writer
	access   *logbatch.Writer // the access log's batches (Run starts it, Close flushes it)
	logLevel slog.Leveler     // the level ParseFlags set

	metricsAddr string // set by the metrics part with --metrics-listen
}

// Services are the store's service implementations, shared by the API
// and the panel.
type Services struct {
	Devices cloud.DeviceService
	Serial  cloud.SerialService
	Alerts  cloud.AlertService
	Auth    *apikey.Authenticator
}

// NewMain returns a Main with the default configuration, logging JSON to
// logOut.
func NewMain(logOut io.Writer) *Main {
	m := &Main{
		Config: DefaultConfig(),
		Logger: slog.New(slog.NewJSONHandler(logOut, nil)),
		logOut: logOut,
	}
	m.parts = m.relayParts()
	return m
}

// ParseFlags reads serve's flags from args and FLEET_ environment
// variables and checks them: a value the relay cannot run with is a usage
// error (ErrUsage) naming its flag, before anything opens. The TLS pair
// and the webhook CA file are read to check them.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("fleet-relay serve", flag.ContinueOnError)
	c := &m.Config
	c.flags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	scratch := DefaultConfig()
	sfs := flag.NewFlagSet("", flag.ContinueOnError)
	scratch.flags(sfs)
	if err := refuseArgvPassword(args, sfs, &scratch.Notify.SMTPURL); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if c.TLSCert != "" {
		if _, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey); err != nil {
			return fmt.Errorf("%w: --tls-cert, --tls-key: %v", ErrUsage, err)
		}
	}
	if _, err := c.Webhook.client(); err != nil {
		return fmt.Errorf("%w: --webhook-ca: %v", ErrUsage, err)
	}
	var lvl slog.Level
	lvl.UnmarshalText([]byte(c.LogLevel)) // checked by validate
	m.Logger = slog.New(slog.NewJSONHandler(m.logOut, &slog.HandlerOptions{Level: lvl}))
	m.logLevel = lvl
	return nil
}

// The access log (a line per API request) is written in batches of up to
// accessLogBatch bytes, at least every accessLogInterval (cloud/internal/logbatch).
const (
	accessLogBatch    = 64 << 10
	accessLogInterval = 200 * time.Millisecond
)

// Run starts the HTTP server (answering /healthz, and 503 elsewhere, while
// the store opens), opens the store (applying migrations), starts the
// parts (relayParts) in order, and returns once the relay serves its API
// and /readyz answers 200.
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
	m.DB.ObserveCommands(&m.CommandObservers)
	m.Store = Services{
		Devices: m.DB.Devices(),
		Serial:  m.DB.Serial(),
		Alerts:  m.DB.Alerts(),
		Auth:    apikey.NewAuthenticator(m.DB.Keys(), m.DB.Now, 0),
	}
	m.Metrics = relaymetrics.New()
	mux := http.NewServeMux()
	if err := m.startParts(bg, mux); err != nil {
		return err
	}
	m.access = logbatch.New(m.logOut, accessLogBatch, accessLogInterval)
	access := slog.New(slog.NewJSONHandler(m.access, &slog.HandlerOptions{Level: m.logLevel})).With("component", "api")
	apiServer := api.NewServer(api.Config{
		Devices: m.Store.Devices, Serial: m.Store.Serial, Alerts: m.Store.Alerts, Points: m.DB.Points(), Rules: m.DB.Rules(), Rollouts: m.DB.Rollouts(), Auth: m.Store.Auth,
		Versioner: m.DB.Versioner(), RateLimit: c.RateLimit, Logger: m.Logger.With("component", "api"), AccessLog: access, AccessLogTo: m.access, Now: m.DB.Now,
		Requests: m.Metrics.Requests(), Ready: m.ready.Ready, RateCounter: m.rateCounter,
	})
	mux.Handle("/", apiServer)
	m.front.set(mux)
	m.ready.serving(storePinger(m.DB.Store))

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
		Handler:           api.HSTS(c.Notify.PublicURL, m.trusted.Handler(&m.front)),
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
// in-flight requests finish (up to ShutdownTimeout), then the parts stop
// in the reverse order of their starts and the store closes.
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

// runServe is `fleet-relay serve`: run until ctx ends (SIGINT, SIGTERM),
// then shut down gracefully.
func (a *app) runServe(ctx context.Context, args []string, stdout io.Writer) error {
	m := NewMain(a.stderr)
	if err := m.ParseFlags(args); err != nil {
		return err
	}
	// The collector's policy is the process's, so the command sets it, not
	// Main (tests run several relays in one process).
	gc, err := relaygc.Resolve(m.Config.MemoryLimit, m.Config.GCPercent)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	gc.Apply()
	m.Logger.Info("garbage collector", "memory_limit", gc.Limit, "memory_limit_from", gc.LimitFrom, "gc_percent", gc.GCPercent, "gc_percent_from", gc.PercentFrom)
	if err := m.Run(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		m.Logger.Info("shutting down")
	case <-m.Done():
	}
	err = m.Close()
	if m.serveErr != nil {
		return m.serveErr
	}
	return err
}

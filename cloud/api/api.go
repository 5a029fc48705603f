// Package api serves the relay's public REST API (/api/v1/public, the
// contract of seed/public-api-spec.md) over the cloud service interfaces:
// bearer-key authentication with scopes, per-key rate limiting on
// go-chi/httprate's counters, strict JSON bodies, keyset pagination parameters, the
// error envelope of DESIGN.md, request ids, an slog access log, and the
// embedded OpenAPI 3.1 document at /api/v1/public/openapi.json.
package api

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/httprate"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/refusallog"
)

// Prefix is the path prefix of every public API route.
const Prefix = "/api/v1/public"

// DefaultRateLimit is the default budget in requests per minute, per key
// (and per client address for requests that do not authenticate).
const DefaultRateLimit = 600

// MaxBodyBytes is the largest request body accepted (413 above it).
const MaxBodyBytes = 64 << 10

// Authenticator verifies the API key of a request. key is the token after
// "Bearer " in the Authorization header; addr is the client's address
// (clientaddr.Key), by which failures and the verification queue are
// counted; version is the store's data version as the request read it,
// before anything else (Config.Versioner; versioned false: none), for the
// authenticator's cache of key rows. It
// returns the key, or a *cloud.Error with code unauthorized,
// api_key_expired or api_key_revoked; any other error is treated as
// internal. The apikey package's Authenticator satisfies it.
type Authenticator interface {
	AuthenticateAt(ctx context.Context, key, addr string, version uint64, versioned bool) (*cloud.APIKey, error)
}

// Config is what NewServer needs.
type Config struct {
	Devices cloud.DeviceService
	Serial  cloud.SerialService
	Alerts  cloud.AlertService
	// Points, when set, serves GET /devices/{id}/points and its samples
	// route; nil leaves both routes out (404).
	Points cloud.PointService
	// Rules, when set, serves /alert-rules (and its preview) and
	// /silences; nil leaves those routes out (404).
	Rules cloud.RuleService
	// Rollouts, when set, serves /rollouts (with pause, resume and
	// cancel) and POST /devices/{id}/reboot; nil leaves those routes out
	// (404).
	Rollouts cloud.RolloutService
	Auth     Authenticator
	// Versioner, when set, is the store's data version, read once per
	// request and handed to Auth (its key rows) and to the cache of the hot
	// list pages (GET /devices, GET /alerts). Nil: no caching.
	Versioner cloud.Versioner
	// RateLimit is the budget in requests per minute per key (and per
	// client address before authentication); 0 means DefaultRateLimit.
	RateLimit int
	// RateCounter, when set, holds the rate-limit counts (shared between
	// relays, e.g. cloud/redis); nil counts in this process's memory.
	RateCounter httprate.LimitCounter
	// Logger receives internal errors, and the access log unless AccessLog
	// is set; nil discards.
	Logger *slog.Logger
	// AccessLog, when set, receives the access log: one line per request.
	AccessLog *slog.Logger
	// AccessLogTo, when set, takes the per-request lines of the access log
	// instead of AccessLog's handler: each line written to it whole (one
	// Write) as the JSON object slog's JSON handler makes of the record
	// with "component":"api" (the same keys and values), without slog's
	// work per record, a fifth of a request's CPU in the handler (issue
	// 31). AccessLog's level still decides whether they are written, and
	// AccessLog takes the summaries of refused requests.
	AccessLogTo io.Writer
	// Now is the clock (metrics window defaults); nil means time.Now.
	Now cloud.Now
	// Requests, when set, hears about every answered request (Prometheus
	// metrics).
	Requests RequestObserver
	// Ready, when set, decides GET /readyz: nil is 200, an error 503 with
	// the error's text as the reason (keep it short and free of secrets).
	// It is called on every /readyz request: cache what is expensive.
	Ready func(ctx context.Context) error
}

// Server is the public API as an http.Handler. It also answers /healthz
// and /readyz.
type Server struct {
	cfg     Config
	log     *slog.Logger
	access  *slog.Logger    // the access log
	refused *refusallog.Log // the access log of requests refused unauthenticated
	now     cloud.Now
	limit   int
	window  time.Duration
	limiter *rateLimiter
	mux     *chi.Mux

	reqPrefix string
	reqSeq    atomic.Uint64
	// fullLogged is when a storage-full refusal was last logged (unix ns).
	fullLogged atomic.Int64

	routeLabels routeLabels // the route label of each chi pattern list

	knownMu sync.RWMutex
	known   map[[32]byte]string // the sums of Authorization values that verified: their key's rate-limit bucket
	bufs    sync.Pool
	pages   listPages
	queries listQueries

	// precomputed header values; the []string ones go into header maps as
	// they are (net/http only reads them, and copies on Clone)
	limitStr   string
	hdrLimit   []string // X-RateLimit-Limit
	policy     []string // RateLimit-Policy
	hdrJSON    []string // Content-Type: application/json
	hdrNoStore []string // Cache-Control: no-store
}

var _ http.Handler = (*Server)(nil)

// NewServer returns the API server for cfg.
func NewServer(cfg Config) *Server {
	s := &Server{cfg: cfg, log: cfg.Logger, now: cfg.Now, limit: cfg.RateLimit, window: time.Minute, known: make(map[[32]byte]string)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.access = cmp.Or(cfg.AccessLog, s.log)
	s.refused = refusallog.New(s.access, "request refused", "requests refused", time.Minute)
	if s.now == nil {
		s.now = time.Now
	}
	if s.limit <= 0 {
		s.limit = DefaultRateLimit
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s.reqPrefix = hex.EncodeToString(b[:]) + "-"
	s.limiter = newRateLimiter(s.limit, s.window, cfg.RateCounter)
	s.limitStr = itoa(s.limit)
	s.hdrLimit = []string{s.limitStr}
	s.policy = []string{`"default";q=` + s.limitStr + `;w=` + itoa(int(s.window/time.Second))}
	s.hdrJSON = []string{contentJSON}
	s.hdrNoStore = []string{"no-store"}
	s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// apiRoutes registers the API's routes under Prefix on the server's one chi
// tree: no Mount, so a request is routed by one tree lookup (a mounted
// sub-router costs a second lookup and a wildcard path value per request).
type apiRoutes struct{ mux *chi.Mux }

func (a apiRoutes) Get(pattern string, h http.HandlerFunc)    { a.mux.Get(Prefix+pattern, h) }
func (a apiRoutes) Post(pattern string, h http.HandlerFunc)   { a.mux.Post(Prefix+pattern, h) }
func (a apiRoutes) Put(pattern string, h http.HandlerFunc)    { a.mux.Put(Prefix+pattern, h) }
func (a apiRoutes) Patch(pattern string, h http.HandlerFunc)  { a.mux.Patch(Prefix+pattern, h) }
func (a apiRoutes) Delete(pattern string, h http.HandlerFunc) { a.mux.Delete(Prefix+pattern, h) }

func (s *Server) routes() {
	root := chi.NewRouter()
	root.Use(s.recordRequest, s.recoverPanic, s.rateLimit)
	root.NotFound(s.notFound)
	root.MethodNotAllowed(s.methodNotAllowed)
	root.Get("/healthz", s.healthz)
	root.Get("/readyz", s.readyz)

	api := apiRoutes{root}
	api.Get("/openapi.json", s.openAPI)

	api.Get("/devices", s.scoped(cloud.ScopeDevicesRead, s.listDevices))
	api.Get("/devices/{id}", s.scoped(cloud.ScopeDevicesRead, s.getDevice))
	api.Get("/devices/{id}/metrics", s.scoped(cloud.ScopeMetricsRead, s.getMetrics))
	api.Get("/devices/{id}/events", s.scoped(cloud.ScopeLogsRead, s.listEvents))
	if s.cfg.Points != nil {
		api.Get("/devices/{id}/points", s.scoped(cloud.ScopeDevicesRead, s.listPoints))
		api.Get("/devices/{id}/points/{pointId}/samples", s.scoped(cloud.ScopeMetricsRead, s.getPointSamples))
	}
	api.Get("/devices/{id}/serial", s.scoped(cloud.ScopeDevicesRead, s.getSerial))
	api.Patch("/devices/{id}", s.scoped(cloud.ScopeDevicesWrite, s.patchDevice))
	api.Patch("/devices/{id}/serial", s.scoped(cloud.ScopeDevicesWrite, s.patchSerial))
	api.Get("/devices/{id}/serial/telemetry", s.scoped(cloud.ScopeDevicesRead, s.getTelemetry))
	api.Get("/devices/{id}/serial/channels/{channelId}", s.scoped(cloud.ScopeDevicesRead, s.getChannel))
	api.Put("/devices/{id}/serial/channels/{channelId}", s.scoped(cloud.ScopeDevicesWrite, s.putChannel))
	api.Get("/alerts", s.scoped(cloud.ScopeAlertsRead, s.listAlerts))
	api.Post("/alerts/{id}/acknowledge", s.scoped(cloud.ScopeAlertsWrite, s.acknowledge))
	api.Post("/alerts/{id}/resolve", s.scoped(cloud.ScopeAlertsWrite, s.resolve))
	if s.cfg.Rules != nil {
		api.Get("/alert-rules", s.scoped(cloud.ScopeAlertsRead, s.listRules))
		api.Post("/alert-rules", s.scoped(cloud.ScopeAlertsWrite, s.createRule))
		api.Post("/alert-rules/preview", s.scoped(cloud.ScopeAlertsRead, s.previewRule))
		api.Get("/alert-rules/{id}", s.scoped(cloud.ScopeAlertsRead, s.getRule))
		api.Patch("/alert-rules/{id}", s.scoped(cloud.ScopeAlertsWrite, s.patchRule))
		api.Delete("/alert-rules/{id}", s.scoped(cloud.ScopeAlertsWrite, s.deleteRule))
		api.Post("/silences", s.scoped(cloud.ScopeAlertsWrite, s.createSilence))
		api.Get("/silences", s.scoped(cloud.ScopeAlertsRead, s.listSilences))
		api.Delete("/silences/{id}", s.scoped(cloud.ScopeAlertsWrite, s.deleteSilence))
	}
	if s.cfg.Rollouts != nil {
		s.rolloutRoutes(api)
	}
	s.mux = root
}

// healthz answers whether the process serves HTTP at all (liveness).
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	WriteHealth(w, nil)
}

// readyz answers whether this relay should get traffic (readiness): 503
// while Config.Ready says why not (store unreachable, starting, draining).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	var err error
	if s.cfg.Ready != nil {
		err = s.cfg.Ready(r.Context())
	}
	WriteHealth(w, err)
}

// WriteHealth writes {"status":"ok"} (200), or for err
// {"status":"unavailable","reason":...} (503).
func WriteHealth(w http.ResponseWriter, err error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if err == nil {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
		return
	}
	h.Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	b, _ := json.Marshal(struct {
		Status string `json:"status"`
		Reason string `json:"reason"`
	}{"unavailable", err.Error()})
	_, _ = w.Write(append(b, '\n'))
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, cloud.Errorf(cloud.ENOTFOUND, "no route for %s %s", r.Method, safePath(r.URL.Path)))
}

// methodNotAllowed answers 405 with the Allow header listing the methods the
// path does accept.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	allowed := make([]string, 0, 2)
	for _, m := range [...]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if s.mux.Match(chi.NewRouteContext(), m, r.URL.Path) {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) == 0 {
		s.notFound(w, r)
		return
	}
	allow := allowed[0]
	for _, m := range allowed[1:] {
		allow += ", " + m
	}
	w.Header().Set("Allow", allow)
	s.writeError(w, r, &cloud.Error{Code: codeMethodNotAllowed, Message: "method " + r.Method + " is not allowed here; allowed: " + allow})
}

// safePath bounds a path echoed in a message.
func safePath(p string) string {
	if len(p) > 200 {
		return p[:200] + "..."
	}
	return p
}

func (s *Server) nextRequestID() string {
	n := s.reqSeq.Add(1)
	var b [16]byte
	i := len(b)
	for {
		i--
		b[i] = hexDigits[n&0xf]
		n >>= 4
		if n == 0 {
			break
		}
	}
	return s.reqPrefix + string(b[i:])
}

const hexDigits = "0123456789abcdef"

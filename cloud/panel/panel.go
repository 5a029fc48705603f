// Package panel is the relay's web panel under /panel/: people of an
// organization sign in with email and password and see the fleet, a
// device's charts, events and channels, the alerts, alert rules, silences
// and notification channels; by role they change channel configuration,
// act on alerts, silence devices, edit rules and channels, manage API
// keys, webhooks and members, and run fleet operations: claims, agent
// releases, rollouts and reboots (docs/panel.md). Pages are rendered on the server with
// html/template; htmx refreshes live parts and uPlot draws charts, both
// built from npm into static/vendor and embedded. Sessions live in the store
// (alexedwards/scs over cloud.SessionStore); every route checks the user's
// role on the server, on every request.
package panel

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/alexedwards/scs/v2"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
	"github.com/fleet/fleet/cloud/internal/refusallog"
	"github.com/fleet/fleet/cloud/password"
	"github.com/fleet/fleet/shared/tick"
)

// Prefix is the path under which the panel is served.
const Prefix = "/panel/"

// MaxFormBytes bounds a form's body; a larger one is refused with 413.
const MaxFormBytes = 64 << 10

// Defaults of Config.
const (
	DefaultIdleTimeout = 30 * time.Minute
	DefaultLifetime    = 12 * time.Hour
)

// Config is what New needs.
type Config struct {
	Devices cloud.DeviceService
	Fleet   cloud.FleetView
	// Glance backs the fleet page's at-a-glance columns, its overview
	// strip and the live updates' device rows (issue 29); nil hides them.
	Glance cloud.FleetGlance
	Serial cloud.SerialService
	Alerts cloud.AlertService
	// Live backs the live updates (GET /panel/live, live.go); nil turns
	// them off. LiveMaxPerOrg bounds one organization's open streams on
	// this relay (0: DefaultLiveMaxPerOrg).
	Live          cloud.LiveReader
	LiveMaxPerOrg int
	// LiveSessionCheck is how often an open stream reads its session
	// again (0: a minute); tests shorten it.
	LiveSessionCheck time.Duration
	// Points backs the device page's points and their charts; nil hides
	// them.
	Points   cloud.PointService
	Users    cloud.UserService
	Sessions cloud.SessionStore
	Keys     cloud.KeyAdmin
	// Webhooks backs Settings → Webhooks; nil hides that page.
	Webhooks cloud.WebhookAdmin
	// Rules backs Alerts → Rules and Silences and Settings → Notifications.
	Rules cloud.RuleService
	// Rollouts backs the rollout pages and the device page's "Reboot";
	// Releases the releases list and the rollout form's versions; Claims
	// the claims page (issue 28). A nil one hides its pages.
	Rollouts cloud.RolloutService
	Releases cloud.ReleaseService
	Claims   cloud.ClaimService
	// Audit is the audit log: sign-ins, sign-outs and failed sign-ins are
	// recorded there, and it backs Settings → Audit log (issue 30); nil
	// records none and hides the page.
	Audit cloud.AuditService
	// TwoFactor backs two-factor sign-in (totp.go); nil turns it off.
	TwoFactor cloud.TwoFactorService
	// OIDC backs single sign-on (sso.go) and Settings → Single sign-on;
	// nil hides both.
	OIDC cloud.OIDCService
	// PublicURL is where people reach the relay (--public-url): the
	// single sign-on redirect URI is under it; "" or an address without a
	// host name uses the request's host.
	PublicURL string
	// Hasher checks and makes passwords; nil means password.Default.
	Hasher *password.Hasher
	// IdleTimeout ends a session unused for that long; Lifetime ends any
	// session that long after sign-in.
	IdleTimeout, Lifetime time.Duration
	// Secure marks the session cookie Secure: people reach the relay over
	// HTTPS (its own TLS, or a proxy's in front of it: an https
	// --public-url).
	Secure bool
	// Throttle bounds failed sign-ins.
	Throttle Throttle
	// Logger receives internal errors and sign-in events; nil discards.
	Logger *slog.Logger
	// Now is the clock of pages and the store's sweeps; nil means time.Now.
	Now cloud.Now
}

// Server is the panel as an http.Handler for Prefix.
type Server struct {
	cfg      Config
	log      *slog.Logger
	now      cloud.Now
	hasher   *password.Hasher
	sessions *scs.SessionManager
	throttle *throttle
	pages    *pages
	static   fs.FS
	built    bool // the npm front end is in static/vendor
	routes   []route
	handler  http.Handler

	// signInLog logs refused sign-ins (wrong password, throttled) in
	// summary.
	signInLog *refusallog.Log

	// ssoClient makes single sign-on's requests to providers (timeouts).
	ssoClient *http.Client

	// live runs the live updates' streams (nil without Config.Live).
	live *liveHub
}

var _ http.Handler = (*Server)(nil)

// New returns the panel for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Rules == nil {
		return nil, errors.New("panel: Config.Rules is required")
	}
	s := &Server{cfg: cfg, log: cfg.Logger, now: cfg.Now, hasher: cfg.Hasher}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.hasher == nil {
		s.hasher = password.NewHasher(password.Default, 0)
	}
	if cfg.IdleTimeout <= 0 {
		s.cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Lifetime <= 0 {
		s.cfg.Lifetime = DefaultLifetime
	}
	s.throttle = newThrottle(cfg.Throttle, s.now)
	s.signInLog = refusallog.New(s.log, "panel sign-in refused", "panel sign-ins refused", time.Minute)
	s.ssoClient = &http.Client{Timeout: ssoNetTimeout}
	s.sessions = newSessionManager(s.cfg, s.log)
	if cfg.Live != nil {
		s.live = newLiveHub(cfg.Live, cfg.Glance, cfg.LiveMaxPerOrg, s.log)
	}
	var err error
	if s.static, s.built, err = staticFiles(); err != nil {
		return nil, err
	}
	if s.pages, err = parsePages(s.static, s.now); err != nil {
		return nil, err
	}
	s.routes = s.routeTable()
	s.handler = s.mux()
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Run removes expired sessions from the store every interval until ctx
// ends.
func (s *Server) Run(ctx context.Context, interval time.Duration) {
	tick.Every(ctx, interval, func() {
		if n, err := s.cfg.Sessions.DeleteExpiredSessions(ctx, s.now()); err != nil && ctx.Err() == nil {
			s.log.Warn("expired sessions sweep failed", "err", err)
		} else if n > 0 {
			s.log.Debug("expired sessions removed", "count", n)
		}
	})
}

// CloseLive ends every live updates stream and refuses new ones (the
// relay drains: open streams would hold its HTTP shutdown); it returns
// once the hub's readers stopped.
func (s *Server) CloseLive() {
	if s.live != nil {
		s.live.close()
	}
}

// LiveStreams counts the open live updates streams.
func (s *Server) LiveStreams() int {
	if s.live == nil {
		return 0
	}
	return s.live.open()
}

// route is one page or action: who may use it and what serves it. perm ""
// is public (sign-in, static files).
type route struct {
	Method, Pattern string
	Perm            cloud.Permission
	h               func(w http.ResponseWriter, r *http.Request, rq *request)
}

// bodyLimit bounds the body of a POST to pattern: MaxFormBytes, more for
// the DBC upload.
func bodyLimit(pattern string) int64 {
	if pattern == dbcRoute {
		return maxDBCBody
	}
	return MaxFormBytes
}

// RouteInfo describes a route for the role-matrix tests and docs.
type RouteInfo struct {
	Method, Pattern string
	Perm            cloud.Permission
}

// Routes lists every route with the permission it needs ("" public).
func (s *Server) Routes() []RouteInfo {
	out := make([]RouteInfo, 0, len(s.routes))
	for _, rt := range s.routes {
		out = append(out, RouteInfo{rt.Method, rt.Pattern, rt.Perm})
	}
	return out
}

func (s *Server) routeTable() []route {
	rs := []route{
		{"GET", "/panel/login", "", s.loginPage},
		{"POST", "/panel/login", "", s.login},
		{"GET", chooseRoute, "", s.choosePage},
		{"POST", chooseRoute, "", s.choose},
		{"POST", "/panel/logout", cloud.PermView, s.logout},
		{"GET", accountRoute, cloud.PermView, s.accountPage},
		{"GET", passwordRoute, cloud.PermView, s.passwordPage},
		{"POST", passwordRoute, cloud.PermView, s.changePassword},
		{"GET", "/panel/{$}", cloud.PermView, s.fleetPage},
		{"GET", "/panel/devices/{id}", cloud.PermView, s.devicePage},
		{"GET", "/panel/devices/{id}/channels", cloud.PermView, s.channelsFragment},
		{"GET", "/panel/devices/{id}/metrics.json", cloud.PermView, s.metricsData},
		{"POST", "/panel/devices/{id}/channels/{ch}", cloud.PermConfigure, s.putChannel},
		{"POST", dbcRoute, cloud.PermConfigure, s.importDBC},
		{"POST", "/panel/devices/{id}/serial", cloud.PermConfigure, s.patchSerial},
		{"POST", "/panel/devices/{id}/serial/enabled", cloud.PermConfigure, s.switchSerial},
		{"POST", "/panel/devices/{id}/edit", cloud.PermConfigure, s.editDevice},
		{"GET", "/panel/alerts", cloud.PermView, s.alertsPage},
		{"GET", "/panel/alerts/{id}", cloud.PermView, s.alertPage},
		{"GET", "/panel/alerts/rules", cloud.PermView, s.rulesPage},
		{"GET", "/panel/alerts/rules/new", cloud.PermRules, s.newRulePage},
		{"POST", "/panel/alerts/rules", cloud.PermRules, s.createRule},
		{"GET", "/panel/alerts/rules/{id}", cloud.PermView, s.rulePage},
		{"POST", "/panel/alerts/rules/{id}/save", cloud.PermRules, s.saveRule},
		{"POST", "/panel/alerts/rules/{id}/enable", cloud.PermRules, s.enableRule},
		{"POST", "/panel/alerts/rules/{id}/disable", cloud.PermRules, s.disableRule},
		{"POST", "/panel/alerts/rules/{id}/delete", cloud.PermRules, s.deleteRule},
		{"GET", "/panel/alerts/silences", cloud.PermView, s.silencesPage},
		{"POST", "/panel/alerts/silences", cloud.PermAlerts, s.createSilence},
		{"POST", "/panel/alerts/silences/{id}/end", cloud.PermAlerts, s.endSilence},
		{"POST", "/panel/alerts/acknowledge", cloud.PermAlerts, s.alertsAction},
		{"POST", "/panel/alerts/resolve", cloud.PermAlerts, s.alertsAction},
		{"POST", "/panel/alerts/{id}/acknowledge", cloud.PermAlerts, s.alertsAction},
		{"POST", "/panel/alerts/{id}/resolve", cloud.PermAlerts, s.alertsAction},
		{"GET", "/panel/settings/api-keys", cloud.PermKeys, s.keysPage},
		{"POST", "/panel/settings/api-keys", cloud.PermKeys, s.createKey},
		{"POST", "/panel/settings/api-keys/{id}/revoke", cloud.PermKeys, s.revokeKey},
		{"GET", "/panel/settings/members", cloud.PermMembers, s.membersPage},
		{"POST", "/panel/settings/members", cloud.PermMembers, s.addMember},
		{"POST", "/panel/settings/members/{id}/role", cloud.PermMembers, s.setMemberRole},
		{"POST", "/panel/settings/members/{id}/disable", cloud.PermMembers, s.disableMember},
		{"GET", "/panel/settings/notifications", cloud.PermView, s.notificationsPage},
		{"POST", "/panel/settings/notifications", cloud.PermRules, s.addChannel},
		{"POST", "/panel/settings/notifications/{id}/test", cloud.PermRules, s.testChannel},
		{"POST", "/panel/settings/notifications/{id}/remove", cloud.PermRules, s.removeChannel},
	}
	if s.cfg.Points != nil {
		rs = append(rs,
			route{"GET", "/panel/devices/{id}/points", cloud.PermView, s.pointsFragment},
			route{"GET", "/panel/devices/{id}/points/{point}", cloud.PermView, s.pointPage},
			route{"GET", "/panel/devices/{id}/points/{point}/samples.csv", cloud.PermView, s.pointCSV},
			route{"GET", "/panel/devices/{id}/points/{point}/chart.json", cloud.PermView, s.pointChartData},
		)
	}
	if s.cfg.Rollouts != nil {
		rs = append(rs,
			route{"GET", "/panel/rollouts", cloud.PermOperations, s.rolloutsPage},
			route{"GET", "/panel/rollouts/new", cloud.PermOperations, s.newRolloutPage},
			route{"POST", "/panel/rollouts", cloud.PermOperations, s.createRollout},
			route{"GET", "/panel/rollouts/{id}", cloud.PermOperations, s.rolloutPage},
			route{"POST", "/panel/rollouts/{id}/pause", cloud.PermOperations, s.actRollout},
			route{"POST", "/panel/rollouts/{id}/resume", cloud.PermOperations, s.actRollout},
			route{"POST", "/panel/rollouts/{id}/cancel", cloud.PermOperations, s.actRollout},
			route{"POST", "/panel/devices/{id}/reboot", cloud.PermConfigure, s.rebootDevice},
		)
	}
	if s.cfg.Releases != nil {
		rs = append(rs, route{"GET", "/panel/releases", cloud.PermOperations, s.releasesPage})
	}
	if s.cfg.Claims != nil {
		rs = append(rs,
			route{"GET", "/panel/claims", cloud.PermOperations, s.claimsPage},
			route{"POST", "/panel/claims", cloud.PermOperations, s.createClaim},
			route{"POST", "/panel/claims/{id}/revoke", cloud.PermOperations, s.revokeClaim},
		)
	}
	if s.live != nil {
		rs = append(rs, route{"GET", liveRoute, cloud.PermView, s.liveStream})
	}
	rs = append(rs, s.twoFactorRoutes()...)
	if s.cfg.Audit != nil {
		rs = append(rs,
			route{"GET", auditRoute, cloud.PermAudit, s.auditPage},
			route{"GET", auditCSVRoute, cloud.PermAudit, s.auditCSV},
		)
	}
	if s.cfg.OIDC != nil {
		rs = append(rs, s.ssoRoutes()...)
	}
	if s.cfg.Webhooks != nil {
		rs = append(rs,
			route{"GET", "/panel/settings/webhooks", cloud.PermWebhooks, s.webhooksPage},
			route{"POST", "/panel/settings/webhooks/url", cloud.PermWebhooks, s.setAlertURL},
			route{"POST", "/panel/settings/webhooks/rotate", cloud.PermWebhooks, s.rotateSecret},
			route{"POST", "/panel/settings/webhooks/deliveries/{id}/redeliver", cloud.PermWebhooks, s.redeliver},
		)
	}
	return rs
}

// mux wires the routes: static files outside sessions; every other route
// behind cross-origin protection, security headers, the session manager and
// the route's permission check.
func (s *Server) mux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /panel/static/", s.staticHandler())
	mux.Handle("GET "+FaviconPath, s.faviconHandler())
	for _, rt := range s.routes {
		mux.Handle(rt.Method+" "+rt.Pattern, s.sessions.LoadAndSave(s.guard(rt)))
	}
	mux.Handle("/panel/", s.sessions.LoadAndSave(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.renderError(w, r, nil, http.StatusNotFound, "There is no such page.")
	})))
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.renderError(w, r, nil, http.StatusForbidden, "This request came from another site and was refused; nothing was changed.")
	}))
	return securityHeaders(cop.Handler(mux))
}

// csp allows scripts, styles and connections only from the relay itself:
// no inline script, no framing.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// request is what a handler knows about the signed-in user.
type request struct {
	User cloud.User
}

// guard signs the user in from the session, refuses roles without the
// route's permission (403, before anything changes), bounds form bodies and
// calls the route.
func (s *Server) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.Method == http.MethodPost {
			limit := bodyLimit(rt.Pattern)
			r.Body = http.MaxBytesReader(w, r.Body, limit)
			if err := r.ParseForm(); err != nil {
				if tooBig(err) {
					s.renderError(w, r, nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("The form was larger than %d KiB and was refused; nothing was changed.", limit>>10))
					return
				}
				s.renderError(w, r, nil, http.StatusBadRequest, "The form could not be read; nothing was changed.")
				return
			}
		}
		if rt.Perm == "" {
			rt.h(w, r, nil)
			return
		}
		u, ok := s.signedIn(w, r)
		if !ok {
			return
		}
		rq := &request{User: u}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// A change is the user's: the store writes its audit record
			// (cloud/audit.go).
			r = r.WithContext(cloud.WithActor(r.Context(), userActor(r, u)))
		}
		if s.mustChangeFirst(w, r, rt, u) {
			return
		}
		// A temporary password is changed first (mustChangeFirst lets its
		// page through), then an organization that requires two-factor
		// sign-in has it enrolled.
		if !u.MustChangePassword && !s.twoFactorGate(w, r, rq, rt) {
			return
		}
		if !u.Role.Can(rt.Perm) {
			s.renderError(w, r, rq, http.StatusForbidden, fmt.Sprintf("Your role (%s) does not allow this; nothing was changed.", u.Role))
			return
		}
		rt.h(w, r, rq)
	})
}

// tooBig reports whether err is a body over its route's bound.
func tooBig(err error) bool {
	var e *http.MaxBytesError
	return errors.As(err, &e)
}

// fail renders err: a domain error with its status and message, an internal
// one logged and shown as a generic 500.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, rq *request, err error) {
	status := http.StatusInternalServerError
	msg := "Something went wrong on the relay; it has been logged."
	switch cloud.ErrorCode(err) {
	case cloud.ENOTFOUND:
		status, msg = http.StatusNotFound, "There is no such page."
	case cloud.EINTERNAL:
		if errors.Is(err, context.Canceled) {
			return
		}
		s.log.Error("panel request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	case cloud.ECONFLICT, cloud.ERESOLVED, cloud.ECAPABILITY, cloud.ENOTCONFIG, cloud.EUNAVAILABLE:
		status, msg = http.StatusConflict, cloud.ErrorMessage(err)
	default:
		status, msg = http.StatusBadRequest, cloud.ErrorMessage(err)
	}
	s.renderError(w, r, rq, status, msg)
}

// safeNext returns next when it is a path inside the panel, else the fleet
// page: sign-in never redirects off the relay.
func safeNext(next string) string {
	if strings.HasPrefix(next, Prefix) && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\\r\n") && next != "/panel/login" {
		return next
	}
	return Prefix
}

// userActor is u as the actor of a change made through the panel.
func userActor(r *http.Request, u cloud.User) cloud.Actor {
	return cloud.Actor{Kind: cloud.ActorUser, ID: u.ID, Name: u.Email, IP: clientaddr.Host(r)}
}

package relay

import (
	"context"
	"flag"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/panel"
)

// PanelConfig is the web panel's part of Config.
type PanelConfig struct {
	IdleTimeout, Lifetime time.Duration
	Throttle              panel.Throttle
	// LiveMaxPerOrg bounds one organization's open live update streams on
	// this relay.
	LiveMaxPerOrg int
}

func defaultPanelConfig() PanelConfig {
	return PanelConfig{IdleTimeout: panel.DefaultIdleTimeout, Lifetime: panel.DefaultLifetime, Throttle: panel.DefaultThrottle, LiveMaxPerOrg: panel.DefaultLiveMaxPerOrg}
}

func (c *PanelConfig) flags(fs *flag.FlagSet) {
	fs.DurationVar(&c.IdleTimeout, "panel-idle-timeout", c.IdleTimeout, "panel sessions end after this long without a request")
	fs.DurationVar(&c.Lifetime, "panel-session-lifetime", c.Lifetime, "panel sessions end this long after sign-in, used or not")
	fs.IntVar(&c.Throttle.PerAccount, "panel-signin-failures", c.Throttle.PerAccount, "failed panel sign-ins allowed per account from one client address in 15 minutes (the account from all addresses: 100, except where it signed in before)")
	fs.IntVar(&c.LiveMaxPerOrg, "panel-live-max-per-org", c.LiveMaxPerOrg, "open live update streams (panel pages) allowed per organization on this relay; one more is refused with 503")
	fs.IntVar(&c.Throttle.PerAddress, "panel-signin-failures-per-address", c.Throttle.PerAddress, "failed panel sign-ins allowed per client address in 15 minutes")
}

func (c *PanelConfig) validate() error {
	return firstBad(
		check{c.IdleTimeout < time.Minute, "--panel-idle-timeout must be at least 1m"},
		check{c.Lifetime < c.IdleTimeout, "--panel-session-lifetime must be at least as long as --panel-idle-timeout"},
		check{c.Throttle.PerAccount < 1, "--panel-signin-failures must be at least 1"},
		check{c.LiveMaxPerOrg < 1, "--panel-live-max-per-org must be at least 1"},
		check{c.Throttle.PerAddress < 1, "--panel-signin-failures-per-address must be at least 1"},
	)
}

// startPanel mounts the web panel at /panel/ (docs/panel.md) on the same
// listener and store as the API, and sweeps expired sessions.
func (m *Main) startPanel(ctx context.Context, mux *http.ServeMux) (func(context.Context) error, error) {
	c := m.Config.Panel
	p := m.DB.Panel
	srv, err := panel.New(panel.Config{
		Devices: m.Store.Devices, Serial: m.Store.Serial, Alerts: m.Store.Alerts, Points: m.DB.Points(),
		Fleet: p, Glance: p, Users: p, Sessions: p, Keys: p, Webhooks: p, Rules: m.DB.Rules(), TwoFactor: p, OIDC: p, PublicURL: m.Config.Notify.PublicURL,
		Rollouts: m.DB.Rollouts(), Releases: m.DB.Releases(), Claims: m.DB.Claims(), Audit: m.DB.Audit(),
		IdleTimeout: c.IdleTimeout, Lifetime: c.Lifetime, Throttle: c.Throttle, Live: p, LiveMaxPerOrg: c.LiveMaxPerOrg,
		Secure: m.Config.TLSCert != "" || api.IsHTTPS(m.Config.Notify.PublicURL), Logger: m.Logger.With("component", "panel"), Now: m.DB.Now,
	})
	if err != nil {
		return nil, err
	}
	mux.Handle(panel.Prefix, srv)
	mux.Handle("GET "+panel.FaviconPath, srv)
	// Draining ends the live updates' streams (browsers reconnect to
	// another relay) before the HTTP server waits for open requests.
	m.drains = append(m.drains, func(context.Context) error { srv.CloseLive(); return nil })
	stop := background(ctx, func(ctx context.Context) { srv.Run(ctx, 10*time.Minute) })
	return func(ctx context.Context) error { srv.CloseLive(); return stop(ctx) }, nil
}

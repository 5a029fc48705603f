package relay

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud/panel"
)

// panelExtension mounts the web panel at /panel/ (docs/panel.md) on the
// same listener and store as the API, and sweeps expired sessions.
func panelExtension() extension {
	cfg := panel.Config{Throttle: panel.DefaultThrottle}
	return extension{
		name: "panel",
		flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&cfg.IdleTimeout, "panel-idle-timeout", panel.DefaultIdleTimeout, "panel sessions end after this long without a request")
			fs.DurationVar(&cfg.Lifetime, "panel-session-lifetime", panel.DefaultLifetime, "panel sessions end this long after sign-in, used or not")
			fs.IntVar(&cfg.Throttle.PerAccount, "panel-signin-failures", cfg.Throttle.PerAccount, "failed panel sign-ins allowed per account in 15 minutes")
			fs.IntVar(&cfg.Throttle.PerAddress, "panel-signin-failures-per-address", cfg.Throttle.PerAddress, "failed panel sign-ins allowed per client address in 15 minutes")
		},
		start: func(ctx context.Context, m *Main, mux *http.ServeMux) (func(context.Context) error, error) {
			if cfg.IdleTimeout < time.Minute || cfg.Lifetime < cfg.IdleTimeout {
				return nil, fmt.Errorf("%w: --panel-idle-timeout must be at least 1m and --panel-session-lifetime at least as long", errUsage)
			}
			if cfg.Throttle.PerAccount < 1 || cfg.Throttle.PerAddress < 1 {
				return nil, fmt.Errorf("%w: --panel-signin-failures and --panel-signin-failures-per-address must be at least 1", errUsage)
			}
			c := cfg
			p := m.DB.Panel
			c.Devices, c.Serial, c.Alerts = m.Store.Devices, m.Store.Serial, m.Store.Alerts
			c.Fleet, c.Users, c.Sessions, c.Keys, c.Webhooks = p, p, p, p, p
			c.Secure = m.Config.TLSCert != ""
			c.Logger = m.Logger.With("component", "panel")
			c.Now = m.DB.Now
			srv, err := panel.New(c)
			if err != nil {
				return nil, err
			}
			mux.Handle(panel.Prefix, srv)
			sctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				srv.Run(sctx, 10*time.Minute)
			}()
			return func(context.Context) error {
				cancel()
				<-done
				return nil
			}, nil
		},
	}
}

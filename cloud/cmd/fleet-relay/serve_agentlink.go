package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/protocol"
)

// agentLinkExtension mounts the agents' websocket endpoint at
// protocol.Path. What agents report goes to Main.Observers (the alert engine,
// the signal webhooks); desired-configuration changes made through the API
// reach connected agents at once.
func agentLinkExtension() extension {
	var cfg agentlink.Config
	return extension{
		name: "agentlink",
		flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&cfg.OrphanWindow, "agent-orphan-window", 0, "after a restart, how long devices left connected have to reconnect before going OFFLINE (default 90s)")
			fs.DurationVar(&cfg.DefaultHeartbeat, "agent-default-heartbeat", 0, "heartbeat interval assumed when an agent announces none (default 30s)")
		},
		start: func(ctx context.Context, m *Main, mux *http.ServeMux) (func(context.Context) error, error) {
			log := m.Logger.With("component", "agentlink")
			store, err := m.DB.NewAgentStore(log)
			if err != nil {
				return nil, fmt.Errorf("agent store: %w", err)
			}
			c := cfg
			c.Store = store
			c.Observers = []cloud.Observer{&m.Observers}
			c.Logger = log
			c.Now = m.DB.Now
			srv := agentlink.New(c)
			if err := m.Metrics.WatchAgentLink(srv); err != nil {
				return nil, fmt.Errorf("agent endpoint metrics: %w", err)
			}
			mux.Handle(protocol.Path, srv.Handler())
			m.ConfigObservers = append(m.ConfigObservers, srv)
			// Other relays' changes: a config changed through another
			// relay reaches the agent here; a newer connection elsewhere or
			// a revocation closes this one at once; after the listener
			// reconnects, devices here whose desired configuration is
			// newer than what they applied get it again.
			m.Cluster.Config = append(m.Cluster.Config, srv.DesiredConfigChanged)
			m.Cluster.Presence = append(m.Cluster.Presence, srv.Superseded)
			m.Cluster.Revoked = append(m.Cluster.Revoked, srv.Revoked)
			if m.DB.Cluster != nil {
				m.Cluster.Resync = append(m.Cluster.Resync, func(ctx context.Context) error {
					ids, err := m.DB.Cluster.StaleConfigs(ctx)
					for _, id := range ids {
						srv.DesiredConfigChanged(id)
					}
					return err
				})
			}
			// Draining tells agents to reconnect elsewhere (1012) before
			// the listener closes; stop below finds nobody left.
			m.drains = append(m.drains, srv.Shutdown)
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				srv.Run(rctx)
			}()
			return func(sctx context.Context) error {
				err := srv.Shutdown(sctx)
				cancel()
				<-done
				return errors.Join(err, store.Close())
			}, nil
		},
	}
}

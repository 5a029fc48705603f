package relay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/protocol"
)

// AgentConfig is the agents' endpoint's part of Config; 0 takes
// agentlink's default.
type AgentConfig struct {
	OrphanWindow     time.Duration
	DefaultHeartbeat time.Duration
}

func (c *AgentConfig) flags(fs *flag.FlagSet) {
	fs.DurationVar(&c.OrphanWindow, "agent-orphan-window", c.OrphanWindow, "after a restart, how long devices left connected have to reconnect before going OFFLINE")
	fs.DurationVar(&c.DefaultHeartbeat, "agent-default-heartbeat", c.DefaultHeartbeat, "heartbeat interval assumed when an agent announces none")
}

func (c *AgentConfig) validate() error {
	return firstBad(
		check{c.OrphanWindow < 0, "--agent-orphan-window must not be negative"},
		check{c.DefaultHeartbeat < 0 || c.DefaultHeartbeat > time.Hour, "--agent-default-heartbeat must be 0 (agentlink's default) to 1h"},
	)
}

// startAgentLink mounts the agents' websocket endpoint at protocol.Path.
// What agents report goes, after each commit, to the alert engine and then
// to the webhook notifier (signals); desired-configuration changes made
// through the API reach connected agents at once.
func (m *Main) startAgentLink(ctx context.Context, mux *http.ServeMux) (func(context.Context) error, error) {
	log := m.Logger.With("component", "agentlink")
	store, err := m.DB.NewAgentStore(log)
	if err != nil {
		return nil, fmt.Errorf("agent store: %w", err)
	}
	srv := agentlink.New(agentlink.Config{
		Store: store, Observers: []cloud.Observer{m.alerts, m.notifier}, Logger: log, Now: m.DB.Now,
		OrphanWindow: m.Config.Agent.OrphanWindow, DefaultHeartbeat: m.Config.Agent.DefaultHeartbeat,
	})
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
	stopRun := background(ctx, func(ctx context.Context) {
		if err := srv.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("agent endpoint's sweep stopped", "err", err)
		}
	})
	return func(sctx context.Context) error {
		err := srv.Shutdown(sctx)
		stopRun(sctx)
		return errors.Join(err, store.Close())
	}, nil
}

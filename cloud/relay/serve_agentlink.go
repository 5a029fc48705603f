package relay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/tick"
)

// AgentConfig is the agents' endpoint's part of Config; 0 takes
// agentlink's default.
type AgentConfig struct {
	OrphanWindow     time.Duration
	DefaultHeartbeat time.Duration
	// Quota bounds what each device stores (agentlink.Quota; 0: no bound).
	Quota agentlink.Quota
}

func (c *AgentConfig) flags(fs *flag.FlagSet) {
	fs.DurationVar(&c.OrphanWindow, "agent-orphan-window", c.OrphanWindow, "after a restart, how long devices left connected have to reconnect before going OFFLINE")
	fs.DurationVar(&c.DefaultHeartbeat, "agent-default-heartbeat", c.DefaultHeartbeat, "heartbeat interval assumed when an agent announces none")
	fs.IntVar(&c.Quota.Items, "device-ingest-limit", c.Quota.Items, "metric samples, events and point samples one device may store per second (ten seconds' worth at once); beyond it the relay stores its records at that pace and the agent keeps the rest in its spool; 0: no bound")
	fs.IntVar(&c.Quota.Bytes, "device-ingest-bytes", c.Quota.Bytes, "bytes of records one device may send per minute, paced like --device-ingest-limit; 0: no bound")
}

func (c *AgentConfig) validate() error {
	return firstBad(
		check{c.OrphanWindow < 0, "--agent-orphan-window must not be negative"},
		check{c.DefaultHeartbeat < 0 || c.DefaultHeartbeat > time.Hour, "--agent-default-heartbeat must be 0 (agentlink's default) to 1h"},
		check{c.Quota.Items < 0, "--device-ingest-limit must not be negative"},
		check{c.Quota.Bytes < 0, "--device-ingest-bytes must not be negative"},
	)
}

// startAgentLink mounts the agents' websocket endpoint at protocol.Path,
// the release downloads at protocol.ReleasePath and the claim endpoint at
// protocol.ClaimPath.
// What agents report goes, after each commit, to the alert engine and then
// to the webhook notifier (signals); desired-configuration changes made
// through the API reach connected agents at once, those made by another
// relay (PostgreSQL: LISTEN/NOTIFY) or another process on the same SQLite
// file (the admin CLI: the data version moves, watchVersion) within about
// a second.
func (m *Main) startAgentLink(ctx context.Context, mux *http.ServeMux) (func(context.Context) error, error) {
	log := m.Logger.With("component", "agentlink")
	store, err := m.DB.NewAgentStore(log)
	if err != nil {
		return nil, fmt.Errorf("agent store: %w", err)
	}
	srv := agentlink.New(agentlink.Config{
		Store: store, Observers: []cloud.Observer{m.alerts, m.notifier}, Commands: m.DB.Commands, Logger: log, Now: m.DB.Now,
		OrphanWindow: m.Config.Agent.OrphanWindow, DefaultHeartbeat: m.Config.Agent.DefaultHeartbeat, Quota: m.Config.Agent.Quota,
	})
	if err := m.Metrics.WatchAgentLink(srv); err != nil {
		return nil, fmt.Errorf("agent endpoint metrics: %w", err)
	}
	mux.Handle(protocol.Path, srv.Handler())
	// Agents download releases from the relay they are connected to; the
	// binary is in the store, so any relay serves any release.
	mux.Handle(protocol.ReleasePath("{id}"), srv.ReleaseHandler(agentlink.ReleaseConfig{Releases: m.DB.Releases()}))
	mux.Handle(protocol.ClaimPath, srv.ClaimHandler(m.DB.Claims()))
	m.ConfigObservers = append(m.ConfigObservers, srv)
	m.CommandObservers = append(m.CommandObservers, srv)
	// Other relays' changes: a config changed through another
	// relay reaches the agent here; a newer connection elsewhere or
	// a revocation closes this one at once; after the listener
	// reconnects, devices here whose desired configuration is
	// newer than what they applied get it again.
	m.Cluster.Config = append(m.Cluster.Config, srv.DesiredConfigChanged)
	m.Cluster.Presence = append(m.Cluster.Presence, srv.Superseded)
	m.Cluster.Revoked = append(m.Cluster.Revoked, srv.Revoked)
	pushStale := func(ctx context.Context) error {
		ids, err := m.DB.StaleConfigs(ctx)
		for _, id := range ids {
			srv.DesiredConfigChanged(id)
		}
		return err
	}
	stopWatch := func(context.Context) error { return nil }
	if m.DB.Cluster != nil {
		m.Cluster.Resync = append(m.Cluster.Resync, pushStale)
	} else if v := m.DB.Versioner(); v != nil {
		// No notifications on SQLite: another process's change (the
		// admin CLI on the same file) shows as a move of the data version.
		stopWatch = background(ctx, func(ctx context.Context) {
			watchVersion(ctx, v, configPoll, pushStale, log)
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
		stopWatch(sctx)
		err := srv.Shutdown(sctx)
		stopRun(sctx)
		return errors.Join(err, store.Close())
	}, nil
}

// configPoll is how often a relay without cluster notifications (SQLite)
// reads the store's data version to find desired configurations that
// another process changed.
const configPoll = time.Second

// watchVersion reads v's data version every interval until ctx ends and,
// when it moved since the previous read, runs changed (which reads what the
// move may have changed). While nothing is committed it reads the version
// only: on SQLite a few loads from the mapped WAL index. A failed changed
// runs again at the next tick.
func watchVersion(ctx context.Context, v cloud.Versioner, interval time.Duration, changed func(context.Context) error, log *slog.Logger) {
	last, err := v.DataVersion(ctx)
	known := err == nil
	tick.Every(ctx, interval, func() {
		cur, err := v.DataVersion(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("data version not read", "err", err)
			}
			known = false
			return
		}
		if known && cur == last {
			return
		}
		// The version is read before what it tags: a commit after this
		// read moves it again and is caught at the next tick.
		if err := changed(ctx); err != nil {
			if ctx.Err() == nil {
				log.Warn("stale desired configurations not read", "err", err)
			}
			return
		}
		last, known = cur, true
	})
}

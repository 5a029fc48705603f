package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet/fleet/agent/link"
	"github.com/fleet/fleet/agent/spool"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/tick"
)

// agent is one simulated gateway: the agent's own link and spool; metric
// samples go through the spool as the real agent's do, each with its own
// capturedAt so that every stored row is one offered sample.
type agent struct {
	id, token string
	forward   bool
	sp        *spool.Spool
	ln        *link.Link
	offered   atomic.Int64
	beats     atomic.Int64
	next      time.Time // capturedAt of the next sample (metrics goroutine)
}

func newAgent(dir, url, id, token string, forward bool, heartbeat time.Duration) (*agent, error) {
	sp, err := spool.Open(spool.Options{Dir: dir, SyncInterval: time.Second})
	if err != nil {
		return nil, err
	}
	a := &agent{id: id, token: token, forward: forward, sp: sp}
	a.ln, err = link.New(link.Options{
		URL: url, Token: token, HeartbeatInterval: heartbeat, Spool: sp,
		Hello: func() protocol.Hello {
			return protocol.Hello{AgentVersion: "soak", Model: "IG-500", DeviceName: id, Timezone: "UTC",
				MetricsInterval: protocol.Duration{Duration: time.Hour}}
		},
		Heartbeat: a.heartbeat,
		OnConfig: func(_ context.Context, c protocol.Config) protocol.ConfigApplied {
			return protocol.ConfigApplied{Version: c.Version}
		},
		BackoffMin: 200 * time.Millisecond, BackoffMax: 5 * time.Second,
		PingInterval: 5 * time.Second, PongTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		sp.Close()
		return nil, err
	}
	return a, nil
}

// heartbeat reports one channel whose value changes every heartbeat, so a
// forwarding device's heartbeats each make one webhook delivery.
func (a *agent) heartbeat() protocol.Heartbeat {
	n := a.beats.Add(1)
	hb := protocol.Heartbeat{At: resource.T(time.Now()), Status: resource.StatusOnline}
	if a.forward {
		hb.Channels = []protocol.ChannelState{{ID: "gpio-1", Available: true, Live: strconv.FormatInt(n%2, 10)}}
	}
	return hb
}

// sample spools one metric sample, as the agent's metrics loop does.
func (a *agent) sample() error {
	if a.next.IsZero() {
		a.next = time.Now().Truncate(time.Millisecond)
	}
	at := a.next
	a.next = a.next.Add(time.Millisecond) // unique per device: one stored row per offered sample
	if now := time.Now().Truncate(time.Millisecond); now.After(a.next) {
		a.next = now
	}
	rec := protocol.Record{Metric: &resource.MetricSample{CapturedAt: resource.T(at), CPUPct: 12.5, MemPct: 40, DiskUsedPct: 50, TempCPU: 45, LoadAvg1: 0.5}}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := a.sp.Append(b); err != nil {
		return err
	}
	a.offered.Add(1)
	return nil
}

// fleetOfAgents runs the agents' links and their metric loops.
type fleetOfAgents struct {
	agents []*agent
	wg     sync.WaitGroup
	stopM  context.CancelFunc
	metrWG sync.WaitGroup
}

func startAgents(ctx context.Context, dir, url string, creds []deviceCred, forwarding int, heartbeat, metricsEvery time.Duration) (*fleetOfAgents, error) {
	f := &fleetOfAgents{}
	for i, c := range creds {
		a, err := newAgent(filepath.Join(dir, fmt.Sprintf("agent-%04d", i)), url, c.id, c.token, i < forwarding, heartbeat)
		if err != nil {
			f.close()
			return nil, err
		}
		f.agents = append(f.agents, a)
	}
	mctx, cancel := context.WithCancel(ctx)
	f.stopM = cancel
	for i, a := range f.agents {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			// Spread the connects over a few seconds, as a fleet's would.
			select {
			case <-time.After(time.Duration(i) * 3 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			_ = a.ln.Run(ctx)
		}()
		f.metrWG.Add(1)
		go func() {
			defer f.metrWG.Done()
			_ = tick.EveryUntil(mctx, metricsEvery, a.sample)
		}()
	}
	return f, nil
}

// stopSampling ends the metric loops: from then on nothing new is offered.
func (f *fleetOfAgents) stopSampling() {
	if f.stopM != nil {
		f.stopM()
	}
	f.metrWG.Wait()
}

func (f *fleetOfAgents) pending() (records int, connected int) {
	for _, a := range f.agents {
		records += a.sp.Stats().Pending
		if a.ln.Connected() {
			connected++
		}
	}
	return records, connected
}

func (f *fleetOfAgents) wait() { f.wg.Wait() }

func (f *fleetOfAgents) close() {
	for _, a := range f.agents {
		a.sp.Close()
	}
}

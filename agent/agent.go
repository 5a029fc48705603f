// Package agent is fleet-agent, the gateway side of Fleet: it wires the
// spool, the metric sampler, the channel manager, the point sampler, the
// VPN watcher, the passthrough server and the relay link together. Config comes from
// ParseConfig; New builds an Agent and Run runs it until its context ends,
// then spools agent.stopped and makes a last flush. The main in
// agent/cmd/fleet-agent only handles signals.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet/fleet/agent/agentmetrics"
	"github.com/fleet/fleet/agent/iomgr"
	"github.com/fleet/fleet/agent/link"
	"github.com/fleet/fleet/agent/metrics"
	"github.com/fleet/fleet/agent/passthrough"
	"github.com/fleet/fleet/agent/points"
	"github.com/fleet/fleet/agent/reboot"
	"github.com/fleet/fleet/agent/spool"
	"github.com/fleet/fleet/agent/vpnwatch"
	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/tick"
)

// Version is the agent's version, reported in Hello and agent.started and
// printed by --version; `make build AGENT_VERSION=V` stamps it at link
// time (-X github.com/fleet/fleet/agent.Version=V).
var Version = "0.1.0-dev"

// configFile holds the last applied desired configuration in the state dir,
// so a restarted agent runs it before the relay is reachable.
const configFile = "serial-config.json"

// Options are the parts of an Agent a test or an embedding program may
// replace.
type Options struct {
	// Backend replaces the backend --hw selects.
	Backend hw.Backend
	// Now replaces time.Now.
	Now func() time.Time
	// JSONOnly makes the link behave as agents from before CBOR: it offers
	// no codec and speaks JSON (link.Options.JSONOnly); tests use it.
	JSONOnly bool
	// Updates joins the updater (agent/update) that the main booted
	// before the agent; nil: update commands are answered failed.
	Updates *Updates
	// Rebooter replaces logind (reboot.Logind) for reboot commands.
	Rebooter reboot.Rebooter
}

// Agent is a running fleet-agent.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	model catalog.Model

	spool   *spool.Spool
	sampler *metrics.Sampler
	points  *points.Sampler
	io      *iomgr.Manager
	link    *link.Link
	vpn     *vpnwatch.Watcher
	pt      *passthrough.Server
	// prom is the agent's own Prometheus metrics (nil without
	// --metrics-listen); metricsAddr is where they are served.
	prom        *agentmetrics.Metrics
	metricsAddr string

	// Commands (commands.go): the journal of the commands taken, the
	// queue to the command goroutine, the updater and the rebooter.
	journal  *commandJournal
	cmds     chan protocol.Command
	updates  *Updates
	updater  Updater
	rebooter reboot.Rebooter
	// rebooting: a reboot was asked for (heartbeats say REBOOTING);
	// configApplied: the configuration held was applied on this run.
	rebooting     atomic.Bool
	configApplied atomic.Bool

	mu          sync.Mutex
	statusErr   string
	ptErr       string
	clockWarned bool
}

// New builds an Agent from cfg: it opens the spool in cfg.StateDir and
// prepares every part; nothing runs until Run.
func New(cfg Config, log *slog.Logger, opts Options) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	model := catalog.MustLookup(cfg.Model)
	if cfg.Name == "" {
		cfg.Name, _ = os.Hostname()
	}
	if cfg.Timezone == "" {
		cfg.Timezone = detectTimezone("/etc")
	}
	if cfg.VPNInterface == VPNAuto {
		if cfg.VPNInterface = defaultVPN("/etc"); cfg.VPNInterface == "" {
			log.Info("no WireGuard interface wg0 (nor /etc/wireguard/wg0.conf): the VPN is not watched; set vpn-interface to watch one")
		}
	}
	if cfg.FirmwareVersion == "" {
		cfg.FirmwareVersion = osReleaseVersion(cfg.OSRelease)
	}
	a := &Agent{cfg: cfg, log: log, now: opts.Now, model: model, cmds: make(chan protocol.Command, commandQueue),
		updates: opts.Updates, rebooter: opts.Rebooter}
	if a.rebooter == nil {
		a.rebooter = reboot.Logind{}
	}
	if opts.Updates != nil {
		a.updater = opts.Updates.Updater
	}

	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	journal, err := openJournal(cfg.StateDir)
	if err != nil {
		log.Error("command journal", "err", err)
	}
	a.journal = journal
	sp, err := spool.Open(spool.Options{
		Dir:      filepath.Join(cfg.StateDir, "spool"),
		MaxBytes: cfg.SpoolMaxBytes,
		MaxAge:   cfg.SpoolMaxAge,
		Now:      opts.Now,
		Logger:   log.With("component", "spool"),
	})
	if err != nil {
		return nil, err
	}
	a.spool = sp
	a.sampler = metrics.NewSampler(metrics.Options{
		ProcRoot: cfg.ProcRoot, SysRoot: cfg.SysRoot, DiskPath: cfg.DiskPath,
		Now: opts.Now, Logger: log.With("component", "metrics"),
	})

	backend := opts.Backend
	if backend == nil {
		if backend, err = newBackend(cfg, log); err != nil {
			sp.Close()
			return nil, err
		}
	}
	if cfg.PassthroughListen != "" && model.Has(resource.CapabilitySerialIO) {
		a.pt, err = passthrough.New(passthrough.Config{Listen: cfg.PassthroughListen, Interface: cfg.VPNInterface},
			log.With("component", "passthrough"))
		if err != nil {
			sp.Close()
			return nil, err
		}
	}
	iopts := iomgr.Options{
		Backend:         backend,
		Model:           model,
		Devices:         cfg.Ports,
		RecheckInterval: cfg.RecheckInterval,
		DevRoot:         cfg.DevRoot,
		Emit:            a.emitIO,
		Logger:          log.With("component", "iomgr"),
	}
	if a.pt != nil {
		iopts.Passthrough = ptAdapter{a}
	}
	if a.io, err = iomgr.New(iopts); err != nil {
		a.closeParts()
		return nil, err
	}
	a.points = points.New(points.Options{Source: a.io.Points, Record: a.record, Now: opts.Now, Logger: log.With("component", "points")})
	if cfg.VPNInterface != "" {
		a.vpn, err = vpnwatch.Open(vpnwatch.Config{Interface: cfg.VPNInterface, Emit: a.emit, Logger: log})
		if err != nil {
			// No WireGuard support at all: report it and run without.
			log.Warn("VPN watch unavailable", "interface", cfg.VPNInterface, "err", err)
			a.vpn = nil
		}
	}
	a.link, err = link.New(link.Options{
		URLs:              cfg.Relays,
		Token:             cfg.Token,
		Hello:             a.hello,
		Heartbeat:         a.heartbeat,
		HeartbeatInterval: cfg.Heartbeat,
		Spool:             sp,
		OnConfig:          a.onConfig,
		OnCommand:         a.onCommand,
		OnRefused: func(seq uint64) {
			a.event(protocol.EventSpoolDropped, resource.SeverityError,
				fmt.Sprintf("record %d dropped: the relay refused it twice", seq),
				map[string]any{"count": 1, "seq": seq, "reason": "refused by relay"})
		},
		BackoffMin: cfg.BackoffMin,
		BackoffMax: cfg.BackoffMax,
		Logger:     log.With("component", "link"),
		JSONOnly:   opts.JSONOnly,
	})
	if err != nil {
		a.closeParts()
		return nil, err
	}
	if cfg.MetricsListen != "" {
		a.prom = a.newPrometheus()
	}
	if a.updates != nil {
		a.updates.attach(a)
	}
	a.settleCommands()
	return a, nil
}

// Run runs the agent until ctx ends: channels, metrics, VPN watch and the
// relay link. On the way out it spools agent.stopped, gives the link a short
// final flush and closes everything.
func (a *Agent) Run(ctx context.Context) error {
	defer a.closeParts()
	a.log.Info("fleet-agent starting", "version", Version, "config", a.cfg.String())
	a.event(protocol.EventAgentStarted, resource.SeverityInfo, fmt.Sprintf("fleet-agent %s started", Version),
		map[string]any{"version": Version, "model": a.cfg.Model, "hw": a.cfg.HW, "firmwareVersion": a.cfg.FirmwareVersion})
	a.reportQuarantined()

	if a.prom != nil {
		srv, err := a.prom.Listen(a.cfg.MetricsListen, a.log.With("component", "metrics-server"))
		if err != nil {
			return err
		}
		defer srv.Close()
		a.mu.Lock()
		a.metricsAddr = srv.Addr()
		a.mu.Unlock()
		a.log.Info("agent metrics listening", "addr", srv.Addr(), "path", agentmetrics.Path)
	}
	a.io.Start(ctx)
	a.applySaved(ctx)
	a.configApplied.Store(true)

	var wg sync.WaitGroup
	bg, stopBG := context.WithCancel(context.Background())
	if a.vpn != nil {
		wg.Go(func() { _ = a.vpn.Run(bg) })
	}
	wg.Go(func() { a.metricsLoop(bg) })
	wg.Go(func() { a.points.Run(bg) })
	wg.Go(func() { a.syncLoop(bg) })
	wg.Go(func() { a.commandLoop(bg) })
	if a.updater != nil {
		wg.Go(func() {
			if err := a.updater.Run(bg); err != nil {
				a.log.Error("updater stopped", "err", err)
			}
		})
	}
	linkCtx, stopLink := context.WithCancel(context.Background())
	linkDone := make(chan struct{})
	go func() { _ = a.link.Run(linkCtx); close(linkDone) }()

	<-ctx.Done()
	a.log.Info("fleet-agent stopping")
	stopBG()
	wg.Wait()
	a.event(protocol.EventAgentStopped, resource.SeverityInfo, fmt.Sprintf("fleet-agent %s stopped", Version),
		map[string]any{"version": Version})
	if err := a.spool.Sync(); err != nil {
		a.log.Warn("spool sync", "err", err)
	}
	stopLink() // the link flushes what it can within its drain timeout
	<-linkDone
	a.log.Info("fleet-agent stopped", "pending", a.spool.Stats().Pending)
	return nil
}

// ReloadStatus re-reads the status file and sends a heartbeat at once; the
// main calls it on SIGUSR1.
func (a *Agent) ReloadStatus() { a.link.Kick() }

func (a *Agent) closeParts() {
	if a.io != nil {
		a.io.Close()
	}
	if a.pt != nil {
		a.pt.Close()
	}
	if a.vpn != nil {
		a.vpn.Close()
	}
	if a.spool != nil {
		if err := a.spool.Close(); err != nil {
			a.log.Warn("spool close", "err", err)
		}
	}
}

func (a *Agent) metricsLoop(ctx context.Context) {
	// The first sample comes after at most 10s (the CPU collector needs a
	// base), then one every interval.
	first := min(a.cfg.MetricsInterval, 10*time.Second)
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(a.cfg.MetricsInterval)
		s, err := a.sampler.Sample()
		if err != nil {
			a.log.Debug("metrics sample incomplete", "err", err)
			a.countCollectorErrors(err)
		}
		a.record(protocol.Record{Metric: &s})
		// The end-to-end tests compare what the relay stored against these
		// lines (test/e2e).
		a.log.Debug("metric captured", "capturedAt", resource.FormatTime(s.CapturedAt.Time))
	}
}

// syncLoop fsyncs the spool every few seconds when it holds unsynced data
// and reports records the bounds dropped.
func (a *Agent) syncLoop(ctx context.Context) {
	tick.Every(ctx, 5*time.Second, func() {
		if err := a.spool.Sync(); err != nil {
			a.log.Warn("spool sync", "err", err)
		}
		a.reportDropped()
	})
}

func (a *Agent) reportDropped() {
	if n := a.spool.TakeDropped(); n > 0 {
		if a.prom != nil {
			a.prom.SpoolDropped(n)
		}
		a.log.Warn("spool bound dropped unsent records", "count", n)
		a.event(protocol.EventSpoolDropped, resource.SeverityWarning,
			fmt.Sprintf("%d records dropped from the spool before the relay stored them (size or age bound)", n),
			map[string]any{"count": n})
	}
}

// reportQuarantined reports the spool segments repaired when the spool was
// opened (corrupt bytes or records out of sequence).
func (a *Agent) reportQuarantined() {
	for _, q := range a.spool.TakeQuarantined() {
		a.event(protocol.EventSpoolQuarantined, resource.SeverityWarning,
			fmt.Sprintf("spool segment %s repaired at start: %d records out of sequence and %d corrupt bytes removed (original kept as %s)",
				q.Segment, q.Disordered, q.CorruptBytes, filepath.Base(q.Path)),
			map[string]any{"segment": q.Segment, "quarantine": filepath.Base(q.Path), "disordered": q.Disordered, "corruptBytes": q.CorruptBytes})
	}
}

// record appends a record to the spool, within the relay's bounds.
func (a *Agent) record(r protocol.Record) {
	if err := link.Sanitize(&r); err != nil {
		a.mu.Lock()
		first := !a.clockWarned
		a.clockWarned = true
		a.mu.Unlock()
		if !errors.Is(err, link.ErrClockNotSet) {
			a.log.Error("record not spooled", "err", err)
		} else if first {
			a.log.Warn("records are not spooled while the system clock is before 2020 (no RTC or NTP yet)")
		}
		return
	}
	b, err := link.EncodeRecord(r)
	if err != nil {
		a.log.Error("encode record", "err", err)
		return
	}
	if _, err := a.spool.Append(b); err != nil {
		if !errors.Is(err, spool.ErrClosed) {
			a.log.Error("spool append", "err", err)
		}
	}
}

// emit spools an event made elsewhere (vpnwatch).
func (a *Agent) emit(ev protocol.Event) {
	if ev.ID == "" {
		ev.ID = ids.New()
	}
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = resource.T(a.now())
	}
	a.record(protocol.Record{Event: &ev})
}

func (a *Agent) emitIO(ev iomgr.Event) {
	a.countChannelError(ev)
	a.event(ev.Type, ev.Severity, ev.Message, ev.Data)
}

// event spools an event of the agent.
func (a *Agent) event(typ string, sev resource.Severity, msg string, data map[string]any) {
	var raw json.RawMessage
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			a.log.Error("encode event data", "type", typ, "err", err)
		}
		raw = b
	}
	a.emit(protocol.Event{Type: typ, Severity: sev, Message: msg, Data: raw})
}

func (a *Agent) hello() protocol.Hello {
	return protocol.Hello{
		AgentVersion:    Version,
		Arch:            protocol.ArchOf(runtime.GOARCH),
		FirmwareVersion: a.cfg.FirmwareVersion,
		Model:           a.cfg.Model,
		DeviceName:      a.cfg.Name,
		DeviceLocation:  a.cfg.Location,
		Timezone:        a.cfg.Timezone,
		AppliedVersion:  a.io.Version(),
		MetricsInterval: protocol.Duration{Duration: a.cfg.MetricsInterval},
	}
}

func (a *Agent) heartbeat() protocol.Heartbeat {
	status, err := readStatus(a.cfg.StatusFile)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	a.mu.Lock()
	if msg != a.statusErr {
		a.statusErr = msg
		if msg != "" {
			a.log.Warn("status file ignored", "err", err)
		}
	}
	a.mu.Unlock()
	hb := protocol.Heartbeat{
		Status:         a.commandStatus(status),
		IPAddress:      defaultRouteIP(a.cfg.ProcRoot),
		AppliedVersion: a.io.Version(),
		Channels:       a.io.States(),
	}
	now := a.now()
	for i := range hb.Channels {
		hb.Channels[i].Points = a.points.States(hb.Channels[i].ID, now)
	}
	if a.vpn != nil {
		hb.VPN = a.vpn.State()
		if hb.IPAddress == "" {
			hb.IPAddress = interfaceIPv4(a.cfg.VPNInterface)
		}
	}
	return hb
}

// onConfig applies a configuration from the relay and keeps it in the
// state dir.
func (a *Agent) onConfig(ctx context.Context, cfg protocol.Config) protocol.ConfigApplied {
	err := a.io.Apply(ctx, cfg)
	res := protocol.ConfigApplied{Version: cfg.Version}
	if err != nil {
		res.Error = err.Error()
	}
	if werr := a.saveConfig(cfg); werr != nil {
		a.log.Warn("save applied configuration", "err", werr)
	}
	a.log.Info("configuration applied", "version", cfg.Version, "enabled", cfg.Enabled, "mode", cfg.Mode, "error", res.Error)
	return res
}

func (a *Agent) saveConfig(cfg protocol.Config) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	p := filepath.Join(a.cfg.StateDir, configFile)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// applySaved applies the configuration saved by the last run, if any.
func (a *Agent) applySaved(ctx context.Context) {
	b, err := os.ReadFile(filepath.Join(a.cfg.StateDir, configFile))
	if err != nil {
		return
	}
	var cfg protocol.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		a.log.Warn("saved configuration unreadable; waiting for the relay's", "err", err)
		return
	}
	if err := a.io.Restore(ctx, cfg); err != nil {
		a.log.Warn("saved configuration applied with errors", "version", cfg.Version, "err", err)
	}
}

// ptAdapter keeps the passthrough server in step with the channel manager.
type ptAdapter struct{ a *Agent }

func (p ptAdapter) Sync(ctx context.Context, mode string, enabled bool, bs []iomgr.Binding) map[string]string {
	if !enabled {
		mode = resource.ModeManaged
	}
	var chans []passthrough.Channel
	for _, b := range bs {
		if b.Channel.Group != "uart" && b.Channel.Group != "rs485" {
			continue
		}
		raw, _ := b.Port.(passthrough.RawServer)
		chans = append(chans, passthrough.Channel{ID: b.Channel.ID, Raw: raw})
	}
	anyRaw := false
	for _, c := range chans {
		anyRaw = anyRaw || c.Raw != nil
	}
	if !anyRaw {
		// Nothing can be exposed (simulated or missing ports): no listener,
		// and no complaint about a missing VPN address.
		mode = resource.ModeManaged
	}
	err := p.a.pt.Apply(mode, chans)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	p.a.mu.Lock()
	changed := msg != p.a.ptErr
	p.a.ptErr = msg
	p.a.mu.Unlock()
	if changed && err != nil {
		p.a.log.Warn("passthrough", "mode", mode, "err", err)
		p.a.event(protocol.EventSerialError, resource.SeverityError, msg, map[string]any{"mode": mode, "error": msg})
	}
	out := map[string]string{}
	for _, c := range chans {
		if addr := p.a.pt.PassthroughAddress(c.ID); addr != "" {
			out[c.ID] = addr
		}
	}
	return out
}

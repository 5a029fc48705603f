// Package alert is the relay's alert engine. It watches what agents report
// (it is a cloud.Observer) and opens and resolves alerts of the
// organization's rules: metric thresholds held for N consecutive samples and
// released below a lower clear threshold (hysteresis), device_offline from
// the device's status, and vpn_down from the agent's own events. Each change
// is stored with its device event (alert.<rule> or alert.resolved) and told
// to a cloud.AlertObserver (the alert webhooks).
//
// The engine keeps no state that correctness depends on in memory: the
// consecutive-sample count is rebuilt on each metrics batch from the stored
// samples, and open alerts are read from the store, so a restarted relay
// continues where the last one stopped.
package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/orgcache"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/tick"
)

// Rule names.
const (
	RuleHighCPU       = "high_cpu"
	RuleHighMem       = "high_mem"
	RuleDiskFull      = "disk_full"
	RuleHighTemp      = "high_temp"
	RuleDeviceOffline = "device_offline"
	RuleVPNDown       = "vpn_down"
)

// Event types the engine reads from agents.
const (
	EventVPNDown = protocol.EventVPNDown // the agent's own event: it is the alert's event, not stored twice
	EventVPNUp   = protocol.EventVPNUp
	// EventResolved is the device event stored when an alert closes.
	EventResolved = protocol.EventAlertResolved
)

// The engine's store and the types of its calls are declared in cloud
// (cloud.AlertEngineStore), with the other parts of the store bundle; they
// keep their names here.
type (
	Store     = cloud.AlertEngineStore
	Rule      = cloud.AlertRule
	RuleState = cloud.AlertRuleState
	Opening   = cloud.AlertOpening
	Offline   = cloud.OfflineDevice
)

// Config configures an Engine.
type Config struct {
	Store Store
	// Observer hears of every alert the engine opens or resolves; may be nil.
	Observer cloud.AlertObserver
	Logger   *slog.Logger
	Now      func() time.Time
	// RulesTTL is how long an organization's rules are cached; 0 means 30 s.
	RulesTTL time.Duration
	// SweepInterval is how often Run looks for devices silent for three
	// heartbeat intervals; 0 means 5 s.
	SweepInterval time.Duration
	// Leader, when set, tells Run whether this relay sweeps now: relays
	// sharing a store take turns through a lease, so one evaluates the
	// timers of every device (the store's unique open alert keeps a device
	// to one alert whoever sweeps). Nil: always.
	Leader func(ctx context.Context) bool
}

// Engine evaluates alert rules. It implements cloud.Observer.
type Engine struct {
	cfg   Config
	log   *slog.Logger
	locks [256]sync.Mutex // per-device serialization, striped

	rules orgcache.Cache[[]Rule]

	mu  sync.Mutex
	vpn map[string]bool // device -> a vpn_down alert may be open (lazily loaded)
}

var _ cloud.Observer = (*Engine)(nil)

// New returns an Engine.
func New(cfg Config) *Engine {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RulesTTL <= 0 {
		cfg.RulesTTL = 30 * time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 5 * time.Second
	}
	return &Engine{cfg: cfg, log: cfg.Logger.With("component", "alert"), vpn: map[string]bool{},
		rules: orgcache.Cache[[]Rule]{TTL: cfg.RulesTTL, Now: cfg.Now, Load: cfg.Store.Rules}}
}

func (e *Engine) lock(deviceID string) func() {
	h := fnv.New32a()
	h.Write([]byte(deviceID))
	m := &e.locks[h.Sum32()%uint32(len(e.locks))]
	m.Lock()
	return m.Unlock
}

func (e *Engine) rule(ctx context.Context, orgID, name string) (Rule, bool) {
	rs, err := e.rules.Get(ctx, orgID)
	if err != nil {
		e.log.Error("alert rules", "org", orgID, "err", err)
		return Rule{}, false
	}
	for _, r := range rs {
		if r.Name == name {
			return r, r.Enabled
		}
	}
	return Rule{}, false
}

// metricValue returns the sample's value of a rule's metric.
func metricValue(s resource.MetricSample, metric string) (float64, bool) {
	switch metric {
	case "cpuPct":
		return s.CPUPct, true
	case "memPct":
		return s.MemPct, true
	case "diskUsedPct":
		return s.DiskUsedPct, true
	case "tempCpu":
		return s.TempCPU, true
	}
	return 0, false
}

// metricLabel names a metric in alert messages.
func metricLabel(metric string) string {
	switch metric {
	case "cpuPct":
		return "CPU usage"
	case "memPct":
		return "Memory usage"
	case "diskUsedPct":
		return "Disk usage"
	case "tempCpu":
		return "CPU temperature"
	}
	return metric
}

func formatValue(metric string, v float64) string {
	if metric == "tempCpu" {
		return fmt.Sprintf("%.1f °C", v)
	}
	return fmt.Sprintf("%.1f%%", v)
}

// MetricsStored evaluates the threshold rules over the stored samples. The
// count of consecutive samples at or above a threshold is rebuilt from the
// samples before the batch, so it survives restarts; samples captured up to
// the rule's last resolution do not count, so an alert resolved by hand
// opens again only after N new samples over the threshold.
func (e *Engine) MetricsStored(ctx context.Context, dev cloud.DeviceRef, samples []resource.MetricSample) {
	if len(samples) == 0 {
		return
	}
	rs, err := e.rules.Get(ctx, dev.OrgID)
	if err != nil {
		e.log.Error("alert rules", "org", dev.OrgID, "err", err)
		return
	}
	maxN := 0
	var active []Rule
	for _, r := range rs {
		if _, ok := metricValue(resource.MetricSample{}, r.Metric); ok && r.Enabled {
			active = append(active, r)
			maxN = max(maxN, r.Consecutive)
		}
	}
	if len(active) == 0 {
		return
	}
	first, last := samples[0].CapturedAt.Time, samples[0].CapturedAt.Time
	for _, s := range samples {
		if s.CapturedAt.Before(first) {
			first = s.CapturedAt.Time
		}
		if s.CapturedAt.After(last) {
			last = s.CapturedAt.Time
		}
	}
	defer e.lock(dev.ID)()
	window, states, err := e.cfg.Store.Window(ctx, dev.OrgID, dev.ID, last, len(samples)+maxN)
	if err != nil {
		e.log.Error("alert window", "device", dev.ID, "err", err)
		return
	}
	for _, r := range active {
		e.evalThreshold(ctx, dev, r, states[r.ID], window, first)
	}
}

func (e *Engine) evalThreshold(ctx context.Context, dev cloud.DeviceRef, r Rule, st RuleState, window []resource.MetricSample, batchFrom time.Time) {
	open := st.OpenID != ""
	n := max(r.Consecutive, 1)
	count := 0
	for _, s := range window {
		if !st.LastResolved.IsZero() && !s.CapturedAt.After(st.LastResolved) {
			continue
		}
		v, _ := metricValue(s, r.Metric)
		if v >= r.Threshold {
			count++
		} else {
			count = 0
		}
		if s.CapturedAt.Before(batchFrom) {
			continue // earlier samples only prime the count
		}
		switch {
		case !open && count >= n:
			label := metricLabel(r.Metric)
			msg := fmt.Sprintf("%s %s at or above %s for %d consecutive samples", label, formatValue(r.Metric, v), formatValue(r.Metric, r.Threshold), n)
			payload, _ := json.Marshal(map[string]any{"rule": r.Name, "metric": r.Metric, "value": v, "threshold": r.Threshold,
				"clearThreshold": r.Clear, "consecutive": n, "capturedAt": s.CapturedAt})
			if _, ok := e.open(ctx, Opening{OrgID: dev.OrgID, DeviceID: dev.ID, Rule: r, Message: msg, Payload: payload, At: e.cfg.Now(), WithEvent: true}); ok {
				open = true
			}
		case open && v < r.Clear:
			msg := fmt.Sprintf("%s resolved: %s %s below %s", r.Name, metricLabel(r.Metric), formatValue(r.Metric, v), formatValue(r.Metric, r.Clear))
			if e.resolve(ctx, dev, r, msg) {
				open = false
				count = 0
				st.LastResolved = s.CapturedAt.Time
			}
		}
	}
}

func (e *Engine) open(ctx context.Context, o Opening) (resource.Alert, bool) {
	a, ok, err := e.cfg.Store.OpenAlert(ctx, o)
	if err != nil {
		e.log.Error("open alert", "device", o.DeviceID, "rule", o.Rule.Name, "err", err)
		return a, false
	}
	if !ok {
		return a, false
	}
	e.log.Info("alert opened", "device", o.DeviceID, "rule", o.Rule.Name, "alert", a.ID)
	if e.cfg.Observer != nil {
		e.cfg.Observer.AlertChanged(ctx, "alert.opened", a)
	}
	return a, true
}

func (e *Engine) resolve(ctx context.Context, dev cloud.DeviceRef, r Rule, msg string) bool {
	a, ok, err := e.cfg.Store.ResolveAlert(ctx, dev.OrgID, dev.ID, r, msg, e.cfg.Now())
	if err != nil {
		e.log.Error("resolve alert", "device", dev.ID, "rule", r.Name, "err", err)
		return false
	}
	if !ok {
		return false
	}
	e.log.Info("alert resolved", "device", dev.ID, "rule", r.Name, "alert", a.ID)
	if e.cfg.Observer != nil {
		e.cfg.Observer.AlertChanged(ctx, "alert.resolved", a)
	}
	return true
}

// HeartbeatStored resolves vpn_down when the heartbeat reports the tunnel up.
func (e *Engine) HeartbeatStored(ctx context.Context, dev cloud.DeviceRef, hb cloud.Heartbeat) {
	if hb.VPN == nil || !hb.VPN.Up {
		return
	}
	e.mu.Lock()
	mayBeOpen, known := e.vpn[dev.ID]
	e.mu.Unlock()
	if known && !mayBeOpen {
		return // cheap path: no vpn_down alert open
	}
	r, ok := e.rule(ctx, dev.OrgID, RuleVPNDown)
	if !ok {
		return
	}
	defer e.lock(dev.ID)()
	e.resolveIfOpen(ctx, dev, r, fmt.Sprintf("vpn_down resolved: tunnel %s is up", hb.VPN.InterfaceName))
	e.mu.Lock()
	e.vpn[dev.ID] = false
	e.mu.Unlock()
}

// resolveIfOpen resolves the device's alert of r when one is open, reading
// first so that the common case (nothing open) costs no write.
func (e *Engine) resolveIfOpen(ctx context.Context, dev cloud.DeviceRef, r Rule, msg string) bool {
	id, err := e.cfg.Store.OpenAlertID(ctx, dev.ID, r.ID)
	if err != nil {
		e.log.Error("open alert lookup", "device", dev.ID, "rule", r.Name, "err", err)
		return false
	}
	if id == "" {
		return false
	}
	return e.resolve(ctx, dev, r, msg)
}

// EventsStored opens vpn_down on the agent's alert.vpn_down event (that
// event is the alert's device event) and resolves it on vpn.up.
func (e *Engine) EventsStored(ctx context.Context, dev cloud.DeviceRef, events []resource.Event) {
	for _, ev := range events {
		switch ev.Type {
		case EventVPNDown:
			r, ok := e.rule(ctx, dev.OrgID, RuleVPNDown)
			if !ok {
				continue
			}
			msg := ev.Message
			if msg == "" {
				msg = "VPN tunnel down"
			}
			payload := ev.Data
			if len(payload) == 0 || !json.Valid(payload) {
				payload = json.RawMessage(`{}`)
			}
			unlock := e.lock(dev.ID)
			e.open(ctx, Opening{OrgID: dev.OrgID, DeviceID: dev.ID, Rule: r, Message: msg, Payload: payload, At: e.cfg.Now()})
			unlock()
			e.mu.Lock()
			e.vpn[dev.ID] = true
			e.mu.Unlock()
		case EventVPNUp:
			r, ok := e.rule(ctx, dev.OrgID, RuleVPNDown)
			if !ok {
				continue
			}
			unlock := e.lock(dev.ID)
			e.resolveIfOpen(ctx, dev, r, "vpn_down resolved: tunnel is up")
			unlock()
			e.mu.Lock()
			e.vpn[dev.ID] = false
			e.mu.Unlock()
		}
	}
}

// StatusChanged checks a device that went OFFLINE at once (device_offline
// opens when it has been silent for three heartbeat intervals; Run finds
// those that get there later, such as an agent that disconnected), and
// resolves device_offline when the device is ONLINE again.
func (e *Engine) StatusChanged(ctx context.Context, dev cloud.DeviceRef, from, to resource.DeviceStatus) {
	switch to {
	case resource.StatusOffline:
		e.sweep(ctx, dev.ID)
	case resource.StatusOnline:
		r, ok := e.rule(ctx, dev.OrgID, RuleDeviceOffline)
		if !ok {
			return
		}
		defer e.lock(dev.ID)()
		e.resolveIfOpen(ctx, dev, r, "device_offline resolved: device is online")
	}
}

// Run opens device_offline for devices silent for three heartbeat
// intervals, every SweepInterval, until ctx ends. The condition is read from
// the store, so a sweep after a restart catches up with what happened while
// the relay was down.
func (e *Engine) Run(ctx context.Context) {
	tick.NowAndEvery(ctx, e.cfg.SweepInterval, func() {
		if e.cfg.Leader == nil || e.cfg.Leader(ctx) {
			e.sweep(ctx, "")
		}
	})
}

func (e *Engine) sweep(ctx context.Context, deviceID string) {
	for {
		offline, err := e.cfg.Store.OfflineDevices(ctx, e.cfg.Now(), deviceID, "", 500)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Error("offline sweep", "err", err)
			}
			return
		}
		opened := 0
		for _, o := range offline {
			r, ok := e.rule(ctx, o.Device.OrgID, RuleDeviceOffline)
			if !ok {
				continue
			}
			payload, _ := json.Marshal(map[string]any{"rule": r.Name, "lastSeen": resource.T(o.LastSeen), "heartbeatIntervalMs": o.Heartbeat.Milliseconds()})
			msg := fmt.Sprintf("Device offline: no heartbeat since %s (3 heartbeat intervals of %s)", resource.FormatTime(o.LastSeen), o.Heartbeat)
			unlock := e.lock(o.Device.ID)
			if _, ok := e.open(ctx, Opening{OrgID: o.Device.OrgID, DeviceID: o.Device.ID, Rule: r, Message: msg, Payload: payload, At: e.cfg.Now(), WithEvent: true, LastSeen: o.LastSeen}); ok {
				opened++
			}
			unlock()
		}
		if len(offline) < 500 || opened == 0 {
			return
		}
	}
}

// EventData is the data of an alert's device event (alert.<rule>): the
// alert's payload plus alertId, ruleId and rule. Stores record it with the
// alert.
func EventData(payload json.RawMessage, alertID string, r Rule) (json.RawMessage, error) {
	m := map[string]any{}
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &m); err != nil {
			m = map[string]any{}
		}
	}
	m["alertId"], m["ruleId"], m["rule"] = alertID, r.ID, r.Name
	return json.Marshal(m)
}

// Package alert is the relay's alert engine. It watches what agents report
// (it is a cloud.Observer and a cloud.PointObserver) and opens and resolves
// alerts by the organizations' rules, which are data (DESIGN.md "Alert
// rules and notifications", docs/alerts.md): thresholds on a metric or a
// point held for a while and released past a clear value (Threshold), a
// device offline, an agent's event, a device held in a status. Each change
// is stored with its device event (alert.<rule> or alert.resolved) and its
// notifications, in one transaction of the store, and told to a
// cloud.AlertObserver.
//
// Rules are cached per organization and indexed per device (the rules in
// its scope, by source), so that a sample costs no store round trip: the
// store is asked when an alert opens or resolves, when a device is first
// seen and after a while (an alert resolved through the API or by another
// relay), and when a restarted engine must learn since when a condition
// has held (History). Every decision is the store's: one open alert per
// device and rule (its unique index), across relays.
package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/tick"
)

// Names of the default rules (cloud.DefaultAlertRules).
const (
	RuleHighCPU       = "high_cpu"
	RuleHighMem       = "high_mem"
	RuleDiskFull      = "disk_full"
	RuleHighTemp      = "high_temp"
	RuleDeviceOffline = "device_offline"
	RuleVPNDown       = "vpn_down"
	RuleDeviceError   = "device_error"
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
	// Points, when set, names the units of point rules' values in alert
	// messages (read once per device at its first decision on a point).
	Points cloud.PointService
	// Observer hears of every alert the engine opens or resolves; may be nil.
	Observer cloud.AlertObserver
	Logger   *slog.Logger
	Now      func() time.Time
	// RulesTTL is how long an organization's rules are kept when nothing
	// says they changed; 0 means 30 s.
	RulesTTL time.Duration
	// DeviceTTL is how long a device's alert state is trusted before the
	// samples' path reads it again; 0 means 1 min.
	DeviceTTL time.Duration
	// SweepInterval is how often Run looks for devices offline or held in
	// a status, and for alerts to remind of; 0 means 5 s.
	SweepInterval time.Duration
	// Leader, when set, tells Run whether this relay sweeps now: relays
	// sharing a store take turns through a lease, so one evaluates the
	// timers of every device (the store's unique open alert keeps a device
	// to one alert whoever sweeps). Nil: always.
	Leader func(ctx context.Context) bool
}

// Engine evaluates alert rules. It implements cloud.Observer,
// cloud.PointObserver and cloud.RulesObserver.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	rules   ruleCache
	devices sync.Map // device id -> *device
}

var (
	_ cloud.Observer      = (*Engine)(nil)
	_ cloud.PointObserver = (*Engine)(nil)
	_ cloud.RulesObserver = (*Engine)(nil)
)

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
	if cfg.DeviceTTL <= 0 {
		cfg.DeviceTTL = time.Minute
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 5 * time.Second
	}
	e := &Engine{cfg: cfg, log: cfg.Logger.With("component", "alert")}
	e.rules = ruleCache{ttl: cfg.RulesTTL, load: cfg.Store.Rules}
	return e
}

// RulesChanged forgets the organization's rules: the next report reads
// them again (cloud.RulesObserver; also the cluster's notification of
// another relay's change).
func (e *Engine) RulesChanged(orgID string) { e.rules.invalidate(orgID) }

// DeviceTagsChanged makes the device read its alert state, tags included,
// again at its next report, so that rules scoped by tags follow a change
// of its tags at once (cloud.RulesObserver; also the cluster's
// notification of another relay's change).
func (e *Engine) DeviceTagsChanged(_, deviceID string) {
	if v, ok := e.devices.Load(deviceID); ok {
		v.(*device).stale.Store(true)
	}
}

// ForgetRules forgets every organization's rules: another process may have
// changed any (the store's data version moved, or the cluster listener
// reconnected).
func (e *Engine) ForgetRules() { e.rules.expireAll() }

// orgRules returns the organization's rules, logging a failure.
func (e *Engine) orgRules(ctx context.Context, orgID string, now time.Time) *orgRules {
	o, err := e.rules.get(ctx, orgID, now)
	if err != nil && ctx.Err() == nil {
		e.log.Error("alert rules", "org", orgID, "err", err)
	}
	return o
}

// open asks the store to open o's alert and tells the observer when it
// did.
func (e *Engine) open(ctx context.Context, o Opening) (resource.Alert, bool, error) {
	a, ok, err := e.cfg.Store.OpenAlert(ctx, o)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Error("open alert", "device", o.DeviceID, "rule", o.Rule.Name, "err", err)
		}
		return a, false, err
	}
	if !ok {
		return a, false, nil
	}
	e.log.Info("alert opened", "device", o.DeviceID, "rule", o.Rule.Name, "alert", a.ID)
	if e.cfg.Observer != nil {
		e.cfg.Observer.AlertChanged(ctx, "alert.opened", a)
	}
	return a, true, nil
}

// resolve asks the store to resolve the device's open alert of r;
// resolved is false when none was open.
func (e *Engine) resolve(ctx context.Context, dev cloud.DeviceRef, r Rule, msg string, at time.Time) (bool, error) {
	a, ok, err := e.cfg.Store.ResolveAlert(ctx, dev.OrgID, dev.ID, r, msg, at)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Error("resolve alert", "device", dev.ID, "rule", r.Name, "err", err)
		}
		return false, err
	}
	if !ok {
		return false, nil
	}
	e.log.Info("alert resolved", "device", dev.ID, "rule", r.Name, "alert", a.ID)
	if e.cfg.Observer != nil {
		e.cfg.Observer.AlertChanged(ctx, "alert.resolved", a)
	}
	return true, nil
}

// resolveSlot resolves the slot's open alert with msg and records it.
func (e *Engine) resolveSlot(ctx context.Context, d *device, s *slot, msg string, now time.Time) {
	if _, err := e.resolve(ctx, d.ref, s.rule.AlertRule, msg, now); err == nil {
		s.setClosed(now)
	}
}

// Run sweeps every SweepInterval, until ctx ends, while this relay leads
// (Config.Leader): it opens the alerts of offline rules for devices silent
// long enough and of status rules for devices held in a status, and
// reminds of unacknowledged alerts (repeatEvery). The conditions are read
// from the store, so a sweep after a restart catches up with what happened
// while the relay was down. It also forgets devices idle for a while.
func (e *Engine) Run(ctx context.Context) {
	lastForget := e.cfg.Now()
	tick.NowAndEvery(ctx, e.cfg.SweepInterval, func() {
		now := e.cfg.Now()
		if now.Sub(lastForget) >= idleAfter {
			e.forgetIdle(now.Add(-idleAfter))
			lastForget = now
		}
		if e.cfg.Leader == nil || e.cfg.Leader(ctx) {
			e.sweepOffline(ctx, "")
			e.sweepStatus(ctx)
			e.remind(ctx)
		}
	})
}

// idleAfter is how long a device that reports nothing is kept.
const idleAfter = 15 * time.Minute

// payloadOf encodes an alert's payload as JSON, its text as written
// (an operator stays ">=", not "\u003e=").
func payloadOf(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return json.RawMessage(`{}`)
	}
	return bytes.TrimRight(b.Bytes(), "\n")
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

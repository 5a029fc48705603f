package alert

import (
	"context"
	"fmt"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// sweepPage is how many devices a sweep reads per query, and how many
// alerts it reminds of per call.
const sweepPage = 500

// sweepOffline opens the alerts of offline rules for devices (all, or
// deviceID) silent for the rule's `after` and three heartbeat intervals.
// The store opens nothing while the device's planned work holds it
// (REBOOTING or UPDATING reported less than cloud.PlannedWorkHold ago), and
// once per outage; the engine asks it once per outage and rule.
func (e *Engine) sweepOffline(ctx context.Context, deviceID string) {
	cursor := ""
	for {
		now := e.cfg.Now()
		devs, err := e.cfg.Store.OfflineDevices(ctx, now, deviceID, cursor, sweepPage)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Error("offline sweep", "err", err)
			}
			return
		}
		for _, od := range devs {
			o := e.orgRules(ctx, od.Device.OrgID, now)
			if o == nil || len(o.offline) == 0 {
				continue
			}
			if !od.PlannedAt.IsZero() && now.Before(od.PlannedAt.Add(cloud.PlannedWorkHold)) {
				continue // planned work: held
			}
			d := e.deviceFor(od.Device)
			d.mu.Lock()
			for _, r := range o.offline {
				if now.Sub(od.LastSeen) < r.Cond.After || !cloud.InScope(r.Scope, od.Device.ID, od.Tags) {
					continue
				}
				s := d.slotOf(r)
				if s.offlineTried.Equal(od.LastSeen) {
					continue // asked for this outage already
				}
				e.openOffline(ctx, d, s, od)
			}
			d.mu.Unlock()
		}
		if len(devs) < sweepPage {
			return
		}
		cursor = devs[len(devs)-1].Device.ID
	}
}

// openOffline asks the store to open an offline rule's alert for one
// outage.
func (e *Engine) openOffline(ctx context.Context, d *device, s *slot, od Offline) {
	r := s.rule
	silent := max(r.Cond.After, 3*od.Heartbeat)
	payload := payloadOf(map[string]any{"rule": r.Name, "ruleId": r.ID, "lastSeen": resource.T(od.LastSeen),
		"heartbeatIntervalMs": od.Heartbeat.Milliseconds(), "after": cloud.FormatRuleDuration(r.Cond.After)})
	msg := fmt.Sprintf("Device offline: no heartbeat since %s (silent for %s or more)", formatSince(od.LastSeen), cloud.FormatRuleDuration(silent))
	a, ok, err := e.open(ctx, Opening{OrgID: od.Device.OrgID, DeviceID: od.Device.ID, Rule: r.AlertRule, Message: msg, Payload: payload,
		At: e.cfg.Now(), WithEvent: true, LastSeen: od.LastSeen})
	if err != nil {
		return
	}
	s.offlineTried = od.LastSeen
	if ok {
		s.setOpen(a.ID)
	}
}

// sweepStatus opens the alerts of status rules for devices in the rule's
// status for its `for`, once per stay in the status: an alert resolved
// (through the API) while the device stays opens again only after it
// left the status and came back.
func (e *Engine) sweepStatus(ctx context.Context) {
	cursor := ""
	for {
		now := e.cfg.Now()
		devs, err := e.cfg.Store.StatusDevices(ctx, cloud.RuleStatuses, cursor, sweepPage)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Error("status sweep", "err", err)
			}
			return
		}
		for _, sd := range devs {
			o := e.orgRules(ctx, sd.Device.OrgID, now)
			if o == nil || len(o.status) == 0 {
				continue
			}
			var due []*rule
			for _, r := range o.status {
				if r.Cond.Status == sd.Status && now.Sub(sd.Since) >= r.Cond.For && cloud.InScope(r.Scope, sd.Device.ID, sd.Tags) {
					due = append(due, r)
				}
			}
			if len(due) == 0 {
				continue
			}
			d := e.deviceFor(sd.Device)
			d.mu.Lock()
			if err := e.ensure(ctx, d, o, now, ttl); err != nil {
				e.log.Error("device alert state", "device", sd.Device.ID, "err", err)
			} else {
				for _, r := range due {
					s := d.slotOf(r)
					if s.openID != "" || !s.resolved.Before(sd.Since) {
						continue // open, or resolved during this stay
					}
					e.openStatus(ctx, d, s, sd)
				}
			}
			d.mu.Unlock()
		}
		if len(devs) < sweepPage {
			return
		}
		cursor = devs[len(devs)-1].Device.ID
	}
}

// openStatus opens a status rule's alert.
func (e *Engine) openStatus(ctx context.Context, d *device, s *slot, sd cloud.StatusDevice) {
	r := s.rule
	payload := payloadOf(map[string]any{"rule": r.Name, "ruleId": r.ID, "status": sd.Status, "since": resource.T(sd.Since)})
	msg := fmt.Sprintf("Device in %s since %s", sd.Status, formatSince(sd.Since))
	if r.Cond.For > 0 {
		msg = fmt.Sprintf("Device in %s for %s (since %s)", sd.Status, cloud.FormatRuleDuration(r.Cond.For), formatSince(sd.Since))
	}
	a, ok, err := e.open(ctx, Opening{OrgID: sd.Device.OrgID, DeviceID: sd.Device.ID, Rule: r.AlertRule, Message: msg, Payload: payload,
		At: e.cfg.Now(), WithEvent: true})
	switch {
	case err != nil:
	case ok:
		s.setOpen(a.ID)
	default:
		s.setOpen(openUnknown)
	}
}

// remind re-notifies the ACTIVE alerts whose rule repeats and that last
// notified a repeat interval ago (the store queues the notifications).
func (e *Engine) remind(ctx context.Context) {
	for {
		n, err := e.cfg.Store.Remind(ctx, e.cfg.Now(), sweepPage)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Error("reminders", "err", err)
			}
			return
		}
		if n > 0 {
			e.log.Info("alerts reminded", "alerts", n)
		}
		if n < sweepPage {
			return
		}
	}
}

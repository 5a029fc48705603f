package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// HeartbeatStored resolves what a heartbeat shows has ended: an offline
// alert (the device speaks), a status alert (the device reports another
// status), the agent's vpn_down (the tunnel is up). It reads the store only
// the first time it sees the device; after that a heartbeat costs a look at
// the device's open alerts in memory.
func (e *Engine) HeartbeatStored(ctx context.Context, dev cloud.DeviceRef, hb cloud.Heartbeat) {
	d := e.deviceFor(dev)
	d.mu.Lock()
	defer d.mu.Unlock()
	now := e.cfg.Now()
	if !d.valid {
		o := e.orgRules(ctx, dev.OrgID, now)
		if o == nil {
			return
		}
		if err := e.ensure(ctx, d, o, now, keep); err != nil {
			e.log.Error("device alert state", "device", dev.ID, "err", err)
			return
		}
	}
	d.used = now
	if hb.Status != "" {
		d.status = hb.Status
	}
	for _, s := range d.beat {
		if s.openID == "" {
			continue
		}
		switch c := s.rule.Cond; c.Kind {
		case resource.ConditionOffline:
			e.resolveSlot(ctx, d, s, s.rule.Name+" resolved: heartbeat received", now)
		case resource.ConditionStatus:
			if hb.Status != "" && hb.Status != c.Status {
				e.resolveSlot(ctx, d, s, fmt.Sprintf("%s resolved: device is %s", s.rule.Name, hb.Status), now)
			}
		case resource.ConditionEvent:
			if hb.VPN != nil && hb.VPN.Up {
				msg := s.rule.Name + " resolved: tunnel is up"
				if hb.VPN.InterfaceName != "" {
					msg = fmt.Sprintf("%s resolved: tunnel %s is up", s.rule.Name, hb.VPN.InterfaceName)
				}
				e.resolveSlot(ctx, d, s, msg, now)
			}
		}
	}
}

// EventsStored opens the alerts of event rules whose type an event has
// (an agent's alert.vpn_down is the alert's own device event, not stored
// twice) and resolves those whose resolveOn it has.
func (e *Engine) EventsStored(ctx context.Context, dev cloud.DeviceRef, events []resource.Event) {
	now := e.cfg.Now()
	o := e.orgRules(ctx, dev.OrgID, now)
	if o == nil || len(o.events) == 0 {
		return
	}
	watched := false
	for _, ev := range events {
		watched = watched || len(o.events[ev.Type]) > 0
	}
	if !watched {
		return
	}
	d := e.lockDevice(ctx, dev, o, now, ttl)
	if d == nil {
		return
	}
	defer d.mu.Unlock()
	for _, ev := range events {
		for _, r := range o.events[ev.Type] {
			if !cloud.InScope(r.Scope, dev.ID, d.tags) {
				continue
			}
			s := d.slotOf(r)
			if r.Cond.EventType == ev.Type {
				e.openEvent(ctx, d, s, ev)
			} else if s.openID != "" {
				e.resolveSlot(ctx, d, s, fmt.Sprintf("%s resolved: %s", r.Name, eventText(ev)), e.cfg.Now())
			}
		}
	}
}

// openEvent opens an event rule's alert on ev.
func (e *Engine) openEvent(ctx context.Context, d *device, s *slot, ev resource.Event) {
	r := s.rule
	m := map[string]any{}
	if len(ev.Data) > 0 {
		if err := json.Unmarshal(ev.Data, &m); err != nil || m == nil {
			m = map[string]any{}
		}
	}
	m["rule"], m["ruleId"] = r.Name, r.ID
	payload := payloadOf(m)
	a, ok, err := e.open(ctx, Opening{OrgID: d.ref.OrgID, DeviceID: d.ref.ID, Rule: r.AlertRule, Message: eventText(ev), Payload: payload,
		At: e.cfg.Now(), WithEvent: ev.Type != r.EventType()})
	switch {
	case err != nil:
	case ok:
		s.setOpen(a.ID)
	default:
		s.setOpen(openUnknown)
	}
}

// eventText is an event's message, or its type when it has none.
func eventText(ev resource.Event) string {
	if ev.Message != "" {
		return ev.Message
	}
	if ev.Type == EventVPNDown {
		return "VPN tunnel down"
	}
	return ev.Type + " event"
}

// StatusChanged reads the device's alert state again and resolves what
// the change ended: its offline alerts when it is ONLINE, the alerts of
// status rules on the status it left. A device gone OFFLINE is checked at
// once (offline rules open when it has been silent long enough; Run finds
// those that get there later).
func (e *Engine) StatusChanged(ctx context.Context, dev cloud.DeviceRef, from, to resource.DeviceStatus) {
	now := e.cfg.Now()
	o := e.orgRules(ctx, dev.OrgID, now)
	if o == nil {
		return
	}
	if len(o.offline) > 0 || len(o.status) > 0 {
		d := e.deviceFor(dev)
		d.mu.Lock()
		if err := e.ensure(ctx, d, o, now, force); err != nil {
			e.log.Error("device alert state", "device", dev.ID, "err", err)
		} else {
			d.status = to
			for _, s := range d.beat {
				switch c := s.rule.Cond; {
				case s.openID == "":
				case c.Kind == resource.ConditionOffline && to == resource.StatusOnline:
					e.resolveSlot(ctx, d, s, s.rule.Name+" resolved: device is online", now)
				case c.Kind == resource.ConditionStatus && from == c.Status && to != c.Status:
					e.resolveSlot(ctx, d, s, fmt.Sprintf("%s resolved: device left %s (now %s)", s.rule.Name, from, to), now)
				}
			}
		}
		d.mu.Unlock()
	}
	if to == resource.StatusOffline && len(o.offline) > 0 {
		e.sweepOffline(ctx, dev.ID)
	}
}

// formatSince writes a time in messages.
func formatSince(t time.Time) string { return resource.FormatTime(t) }

package alert

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// openUnknown is a slot's openID when an alert is open but the engine did
// not learn its id (the store refused to open a second one).
const openUnknown = "?"

// device is what the engine keeps of one device between reports: read
// from the store (AlertEngineStore.DeviceAlerts) when first needed and again
// after Config.DeviceTTL, and its view of the organization's rules: the
// rules in its scope by source, each with the device's state for it.
type device struct {
	mu    sync.Mutex // held while the device is evaluated, store calls included
	ref   cloud.DeviceRef
	used  time.Time // last report: idle devices are forgotten
	valid bool      // DeviceAlerts was read (at)
	// stale: its tags changed (Engine.DeviceTagsChanged); read it again.
	stale atomic.Bool
	at    time.Time
	tags  []string
	// status as the store or the last heartbeat or status change said.
	status resource.DeviceStatus

	org    *orgRules // the rules the view below was built from
	metric [5][]*slot
	point  map[string][]*slot // by point id
	// beat holds the slots a heartbeat may resolve: offline rules, status
	// rules, and event rules on alert.vpn_down.
	beat  []*slot
	slots map[string]*slot // by rule id, in scope or not

	units map[string]string // point id -> unit, read at the first decision on a point
}

// slot is a device's state for one rule, kept small: a device holds one
// per rule in its scope.
type slot struct {
	// A threshold rule's state, as Threshold holds it (Step runs on a
	// Threshold made from it): open, and the run's start in Unix ns (0:
	// no run) with its deadline (start + for); op, value and clear are
	// the rule's, for quiet.
	op              int8 // opGT...; 0: not a threshold
	open            bool
	primed          bool // see below
	value, clear    float64
	since, deadline int64

	rule   *rule
	openID string // the open alert; "" when none
	// resolved is when the rule's last alert of the device resolved:
	// samples captured before it do not count towards a new run.
	resolved time.Time
	// primed (above) is set once the slot saw a sample after it was
	// loaded: until then a threshold run under way before a restart is
	// read from the store (History).
	//
	// offlineTried is the last heartbeat of the outage for which the
	// offline rule asked the store to open its alert: one try per outage.
	offlineTried time.Time
}

func (s *slot) setOpen(id string) {
	s.openID = id
	s.open = true
}

func (s *slot) setClosed(at time.Time) {
	s.openID = ""
	s.open = false
	s.setSince(time.Time{})
	s.resolved = at
}

// threshold returns the slot's state as a Threshold.
func (s *slot) threshold() Threshold {
	t := Threshold{Cond: s.rule.Cond, Open: s.open}
	if s.since != 0 {
		t.Since = time.Unix(0, s.since).UTC()
	}
	return t
}

// setSince sets the run's start (zero: no run).
func (s *slot) setSince(t time.Time) {
	s.since, s.deadline = 0, 0
	if !t.IsZero() {
		s.since = t.UnixNano()
		s.deadline = s.since + int64(s.rule.Cond.For)
	}
}

// Threshold operators on the hot path.
const (
	opGT int8 = iota + 1
	opGE
	opLT
	opLE
)

// setRule makes r the slot's rule; a changed condition starts its run
// again (an open alert stays open).
func (s *slot) setRule(r *rule) {
	changed := s.rule == nil || s.rule.Cond != r.Cond
	s.rule = r
	c := &r.Cond
	s.op = 0
	if c.Kind == resource.ConditionThreshold {
		switch c.Op {
		case ">":
			s.op = opGT
		case ">=":
			s.op = opGE
		case "<":
			s.op = opLT
		case "<=":
			s.op = opLE
		}
	}
	s.value, s.clear = c.Value, c.Clear
	if changed {
		s.setSince(time.Time{})
		s.primed = false
	}
}

// quiet reports whether Threshold.Step of a sample at (Unix ns) would
// change nothing and decide nothing: an open alert the value does not
// clear, no run and a value that does not breach, or a run under way that
// the value continues short of `for`. The engine steps the others.
func (s *slot) quiet(at int64, v float64) bool {
	var breaches bool
	switch s.op {
	case opGT:
		breaches = v > s.value
	case opGE:
		breaches = v >= s.value
	case opLT:
		breaches = v < s.value
	case opLE:
		breaches = v <= s.value
	default:
		return false
	}
	if s.open {
		if s.op <= opGE {
			return v >= s.clear
		}
		return v <= s.clear
	}
	if s.since == 0 {
		return !breaches
	}
	return breaches && at >= s.since && at < s.deadline
}

// deviceFor returns the device's entry, made on first sight.
func (e *Engine) deviceFor(ref cloud.DeviceRef) *device {
	if d, ok := e.devices.Load(ref.ID); ok {
		return d.(*device)
	}
	d, _ := e.devices.LoadOrStore(ref.ID, &device{ref: ref, slots: map[string]*slot{}})
	return d.(*device)
}

// lockDevice returns the device's entry locked and made current by ensure,
// or nil (logged) when its state could not be read.
func (e *Engine) lockDevice(ctx context.Context, dev cloud.DeviceRef, o *orgRules, now time.Time, r refresh) *device {
	d := e.deviceFor(dev)
	d.mu.Lock()
	if err := e.ensure(ctx, d, o, now, r); err != nil {
		d.mu.Unlock()
		if ctx.Err() == nil {
			e.log.Error("device alert state", "device", dev.ID, "err", err)
		}
		return nil
	}
	return d
}

// refresh says how ensure treats a device read before.
type refresh int

const (
	keep  refresh = iota // use what was read, however old
	ttl                  // read again when older than Config.DeviceTTL
	force                // read again now
)

// ensure makes d current under d.mu: its alert state read (first sight,
// older than the TTL with ttl, always with force) and its view built from
// o. A view built from other rules (they changed) reads the alert state
// again, since the store resolved what the change ended.
func (e *Engine) ensure(ctx context.Context, d *device, o *orgRules, now time.Time, r refresh) error {
	d.used = now
	if stale := d.stale.Swap(false); stale || d.org != nil && d.org != o {
		r = force
	}
	if !d.valid || r == force || (r == ttl && now.Sub(d.at) >= e.cfg.DeviceTTL) {
		st, err := e.cfg.Store.DeviceAlerts(ctx, d.ref.OrgID, d.ref.ID)
		if err != nil {
			if d.org == nil {
				return err
			}
			e.log.Error("device alert state", "device", d.ref.ID, "err", err)
		} else {
			e.apply(d, o, st, now)
		}
	}
	if d.org != o {
		e.buildView(d, o)
	}
	return nil
}

// apply takes the device's alert state as the store read it.
func (e *Engine) apply(d *device, o *orgRules, st cloud.DeviceAlertState, now time.Time) {
	if !slices.Equal(d.tags, st.Tags) {
		d.tags = slices.Clone(st.Tags)
		d.org = nil // the scope may have changed: build the view again
	}
	d.status = st.Status
	d.units = nil
	for id := range st.Rules {
		if _, ok := d.slots[id]; !ok && o.byID[id] != nil {
			d.slots[id] = &slot{}
		}
	}
	for id, s := range d.slots {
		rs := st.Rules[id]
		s.resolved = rs.LastResolved
		switch {
		case rs.OpenID != "":
			s.setOpen(rs.OpenID)
		case s.openID != "":
			// Resolved elsewhere (the API, another relay, the rule's
			// change): a new alert needs the condition to hold again, over
			// new samples.
			s.setClosed(rs.LastResolved)
			s.primed = true
		}
	}
	d.valid, d.at = true, now
}

// buildView sorts the rules of o in the device's scope by source, keeping
// each rule's slot (a rule whose condition changed starts its run again).
func (e *Engine) buildView(d *device, o *orgRules) {
	d.org = o
	d.metric = [5][]*slot{}
	d.point = map[string][]*slot{}
	d.beat = nil
	for id := range d.slots {
		if o.byID[id] == nil {
			delete(d.slots, id)
		}
	}
	for _, r := range o.inScope(d.ref.ID, d.tags) {
		s := d.slots[r.ID]
		if s == nil {
			s = &slot{}
			d.slots[r.ID] = s
		}
		s.setRule(r)
		switch r.Cond.Kind {
		case resource.ConditionThreshold:
			if r.metric >= 0 {
				d.metric[r.metric] = append(d.metric[r.metric], s)
			} else {
				d.point[r.Cond.PointID] = append(d.point[r.Cond.PointID], s)
			}
		case resource.ConditionOffline, resource.ConditionStatus:
			d.beat = append(d.beat, s)
		case resource.ConditionEvent:
			if r.hbResolves {
				d.beat = append(d.beat, s)
			}
		}
	}
}

// slotOf returns the device's slot of rule r (made when missing, outside
// the view: a sweep's device whose view is not built).
func (d *device) slotOf(r *rule) *slot {
	s := d.slots[r.ID]
	if s == nil {
		s = &slot{}
		d.slots[r.ID] = s
	}
	if s.rule != r {
		s.setRule(r)
	}
	return s
}

// forgetIdle drops the devices that reported nothing since before.
func (e *Engine) forgetIdle(before time.Time) {
	e.devices.Range(func(k, v any) bool {
		d := v.(*device)
		if d.mu.TryLock() {
			if d.used.Before(before) {
				e.devices.Delete(k)
			}
			d.mu.Unlock()
		}
		return true
	})
}

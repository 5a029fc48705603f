package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// POST /alert-rules/preview (issue 27): what a rule would have done over a
// window of the stored history, replayed device by device with the
// engine's own semantics (alert.Threshold for thresholds), one device's
// history streamed at a time.

// Bounds of a preview's work (besides cloud.MaxPreviewRange): a scope
// holding more than MaxPreviewDevices devices, or threshold sources with
// more than MaxPreviewSamples values in the window, is EINVALID naming
// "scope". The samples bound lets 10,000 devices' week of metrics at the
// agent's default interval (5 min: 20.2 million) through, or about 40
// weeks of 1 s points (25 ns each: about 0.6 s of CPU).
const (
	MaxPreviewDevices = 10000
	MaxPreviewSamples = 25_000_000
)

// PreviewTables is what PreviewRule reads of a store's tables.
type PreviewTables interface {
	// RuleHistory calls each with threshold condition c's source values of
	// the device in [from, to], ascending, a page at a time.
	RuleHistory(ctx context.Context, orgID, deviceID string, c cloud.RuleCondition, from, to time.Time, each func([]cloud.RuleSample) error) error
	// PreviewDevices returns up to limit of the organization's devices
	// ordered by id after after.
	PreviewDevices(ctx context.Context, orgID, after string, limit int) ([]PreviewDevice, error)
	// PreviewDevice returns the organization's device id; ok is false when
	// it has none.
	PreviewDevice(ctx context.Context, orgID, id string) (d PreviewDevice, ok bool, err error)
	// DeviceEvents calls each with the device's events of one of types
	// created in [from, to], in creation order.
	DeviceEvents(ctx context.Context, orgID, deviceID string, types []string, from, to time.Time, each func(DeviceEvent) error) error
	// LastDeviceEvent returns the device's newest event of one of types
	// created before before; ok is false when there is none.
	LastDeviceEvent(ctx context.Context, orgID, deviceID string, types []string, before time.Time) (e DeviceEvent, ok bool, err error)
}

// PreviewDevice is a device as a preview sees it.
type PreviewDevice struct {
	ID        string
	Tags      []string
	Heartbeat time.Duration
}

// DeviceEvent is one stored event of a device, as a preview replays it.
type DeviceEvent struct {
	Type string
	Data []byte
	At   time.Time
}

// PreviewRule implements cloud.RuleService: the rule (checked as
// CreateRule but for its name and notify list, which change no number:
// CompileRule, then the scope's devices and the point source as
// checkScopeDevices and checkPoint; a missing name or severity is filled
// in) replayed over [from, to] on every device of its scope. from zero is
// DefaultPreviewRange before to; to zero or in the future is now.
func (s *RuleService) PreviewRule(ctx context.Context, orgID string, in resource.AlertRule, from, to time.Time) (resource.RulePreview, error) {
	out := resource.RulePreview{Devices: []resource.RulePreviewDevice{}}
	if strings.TrimSpace(in.Name) == "" {
		in.Name = "preview"
	}
	if in.Severity == "" {
		in.Severity = resource.SeverityWarning
	}
	r, err := cloud.CompileRule(orgID, in)
	if err != nil {
		return out, err
	}
	now := s.Tables.Now()
	if to.IsZero() || to.After(now) {
		to = now
	}
	if from.IsZero() {
		from = to.Add(-cloud.DefaultPreviewRange)
	}
	if !from.Before(to) {
		return out, cloud.Errorf(cloud.EINVALID, "from: must be before to (%s)", to.UTC().Format(time.RFC3339))
	}
	if to.Sub(from) > cloud.MaxPreviewRange {
		return out, cloud.Errorf(cloud.EINVALID, "from: a preview covers at most %d days", int(cloud.MaxPreviewRange/(24*time.Hour)))
	}
	from, to = from.UTC(), to.UTC()
	out.From, out.To = resource.T(from), resource.T(to)
	q := s.Tables.RuleReader()
	if err := checkScopeDevices(ctx, q, orgID, "scope", r.Scope); err != nil {
		return out, s.Tables.Wrap("preview", err)
	}
	if r.Cond.PointID != "" {
		if err := checkPoint(ctx, q, r); err != nil {
			return out, s.Tables.Wrap("preview", err)
		}
	}
	devices, err := s.previewScope(ctx, orgID, r.Scope)
	if err != nil {
		return out, err
	}
	budget := MaxPreviewSamples
	for _, d := range devices {
		t, err := s.replay(ctx, orgID, d, r.Cond, from, to, &budget)
		if err != nil {
			return out, err
		}
		if t.opened > 0 {
			out.Opened += t.opened
			out.Devices = append(out.Devices, resource.RulePreviewDevice{DeviceID: d.ID, Opened: t.opened, OpenForMs: t.openFor.Milliseconds()})
		}
	}
	slices.SortFunc(out.Devices, func(a, b resource.RulePreviewDevice) int {
		return cmp.Or(cmp.Compare(b.Opened, a.Opened), cmp.Compare(a.DeviceID, b.DeviceID))
	})
	return out, nil
}

// previewScope returns the organization's devices in scope, by id (at
// most MaxPreviewDevices).
func (s *RuleService) previewScope(ctx context.Context, orgID string, scope resource.RuleScope) ([]PreviewDevice, error) {
	var out []PreviewDevice
	if len(scope.DeviceIDs) > 0 {
		for i, id := range scope.DeviceIDs {
			d, ok, err := s.Tables.PreviewDevice(ctx, orgID, id)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, cloud.Errorf(cloud.EINVALID, "scope.deviceIds[%d]: the organization has no device %q", i, id)
			}
			out = append(out, d)
		}
		return out, nil
	}
	const page = 1000
	for after := ""; ; {
		ds, err := s.Tables.PreviewDevices(ctx, orgID, after, page)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if cloud.InScope(scope, d.ID, d.Tags) {
				out = append(out, d)
			}
		}
		if len(out) > MaxPreviewDevices {
			return nil, cloud.Errorf(cloud.EINVALID, "scope: a preview covers at most %d devices; narrow the scope with tags or deviceIds", MaxPreviewDevices)
		}
		if len(ds) < page {
			return out, nil
		}
		after = ds[len(ds)-1].ID
	}
}

// tally counts one device's alerts over [from, to].
type tally struct {
	from, to time.Time
	opened   int
	openFor  time.Duration
	open     bool
	openAt   time.Time
}

// opens opens an alert at at (nothing when one is open).
func (t *tally) opens(at time.Time) {
	if !t.open {
		t.open, t.openAt = true, at
		t.opened++
	}
}

// resolves closes the open alert at at.
func (t *tally) resolves(at time.Time) {
	if t.open {
		t.open = false
		t.openFor += at.Sub(t.openAt)
	}
}

// span counts an alert that was open over [openAt, closeAt) (closeAt is
// to when it was still open), as far as it falls in the window: one open
// at from counts from from.
func (t *tally) span(openAt, closeAt time.Time) {
	openAt, closeAt = maxTime(openAt, t.from), minTime(closeAt, t.to)
	if openAt.Before(closeAt) {
		t.opens(openAt)
		t.resolves(closeAt)
	}
}

// end counts an alert still open at to until to.
func (t *tally) end() { t.resolves(t.to) }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// replay runs condition c over device d's history in [from, to],
// taking the threshold samples it replays from budget.
func (s *RuleService) replay(ctx context.Context, orgID string, d PreviewDevice, c cloud.RuleCondition, from, to time.Time, budget *int) (t tally, err error) {
	t = tally{from: from, to: to}
	switch c.Kind {
	case resource.ConditionThreshold:
		// The engine's state machine, from a fresh state at from: samples
		// before the window are not read.
		th := alert.Threshold{Cond: c}
		err = s.Tables.RuleHistory(ctx, orgID, d.ID, c, from, to, func(xs []cloud.RuleSample) error {
			if *budget -= len(xs); *budget < 0 {
				return cloud.Errorf(cloud.EINVALID, "scope: the preview would replay more than %d samples; narrow the scope or shorten the window", MaxPreviewSamples)
			}
			for _, x := range xs {
				switch th.Step(x.At, x.Value) {
				case alert.Opens:
					t.opens(x.At)
				case alert.Resolve:
					t.resolves(x.At)
				}
			}
			return nil
		})
	case resource.ConditionOffline:
		err = s.replayOffline(ctx, orgID, d, c, &t)
	case resource.ConditionStatus:
		err = s.replayStatus(ctx, orgID, d, c, &t)
	case resource.ConditionEvent:
		err = s.replayEvents(ctx, orgID, d, c, &t)
	}
	t.end()
	return t, err
}

// statusTypes are the events that record a device's status changes.
var statusTypes = []string{protocol.EventDeviceOnline, protocol.EventDeviceOffline, protocol.EventDeviceStatusChanged}

// eventStatus is the status event e moved its device to ("" for none).
func eventStatus(e DeviceEvent) resource.DeviceStatus {
	switch e.Type {
	case protocol.EventDeviceOnline:
		return resource.StatusOnline
	case protocol.EventDeviceOffline:
		return resource.StatusOffline
	}
	var ch struct {
		To resource.DeviceStatus `json:"to"`
	}
	if json.Unmarshal(e.Data, &ch) != nil {
		return ""
	}
	return ch.To
}

// statuses calls each with the device's status at from (when an event
// before from tells it, with the time of that event) and then with each
// status change stored in [from, to], in order; a change to the status it
// is in already is left out.
func (s *RuleService) statuses(ctx context.Context, orgID, deviceID string, from, to time.Time, each func(at time.Time, st resource.DeviceStatus)) error {
	var cur resource.DeviceStatus
	step := func(e DeviceEvent) {
		if st := eventStatus(e); st != "" && st != cur {
			cur = st
			each(e.At, st)
		}
	}
	last, ok, err := s.Tables.LastDeviceEvent(ctx, orgID, deviceID, statusTypes, from)
	if err != nil {
		return err
	}
	if ok {
		step(last)
	}
	return s.Tables.DeviceEvents(ctx, orgID, deviceID, statusTypes, from, to, func(e DeviceEvent) error {
		step(e)
		return nil
	})
}

// replayOffline: each outage (OFFLINE until another status) longer than
// max(after, three heartbeat intervals) opens an alert then, or at the end
// of the planned-work hold when the device reported REBOOTING or UPDATING
// less than cloud.PlannedWorkHold before; it resolves when the device
// leaves OFFLINE. An outage starts at its device.offline event (the
// engine counts from the last heartbeat, at most a few heartbeat
// intervals before).
func (s *RuleService) replayOffline(ctx context.Context, orgID string, d PreviewDevice, c cloud.RuleCondition, t *tally) error {
	wait := max(c.After, 3*d.Heartbeat)
	var since, planned time.Time
	offline := false
	outage := func(until time.Time) {
		if offline {
			openAt := since.Add(wait)
			if !planned.IsZero() {
				openAt = maxTime(openAt, planned.Add(cloud.PlannedWorkHold))
			}
			t.span(openAt, until)
		}
	}
	err := s.statuses(ctx, orgID, d.ID, t.from, t.to, func(at time.Time, st resource.DeviceStatus) {
		outage(at)
		offline = st == resource.StatusOffline
		if offline {
			since = at
		}
		if st == resource.StatusRebooting || st == resource.StatusUpdating {
			planned = at
		}
	})
	outage(t.to)
	return err
}

// replayStatus: the device in the rule's status for `for` opens an alert,
// which resolves when it leaves the status.
func (s *RuleService) replayStatus(ctx context.Context, orgID string, d PreviewDevice, c cloud.RuleCondition, t *tally) error {
	var since time.Time
	in := false
	leave := func(at time.Time) {
		if in {
			t.span(since.Add(c.For), at)
		}
	}
	err := s.statuses(ctx, orgID, d.ID, t.from, t.to, func(at time.Time, st resource.DeviceStatus) {
		leave(at)
		in, since = st == c.Status, at
	})
	leave(t.to)
	return err
}

// replayEvents: an event of the rule's type opens an alert (when none is
// open), one of its resolveOn type resolves it. Without resolveOn nothing
// but a person resolves it: at most one opens in the window, open until
// to (and none is taken as open at from).
func (s *RuleService) replayEvents(ctx context.Context, orgID string, d PreviewDevice, c cloud.RuleCondition, t *tally) error {
	types := []string{c.EventType}
	if c.ResolveOn != "" {
		types = append(types, c.ResolveOn)
		last, ok, err := s.Tables.LastDeviceEvent(ctx, orgID, d.ID, types, t.from)
		if err != nil {
			return err
		}
		if ok && last.Type == c.EventType {
			t.opens(t.from)
		}
	}
	return s.Tables.DeviceEvents(ctx, orgID, d.ID, types, t.from, t.to, func(e DeviceEvent) error {
		if e.Type == c.EventType {
			t.opens(e.At)
		} else {
			t.resolves(e.At)
		}
		return nil
	})
}

// The store's PreviewTables.

var _ PreviewTables = (*Store)(nil)

// PreviewDevices implements PreviewTables.
func (s *Store) PreviewDevices(ctx context.Context, orgID, after string, limit int) ([]PreviewDevice, error) {
	out, err := Collect(ctx, s.R, scanPreviewDevice, `SELECT id, tags, agent_heartbeat_ms FROM devices WHERE org_id = ? AND id > ? ORDER BY id LIMIT ?`, orgID, after, limit)
	return out, s.Wrap("preview devices", err)
}

// PreviewDevice implements PreviewTables.
func (s *Store) PreviewDevice(ctx context.Context, orgID, id string) (PreviewDevice, bool, error) {
	d, err := scanPreviewDevice(s.R.QueryRow(ctx, `SELECT id, tags, agent_heartbeat_ms FROM devices WHERE org_id = ? AND id = ?`, orgID, id))
	return optionalRow(s.Dialect, "preview device", d, err)
}

// optionalRow is a read of one row that may be missing: ok is false
// without an error when it is.
func optionalRow[T any](d Dialect, what string, v T, err error) (T, bool, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return v, false, nil
	}
	return v, err == nil, d.Wrap(what, err)
}

func scanPreviewDevice(r Row) (PreviewDevice, error) {
	var d PreviewDevice
	var tags string
	var hb int64
	err := r.Scan(&d.ID, &tags, &hb)
	d.Heartbeat, d.Tags = time.Duration(hb)*time.Millisecond, decodeTags(tags)
	return d, err
}

// deviceEventsSQL selects a device's events of n types (eventArgs).
func deviceEventsSQL(n int) string {
	return `SELECT type, data, created_at FROM events WHERE device_id = ? AND org_id = ? AND type IN (` +
		strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + `)`
}

// eventArgs are deviceEventsSQL's arguments, then more.
func eventArgs(orgID, deviceID string, types []string, more ...any) []any {
	args := []any{deviceID, orgID}
	for _, t := range types {
		args = append(args, t)
	}
	return append(args, more...)
}

// DeviceEvents implements PreviewTables.
func (s *Store) DeviceEvents(ctx context.Context, orgID, deviceID string, types []string, from, to time.Time, each func(DeviceEvent) error) error {
	err := Each(ctx, s.R, deviceEventsSQL(len(types))+` AND created_at >= ? AND created_at <= ? ORDER BY created_at, id`,
		eventArgs(orgID, deviceID, types, from.UnixMilli(), to.UnixMilli()), func(r Row) error {
			e, err := scanDeviceEvent(r)
			if err != nil {
				return err
			}
			return each(e)
		})
	return s.Wrap("device events", err)
}

// LastDeviceEvent implements PreviewTables.
func (s *Store) LastDeviceEvent(ctx context.Context, orgID, deviceID string, types []string, before time.Time) (DeviceEvent, bool, error) {
	e, err := scanDeviceEvent(s.R.QueryRow(ctx, deviceEventsSQL(len(types))+` AND created_at < ? ORDER BY created_at DESC, id DESC LIMIT 1`,
		eventArgs(orgID, deviceID, types, before.UnixMilli())...))
	return optionalRow(s.Dialect, "device event", e, err)
}

func scanDeviceEvent(r Row) (DeviceEvent, error) {
	var e DeviceEvent
	var data string
	var at int64
	err := r.Scan(&e.Type, &data, &at)
	e.Data, e.At = []byte(data), time.UnixMilli(at).UTC()
	return e, err
}

package sqlstore

import (
	"context"
	"time"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// DesiredConfig is the configuration the agent of dev is sent
// (agentlink.Store's DesiredConfig): its serial state's usage and desired
// version, and every channel of its model with its stored configuration or
// the catalog's default (agentlink.BuildConfig reports one that does not
// decode to bad). ok is false for a model without serial I/O.
func DesiredConfig(ctx context.Context, t SerialTables, dev agentlink.Device, bad func(channel string, err error)) (cfg protocol.Config, ok bool, err error) {
	model, known := catalog.Lookup(dev.Model)
	if !known || !model.Has(resource.CapabilitySerialIO) {
		return protocol.Config{}, false, nil
	}
	st, chans, err := t.SerialRows(ctx, dev.ID)
	if err != nil {
		return protocol.Config{}, false, err
	}
	stored := map[string]string{}
	for id, c := range chans {
		if c.Config != nil {
			stored[id] = *c.Config
		}
	}
	cfg = protocol.Config{Enabled: st.Enabled, Mode: st.Mode, Version: st.DesiredVersion}
	return agentlink.BuildConfig(model, cfg, stored, bad), true, nil
}

// AgentTx is a store's agent-endpoint write transaction (its ingest
// writer's): the statements, in the store's dialect, of the steps Hello,
// ConfigApplied, Disconnect and Sweep take the same way in both stores.
// Each wraps its error as the store's.
type AgentTx interface {
	// DeviceState reads the device's status, the session that owns it (""
	// for none) and the last record sequence stored, locking its row where
	// the store locks rows.
	DeviceState(ctx context.Context, id string) (status resource.DeviceStatus, session string, lastSeq uint64, err error)
	// SessionStatus reads the device's status if session owns it, locking
	// its row where the store locks rows; owned is false when it does not.
	SessionStatus(ctx context.Context, id, session string) (status resource.DeviceStatus, owned bool, err error)
	// SetOnline stores hello: the device ONLINE (since in.At unless it
	// was) with the hello's details, last seen at in.At, and deadline.
	SetOnline(ctx context.Context, in agentlink.HelloIn, deadline time.Time) error
	// SetApplied stores the configuration version the device's agent
	// applied.
	SetApplied(ctx context.Context, id string, version int64) error
	// SetOffline stores the device OFFLINE (since at unless it was),
	// without session nor deadline.
	SetOffline(ctx context.Context, id string, at time.Time) error
	// InsertEvent stores ev, an event the relay made, of dev.
	InsertEvent(ctx context.Context, dev agentlink.Device, ev *resource.Event) error
	// SerialState makes sure the device has a serial state and reads its
	// desired configuration version and the channel states it reported.
	SerialState(ctx context.Context, id string) (desiredVersion int64, channels []protocol.ChannelState, err error)
	// Due reads the devices whose deadline passed at now (2000 at the
	// most), locking their rows where the store locks rows.
	Due(ctx context.Context, now time.Time) ([]agentlink.Device, error)
}

// DueColumns are the columns ScanDue reads, in order.
const DueColumns = `id, org_id, model, status`

// ScanDue reads a row of DueColumns: a device whose deadline passed.
func ScanDue(r Row) (agentlink.Device, error) {
	var d agentlink.Device
	var st string
	err := r.Scan(&d.ID, &d.OrgID, &d.Model, &st)
	d.Status = resource.DeviceStatus(st)
	return d, err
}

// Hello stores in, the hello of the device's session, in t (agentlink.Store's
// Hello): ErrSessionGone when another session owns the device; else the
// device goes ONLINE with the hello's details and a deadline (in.Deadline,
// or six heartbeat intervals after in.At), with a device.online event when
// in.OnlineEvent and a device.status_changed event when it was not ONLINE,
// and a model with serial I/O is answered its desired
// configuration version and the channel states it last reported.
func Hello(ctx context.Context, t AgentTx, in agentlink.HelloIn) (agentlink.HelloOut, error) {
	from, session, lastSeq, err := t.DeviceState(ctx, in.Device.ID)
	if err != nil {
		return agentlink.HelloOut{}, err
	}
	if session != in.Session {
		return agentlink.HelloOut{}, agentlink.ErrSessionGone
	}
	h := in.Hello
	deadline := in.Deadline
	if deadline.IsZero() {
		deadline = in.At.Add(6 * in.HeartbeatInterval)
	}
	if err := t.SetOnline(ctx, in, deadline); err != nil {
		return agentlink.HelloOut{}, err
	}
	out := agentlink.HelloOut{LastSeq: lastSeq, Change: agentlink.StatusChange{Device: in.Device, From: from, To: resource.StatusOnline}}
	if out.Change.StatusEvent, err = insertStatusEvent(ctx, t, in.Device, from, resource.StatusOnline, in.At); err != nil {
		return agentlink.HelloOut{}, err
	}
	if in.OnlineEvent {
		ev := agentlink.NewEvent(protocol.EventDeviceOnline, resource.SeverityInfo, "device is online",
			map[string]any{"agentVersion": h.AgentVersion, "firmwareVersion": h.FirmwareVersion}, in.At)
		if err := t.InsertEvent(ctx, in.Device, ev); err != nil {
			return agentlink.HelloOut{}, err
		}
		out.Change.Event = ev
	}
	if model, _ := catalog.Lookup(in.Device.Model); !model.Has(resource.CapabilitySerialIO) {
		return out, nil
	}
	out.DesiredVersion, out.Channels, err = t.SerialState(ctx, in.Device.ID)
	if err != nil {
		return agentlink.HelloOut{}, err
	}
	return out, nil
}

// ConfigApplied stores in's applied configuration version in t if its
// session still owns the device, else it is ErrSessionGone
// (agentlink.Store's ConfigApplied).
func ConfigApplied(ctx context.Context, t AgentTx, in agentlink.ConfigAppliedIn) error {
	_, owned, err := t.SessionStatus(ctx, in.Device.ID, in.Session)
	if err != nil {
		return err
	}
	if !owned {
		return agentlink.ErrSessionGone
	}
	return t.SetApplied(ctx, in.Device.ID, in.Version)
}

// Offline moves dev, in status from, OFFLINE in t, with a device.offline
// event for reason when it was connected and a device.status_changed event
// when it was not OFFLINE.
func Offline(ctx context.Context, t AgentTx, dev agentlink.Device, from resource.DeviceStatus, at time.Time, reason string) (agentlink.StatusChange, error) {
	ch := agentlink.StatusChange{Device: dev, From: from, To: resource.StatusOffline}
	if err := t.SetOffline(ctx, dev.ID, at); err != nil {
		return ch, err
	}
	var err error
	if ch.StatusEvent, err = insertStatusEvent(ctx, t, dev, from, resource.StatusOffline, at); err != nil {
		return ch, err
	}
	switch from {
	case resource.StatusOnline, resource.StatusRebooting, resource.StatusUpdating, resource.StatusError:
		ev := agentlink.NewEvent(protocol.EventDeviceOffline, resource.SeverityWarning, "device is offline: "+reason, map[string]any{"reason": reason}, at)
		if err := t.InsertEvent(ctx, dev, ev); err != nil {
			return ch, err
		}
		ch.Event = ev
	}
	return ch, nil
}

// Disconnect moves dev OFFLINE in t (Offline) if session still owns it
// (agentlink.Store's Disconnect); ok is false when it does not.
func Disconnect(ctx context.Context, t AgentTx, dev agentlink.Device, session string, at time.Time, reason string) (ch agentlink.StatusChange, ok bool, err error) {
	from, owned, err := t.SessionStatus(ctx, dev.ID, session)
	if err != nil || !owned {
		return agentlink.StatusChange{}, false, err
	}
	if ch, err = Offline(ctx, t, dev, from, at, reason); err != nil {
		return agentlink.StatusChange{}, false, err
	}
	return ch, true, nil
}

// Sweep moves OFFLINE in t the devices whose deadline passed at now
// (agentlink.Store's Sweep).
func Sweep(ctx context.Context, t AgentTx, now time.Time) ([]agentlink.StatusChange, error) {
	due, err := t.Due(ctx, now)
	if err != nil {
		return nil, err
	}
	out := make([]agentlink.StatusChange, 0, len(due))
	for _, d := range due {
		ch, err := Offline(ctx, t, d, d.Status, now, "no heartbeat (relay deadline passed)")
		if err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// AgentFlows are agentlink.Store's Hello, ConfigApplied, Disconnect and
// Sweep, written once over Run, the store's way of running fn in its
// agent-endpoint write transaction; eventsAt, when not zero, is when the
// events fn may store were made (Unix ms: a store with daily partitions
// makes sure of the day's first). Each store's agent store embeds them.
type AgentFlows struct {
	Run func(ctx context.Context, eventsAt int64, fn func(ctx context.Context, tx AgentTx) error) error
}

// Hello implements agentlink.Store (the package's Hello).
func (f AgentFlows) Hello(ctx context.Context, in agentlink.HelloIn) (out agentlink.HelloOut, err error) {
	// Its device.status_changed event is stored at in.At.
	err = f.Run(ctx, in.At.UnixMilli(), func(ctx context.Context, tx AgentTx) (err error) {
		out, err = Hello(ctx, tx, in)
		return err
	})
	return out, err
}

// ConfigApplied implements agentlink.Store (the package's ConfigApplied):
// it records no event (the agent sends serial.config_applied, and
// serial.error for a failure, as records of its own).
func (f AgentFlows) ConfigApplied(ctx context.Context, in agentlink.ConfigAppliedIn) (agentlink.ConfigAppliedOut, error) {
	err := f.Run(ctx, 0, func(ctx context.Context, tx AgentTx) error { return ConfigApplied(ctx, tx, in) })
	return agentlink.ConfigAppliedOut{}, err
}

// Disconnect implements agentlink.Store (the package's Disconnect).
func (f AgentFlows) Disconnect(ctx context.Context, dev agentlink.Device, session string, at time.Time, reason string) (ch agentlink.StatusChange, ok bool, err error) {
	err = f.Run(ctx, at.UnixMilli(), func(ctx context.Context, tx AgentTx) (err error) {
		ch, ok, err = Disconnect(ctx, tx, dev, session, at, reason)
		return err
	})
	return ch, ok, err
}

// Sweep implements agentlink.Store (the package's Sweep).
func (f AgentFlows) Sweep(ctx context.Context, now time.Time) (out []agentlink.StatusChange, err error) {
	err = f.Run(ctx, now.UnixMilli(), func(ctx context.Context, tx AgentTx) (err error) {
		out, err = Sweep(ctx, tx, now)
		return err
	})
	return out, err
}

// insertStatusEvent stores in t the device.status_changed event of dev's
// change from from to to at at (StatusEvent) and returns it; nil when the
// status stays.
func insertStatusEvent(ctx context.Context, t AgentTx, dev agentlink.Device, from, to resource.DeviceStatus, at time.Time) (*resource.Event, error) {
	ev := StatusEvent(from, to, at)
	if ev == nil {
		return nil, nil
	}
	return ev, t.InsertEvent(ctx, dev, ev)
}

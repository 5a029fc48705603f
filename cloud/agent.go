package cloud

import (
	"context"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// AgentStore is what the agent endpoint (cloud/agentlink) needs from the
// relay's store. Every write names the session it
// comes from, and the device always comes from the token, never from a
// message.
type AgentStore interface {
	// AuthDevice finds the device whose token hashes (SHA-256) to tokenHash;
	// agentlink.ErrUnauthorized when none does or its token is revoked.
	AuthDevice(ctx context.Context, tokenHash [32]byte) (AgentDevice, error)
	// Connect starts session id for dev: status CONNECTING, the connect
	// deadline set. It returns the status change it made (From is the
	// status before). A session opened after at holds on: Connect then
	// changes nothing and returns agentlink.ErrSuperseded (the attempt's
	// store write came late, after a newer connection of the device).
	Connect(ctx context.Context, dev AgentDevice, session string, at, deadline time.Time) (StatusChange, error)
	// Hello stores what the agent announced and moves the device ONLINE.
	Hello(ctx context.Context, in HelloIn) (HelloOut, error)
	// Heartbeat queues one heartbeat and returns without waiting for it to
	// be stored; done is called with the outcome after the commit, in the
	// order of the calls, from a goroutine of the store (it must not block
	// for long). Writes of one connection keep their order: a later
	// Records call commits in the same or a later transaction.
	// Implementations batch heartbeats of many connections into one
	// transaction.
	Heartbeat(ctx context.Context, in HeartbeatIn, done func(HeartbeatOut, error)) error
	// Records stores a validated batch in one transaction, idempotently, and
	// raises the device's last stored sequence.
	Records(ctx context.Context, in RecordsIn) (RecordsOut, error)
	// ConfigApplied records the configuration version the agent applied.
	ConfigApplied(ctx context.Context, in ConfigAppliedIn) (ConfigAppliedOut, error)
	// DesiredConfig returns the device's full desired serial configuration;
	// ok is false for a model without serial I/O.
	DesiredConfig(ctx context.Context, dev AgentDevice) (cfg protocol.Config, ok bool, err error)
	// Disconnect ends session: the device goes OFFLINE when the session still
	// owns it (ok false otherwise); reason goes into the device.offline event.
	Disconnect(ctx context.Context, dev AgentDevice, session string, at time.Time, reason string) (StatusChange, bool, error)
	// Sweep marks OFFLINE every device whose stored deadline passed before
	// now and returns the changes. The relay holding a connection checks its
	// liveness exactly; the stored deadline covers relays that died.
	Sweep(ctx context.Context, now time.Time) ([]StatusChange, error)
	// Revoked returns the devices that have a session but whose token was
	// revoked since.
	Revoked(ctx context.Context) ([]string, error)
	// Orphans gives a deadline of now+window to every device that a previous
	// relay process left connected without one.
	Orphans(ctx context.Context, now time.Time, window time.Duration) (int, error)
}

// AgentDevice is an authenticated agent's device.
type AgentDevice struct {
	ID     string
	OrgID  string
	Model  string
	Status resource.DeviceStatus
}

// Ref returns the device as the Observers see it.
func (d AgentDevice) Ref() DeviceRef {
	return DeviceRef{ID: d.ID, OrgID: d.OrgID, Model: d.Model}
}

// StatusChange is one stored status transition, with the event the store
// recorded for it (device.online or device.offline), if any, and its
// device.status_changed event (nil when the status stayed).
type StatusChange struct {
	Device      AgentDevice
	From        resource.DeviceStatus
	To          resource.DeviceStatus
	Event       *resource.Event
	StatusEvent *resource.Event
}

// Changed reports whether the status changed.
func (c StatusChange) Changed() bool { return c.From != c.To }

// HelloIn is a processed Hello.
type HelloIn struct {
	Device            AgentDevice
	Session           string
	At                time.Time
	Hello             protocol.Hello
	HeartbeatInterval time.Duration
	Deadline          time.Time
	// OnlineEvent asks for a device.online event.
	OnlineEvent bool
}

// HelloOut is what the relay answers a Hello with.
type HelloOut struct {
	Change         StatusChange
	LastSeq        uint64
	DesiredVersion int64
	// Channels is the stored channel state, to compute changes against.
	Channels []protocol.ChannelState
}

// HeartbeatIn is one heartbeat to store.
type HeartbeatIn struct {
	Device  AgentDevice
	Session string
	At      time.Time // relay receive time: lastSeen and telemetryAt
	// Deadline, when not zero, is the new stored deadline; the relay
	// refreshes it only every few heartbeats.
	Deadline time.Time
	Status   resource.DeviceStatus
	// PrevStatus is the status the connection last stored.
	PrevStatus     resource.DeviceStatus
	IPAddress      string
	AppliedVersion int64
	// HasChannels: the heartbeat carries serial telemetry (its time is
	// stored, the serial state's telemetryAt).
	HasChannels bool
	// Reports, when not empty, is the stored form (EncodeChannelReports)
	// of every channel the device reported, as it stands after this
	// heartbeat: set when some channel's state changed, encoded by the
	// caller off the store's writer (the agent endpoint does). Channels is
	// the same as states, for a caller that leaves the encoding to the
	// store; both empty: no channel changed. The store reads Reports only
	// until it calls back (the agent endpoint reuses its memory after).
	Reports  string
	Channels []protocol.ChannelState
	// Event is a heartbeat event to record (at most one per metrics
	// interval), or nil.
	Event *resource.Event
}

// ChannelReports returns the stored form of the channels in: Reports, else
// Channels encoded; "" when no channel changed.
func (in *HeartbeatIn) ChannelReports() string {
	if in.Reports != "" || in.Channels == nil {
		return in.Reports
	}
	return EncodeChannelReports(in.Channels)
}

// HeartbeatOut is the result of a stored heartbeat.
type HeartbeatOut struct {
	Change StatusChange
}

// RecordsIn is a validated batch of records.
type RecordsIn struct {
	Device  AgentDevice
	Session string
	Items   []protocol.Record
}

// RecordsOut holds what the batch actually inserted (not resends) and the
// device's last stored sequence afterwards.
type RecordsOut struct {
	Metrics []resource.MetricSample
	Events  []resource.Event
	// Points are the point samples the batch stored (not resends).
	Points  []protocol.PointSample
	LastSeq uint64
}

// ConfigAppliedIn is a ConfigApplied report.
type ConfigAppliedIn struct {
	Device  AgentDevice
	Session string
	At      time.Time
	Version int64
	Error   string
}

// ConfigAppliedOut holds an event the store recorded for the report, if any
// (the SQLite store records none: the agent sends serial.config_applied as
// a record of its own).
type ConfigAppliedOut struct {
	Event *resource.Event
}

package agentlink

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// beatState is what a connection remembers of its device from one
// heartbeat to the next, as stored: with a heartbeat and the time it was
// read, the input of the heartbeat's rules (beatState.beat), which apply
// moves it on. The connection's reader goroutine owns it.
type beatState struct {
	status          resource.DeviceStatus // as last stored
	appliedVersion  int64                 // as last stored
	storedDeadline  time.Time             // the device's deadline in the store
	lastHBEvent     time.Time             // when the last heartbeat event was stored (zero: none yet)
	metricsInterval time.Duration         // at most one heartbeat event per interval
	channels        channelStates
	model           *catalog.Model // shared (catalog.Find); never nil once set
}

// noModel is the model of a device the catalog does not know: no
// capabilities, no channels.
var noModel catalog.Model

// channelStates are the channels a connection remembers of its device,
// sorted by id: a slice, not a map, since it stays in memory between
// heartbeats for every connected agent (a map of five channels took 2.4
// KiB of a connection's heap, this slice about 0.5 KiB; docs/benchmarks.md,
// "Memory per idle agent").
type channelStates []protocol.ChannelState

func channelByID(c protocol.ChannelState, id string) int { return strings.Compare(c.ID, id) }

// get returns the channel id as remembered. A scan, not a binary search:
// a model has a handful of channels, and comparing ids for equality
// (lengths first) is cheaper than the generic search's three-way compares
// through a function value, done for every channel of every heartbeat
// (1.3 µs of the relay's CPU per heartbeat in the profile of 2026-11-27
// 11:26; BenchmarkConnHeartbeat/steady 2.1–2.3 µs before, 1.3–1.5 µs
// after, alternated three times).
func (cs channelStates) get(id string) (protocol.ChannelState, bool) {
	for i := range cs {
		if cs[i].ID == id {
			return cs[i], true
		}
	}
	return protocol.ChannelState{}, false
}

// set remembers ch in place of the channel with its id.
func (cs *channelStates) set(ch protocol.ChannelState) {
	i, ok := slices.BinarySearchFunc(*cs, ch.ID, channelByID)
	if ok {
		(*cs)[i] = ch
		return
	}
	*cs = slices.Insert(*cs, i, ch)
}

// setAll remembers every channel of chs. Room for the new ones is made at
// once and exactly: grown one by one, as the first heartbeat reports
// them, the slice took up to twice the memory it holds, kept between
// heartbeats by every connection (docs/benchmarks.md, "Memory per idle
// agent").
func (cs *channelStates) setAll(chs []protocol.ChannelState) {
	added := 0
	for _, ch := range chs {
		if _, ok := cs.get(ch.ID); !ok {
			added++
		}
	}
	if n := len(*cs) + added; n > cap(*cs) {
		grown := make(channelStates, len(*cs), n)
		copy(grown, *cs)
		*cs = grown
	}
	for _, ch := range chs {
		cs.set(ch)
	}
}

// beatIn is what the rules take besides the state and the heartbeat.
type beatIn struct {
	now      time.Time     // the relay's time of the heartbeat
	interval time.Duration // the heartbeat interval agreed at hello
	remote   string        // the connection's client address
}

// beatDecision is what one heartbeat changes.
type beatDecision struct {
	Status         resource.DeviceStatus
	PrevStatus     resource.DeviceStatus
	IPAddress      string // the agent's, else the connection's
	AppliedVersion int64  // never above what the relay issued
	// Deadline is the new stored deadline; zero when the stored one stays.
	Deadline time.Time
	// HasChannels: the heartbeat reports the channels of a device whose
	// model has serial ports (their telemetry time is stored).
	HasChannels bool
	// Channels are the reported channels of the model whose stored state
	// changes (appended to the caller's memory, see beat).
	Channels []protocol.ChannelState
	// Changed are the channels whose telemetry (live, txOn, error) changed,
	// for the Observers.
	Changed []resource.SignalChannel
	// ChangedPoints are the points whose value or quality changed (or that
	// were reported for the first time), for the Observers.
	ChangedPoints []resource.PointRef
	// VPN is the tunnel state reported, when HasVPN.
	VPN    cloud.VPNState
	HasVPN bool
	// Event is the heartbeat event to store, its ID left to the caller;
	// nil when one was stored less than a metrics interval ago.
	Event *resource.Event
}

// beat decides what heartbeat h changes, from the connection's state and
// in; it changes nothing (apply does, once the store took the heartbeat).
// knownDesired returns the highest desired configuration version the agent
// can have been told of; it is asked only when the agent reports an applied
// version above the stored one (it may wait for a configuration being
// sent). (A parameter of its own, not a field of in: what in holds goes to
// the store, and the function would go to the heap with it.)
// The rules:
//   - the status is the agent's; the applied version is the agent's, but
//     never above the desired version the agent can have been told of (a
//     version this relay never issued is never stored);
//   - the IP address is the agent's, else the connection's;
//   - the stored deadline (for a relay that dies) moves only when the
//     status changes or fewer than three intervals of it remain: to six
//     intervals ahead;
//   - of the channels a device with serial ports reports, those of its
//     model whose state (points included) differs from the stored one are
//     stored, and those whose telemetry changed go to the Observers;
//   - so do the points whose value or quality changed (not only their
//     time), with their units and types from the desired configuration
//     (defs, asked only then), stale when the device is not ONLINE;
//   - a heartbeat event is recorded at the first heartbeat and then at
//     most once per metrics interval.
//
// Channels to store are appended to chans[:0], memory the caller reuses
// (when Channels is not nil, it is that memory, grown as needed); Channels
// is nil when none changes.
func (st *beatState) beat(h *protocol.Heartbeat, in beatIn, knownDesired func() int64, defs func() pointDefs, chans []protocol.ChannelState) beatDecision {
	d := beatDecision{Status: h.Status, PrevStatus: st.status, IPAddress: h.IPAddress, AppliedVersion: h.AppliedVersion}
	if d.AppliedVersion > st.appliedVersion {
		d.AppliedVersion = min(d.AppliedVersion, knownDesired())
	}
	if d.IPAddress == "" {
		d.IPAddress = in.remote
	}
	if h.Status != st.status || st.storedDeadline.Sub(in.now) < 3*in.interval {
		d.Deadline = in.now.Add(storedDeadlineBeats * in.interval)
	}
	d.Channels = chans[:0]
	var pd pointDefs
	if st.model.Has(resource.CapabilitySerialIO) && len(h.Channels) > 0 {
		d.HasChannels = true
		for _, ch := range h.Channels {
			mc, ok := st.model.Channel(ch.ID)
			if !ok {
				continue // not a channel of this device's model
			}
			// The model's id, the same string for every connection: the
			// one decoded would be kept by this one until the channel
			// changes.
			ch.ID = mc.ID
			old, seen := st.channels.get(ch.ID)
			if seen && sameChannel(old, ch) {
				continue
			}
			d.Channels = append(d.Channels, ch)
			if !seen || old.Live != ch.Live || old.TxOn != ch.TxOn || old.Error != ch.Error {
				d.Changed = append(d.Changed, resource.SignalChannel{ID: ch.ID, Live: ch.Live, TxOn: ch.TxOn, Error: ch.Error})
			}
			for k := range ch.Points {
				p := &ch.Points[k]
				if o := cloud.FindPointState(old.Points, p.Name, k); o != nil && o.Value == p.Value && o.Quality == p.Quality {
					continue
				}
				if defs != nil && pd == nil {
					pd = defs()
				}
				d.ChangedPoints = append(d.ChangedPoints, pd.ref(ch.ID, p, h.Status == resource.StatusOnline))
			}
		}
	}
	if len(d.Channels) == 0 {
		d.Channels = nil
	}
	if h.VPN != nil {
		d.HasVPN = true
		d.VPN = cloud.VPNState{Up: h.VPN.Up, InterfaceName: h.VPN.InterfaceName, Endpoint: h.VPN.Endpoint, PeerCount: h.VPN.PeerCount}
		if h.VPN.LastHandshake != nil {
			d.VPN.LastHandshake = h.VPN.LastHandshake.Time
		}
	}
	if st.lastHBEvent.IsZero() || in.now.Sub(st.lastHBEvent) >= st.metricsInterval {
		data := map[string]any{"status": h.Status, "ipAddress": d.IPAddress, "appliedVersion": d.AppliedVersion}
		if h.VPN != nil {
			data["vpn"] = h.VPN
		}
		b, _ := json.Marshal(data)
		d.Event = &resource.Event{Type: protocol.EventHeartbeat, Severity: resource.SeverityInfo,
			Message: "heartbeat (" + string(h.Status) + ")", Data: b, CreatedAt: resource.T(in.now)}
	}
	return d
}

// applyChannels records the channels d stores as the stored state. The
// connection calls it before handing the heartbeat to the store, with
// every channel's state encoded (HeartbeatIn.Reports).
func (st *beatState) applyChannels(d *beatDecision) {
	st.channels.setAll(d.Channels)
}

// apply moves the state on once the store took the heartbeat d decided,
// at now.
func (st *beatState) apply(d *beatDecision, now time.Time) {
	if !d.Deadline.IsZero() {
		st.storedDeadline = d.Deadline
	}
	st.status = d.Status
	st.appliedVersion = d.AppliedVersion
	if d.Event != nil {
		st.lastHBEvent = now
	}
}

// sameChannel reports whether a channel's reported state is unchanged.
func sameChannel(a, b protocol.ChannelState) bool {
	return a.ID == b.ID && a.Available == b.Available && a.Live == b.Live && a.TxOn == b.TxOn &&
		a.Error == b.Error && a.PassthroughAddress == b.PassthroughAddress && slices.EqualFunc(a.Points, b.Points, samePoint)
}

// samePoint reports whether a point's reported state is unchanged (times
// compared as instants).
func samePoint(a, b protocol.PointState) bool {
	return a.Name == b.Name && a.Value == b.Value && a.Quality == b.Quality && a.Error == b.Error && a.At.Equal(b.At.Time)
}

// pointDefs are the points of a device's desired configuration, by channel.
type pointDefs map[string][]serialcfg.PointDef

// newPointDefs returns the points of the channels of cfg.
func newPointDefs(cfg protocol.Config) pointDefs {
	out := make(pointDefs, len(cfg.Channels))
	for _, c := range cfg.Channels {
		if defs := c.Config.PointDefs(c.ID); len(defs) > 0 {
			out[c.ID] = defs
		}
	}
	return out
}

// ref is reported point state p of channel as the Observers see it: unit
// and type from the desired configuration (a point it does not name, as
// while the agent still applies an older one, has no unit and a number).
func (pd pointDefs) ref(channel string, p *protocol.PointState, online bool) resource.PointRef {
	for _, d := range pd[channel] {
		if d.Name == p.Name {
			return cloud.PointRefOf(cloud.PointOf(d, p, online))
		}
	}
	def := serialcfg.PointDef{ID: serialcfg.PointID(channel, p.Name), ChannelID: channel, Name: p.Name}
	return cloud.PointRefOf(cloud.PointOf(def, p, online))
}

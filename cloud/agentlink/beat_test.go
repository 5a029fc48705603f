package agentlink

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestBeatRules is the heartbeat's rules as a table: from the connection's
// state (as stored), a heartbeat and its time, what the heartbeat changes
// (the decision), and the state once the store took it. The state before
// is as after hello: ONLINE, applied version 3, the stored deadline 5
// minutes ahead (interval 10 s), the last heartbeat event 1 minute ago
// (metrics interval 5 minutes), channel uart-1 stored idle, no tunnel.
func TestBeatRules(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	const interval = 10 * time.Second
	ig500 := catalog.Find("IG-500")
	ig100 := catalog.Find("IG-100") // no serial ports
	uartIdle := protocol.ChannelState{ID: "uart-1", Available: true, Live: "idle"}
	handshake := resource.T(t0.Add(-time.Minute))
	// rs485-1 reads a temperature, a pump's state and a pressure; the
	// agent read them at t1, then at t2.
	t1, t2 := resource.T(t0.Add(-10*time.Second)), resource.T(t0.Add(-time.Second))
	rs485Defs := pointDefs{"rs485-1": {
		{ID: "rs485-1.temp", ChannelID: "rs485-1", Name: "temp", Type: "f32", Unit: "°C"},
		{ID: "rs485-1.pump", ChannelID: "rs485-1", Name: "pump", Type: "bool"},
		{ID: "rs485-1.pressure", ChannelID: "rs485-1", Name: "pressure", Type: "u16", Unit: "bar"},
	}}
	rs485 := func(pts ...protocol.PointState) protocol.ChannelState {
		return protocol.ChannelState{ID: "rs485-1", Available: true, Live: "1 2", Points: pts}
	}
	temp := func(v float64, at resource.Time) protocol.PointState {
		return protocol.PointState{Name: "temp", Value: v, Quality: "good", At: at}
	}
	pump := func(v float64, at resource.Time) protocol.PointState {
		return protocol.PointState{Name: "pump", Value: v, Quality: "good", At: at}
	}
	ref := func(id string, v any, unit, quality string, at resource.Time) resource.PointRef {
		return resource.PointRef{ID: id, Value: v, Unit: unit, Quality: quality, At: &at}
	}

	hb := func(edit func(h *protocol.Heartbeat)) protocol.Heartbeat {
		h := protocol.Heartbeat{Status: resource.StatusOnline, IPAddress: "192.0.2.7", AppliedVersion: 3}
		if edit != nil {
			edit(&h)
		}
		return h
	}
	// same is the decision of a heartbeat that changes nothing but its
	// time.
	same := beatDecision{Status: resource.StatusOnline, PrevStatus: resource.StatusOnline, IPAddress: "192.0.2.7", AppliedVersion: 3}
	with := func(edit func(d *beatDecision)) beatDecision {
		d := same
		edit(&d)
		return d
	}
	for _, tc := range []struct {
		name    string
		state   func(st *beatState) // from the state after hello
		hb      protocol.Heartbeat
		desired int64 // the highest desired version the agent can know; 0: must not be asked
		want    beatDecision
		event   string // the heartbeat event's data, "" for none
		after   func(st *beatState)
		defs    pointDefs // the desired configuration's points; nil: must not be asked
	}{
		{name: "nothing changed", hb: hb(nil), want: same},
		{name: "no address reported: the connection's",
			hb:   hb(func(h *protocol.Heartbeat) { h.IPAddress = "" }),
			want: with(func(d *beatDecision) { d.IPAddress = "198.51.100.1" })},
		{name: "a status change moves the stored deadline",
			hb:   hb(func(h *protocol.Heartbeat) { h.Status = resource.StatusRebooting }),
			want: with(func(d *beatDecision) { d.Status = resource.StatusRebooting; d.Deadline = t0.Add(6 * interval) }),
			after: func(st *beatState) {
				st.status = resource.StatusRebooting
				st.storedDeadline = t0.Add(6 * interval)
			}},
		{name: "fewer than three intervals left move the stored deadline",
			state: func(st *beatState) { st.storedDeadline = t0.Add(3*interval - time.Millisecond) },
			hb:    hb(nil),
			want:  with(func(d *beatDecision) { d.Deadline = t0.Add(6 * interval) }),
			after: func(st *beatState) { st.storedDeadline = t0.Add(6 * interval) }},
		{name: "three intervals left: the stored deadline stays",
			state: func(st *beatState) { st.storedDeadline = t0.Add(3 * interval) },
			hb:    hb(nil), want: same},
		{name: "an applied version the agent was told of",
			hb:      hb(func(h *protocol.Heartbeat) { h.AppliedVersion = 5 }),
			desired: 6,
			want:    with(func(d *beatDecision) { d.AppliedVersion = 5 }),
			after:   func(st *beatState) { st.appliedVersion = 5 }},
		{name: "an applied version above what the relay issued is stored as the issued one",
			hb:      hb(func(h *protocol.Heartbeat) { h.AppliedVersion = 9 }),
			desired: 4,
			want:    with(func(d *beatDecision) { d.AppliedVersion = 4 }),
			after:   func(st *beatState) { st.appliedVersion = 4 }},
		{name: "an applied version below the stored one is the agent's",
			hb:   hb(func(h *protocol.Heartbeat) { h.AppliedVersion = 1 }),
			want: with(func(d *beatDecision) { d.AppliedVersion = 1 }),
			after: func(st *beatState) {
				st.appliedVersion = 1
			}},
		{name: "channels: unchanged, unknown to the model, changed state, changed telemetry, new",
			hb: hb(func(h *protocol.Heartbeat) {
				h.Channels = []protocol.ChannelState{uartIdle,
					{ID: "uart-9", Live: "x"},
					{ID: "rs485-1", Available: true, Live: "idle"}}
			}),
			state: func(st *beatState) {
				st.channels.set(protocol.ChannelState{ID: "rs485-1", Available: false, Live: "idle"})
			},
			want: with(func(d *beatDecision) {
				d.HasChannels = true
				d.Channels = []protocol.ChannelState{{ID: "rs485-1", Available: true, Live: "idle"}}
			}),
			after: func(st *beatState) {
				st.channels.set(protocol.ChannelState{ID: "rs485-1", Available: true, Live: "idle"})
			}},
		{name: "channels: live values changed and a channel seen first",
			hb: hb(func(h *protocol.Heartbeat) {
				h.Channels = []protocol.ChannelState{{ID: "uart-1", Available: true, Live: "rx 12", TxOn: true},
					{ID: "gpio-1", Available: true, Live: "1"}}
			}),
			want: with(func(d *beatDecision) {
				d.HasChannels = true
				d.Channels = []protocol.ChannelState{{ID: "uart-1", Available: true, Live: "rx 12", TxOn: true}, {ID: "gpio-1", Available: true, Live: "1"}}
				d.Changed = []resource.SignalChannel{{ID: "uart-1", Live: "rx 12", TxOn: true}, {ID: "gpio-1", Live: "1"}}
			}),
			after: func(st *beatState) {
				st.channels.set(protocol.ChannelState{ID: "uart-1", Available: true, Live: "rx 12", TxOn: true})
				st.channels.set(protocol.ChannelState{ID: "gpio-1", Available: true, Live: "1"})
			}},
		{name: "points: only their time changed: stored, no point changed, the configuration not asked",
			state: func(st *beatState) { st.channels.set(rs485(temp(21.5, t1), pump(1, t1))) },
			hb:    hb(func(h *protocol.Heartbeat) { h.Channels = []protocol.ChannelState{rs485(temp(21.5, t2), pump(1, t2))} }),
			want: with(func(d *beatDecision) {
				d.HasChannels = true
				d.Channels = []protocol.ChannelState{rs485(temp(21.5, t2), pump(1, t2))}
			}),
			after: func(st *beatState) { st.channels.set(rs485(temp(21.5, t2), pump(1, t2))) }},
		{name: "points unchanged: nothing stored",
			state: func(st *beatState) { st.channels.set(rs485(temp(21.5, t1), pump(1, t1))) },
			hb:    hb(func(h *protocol.Heartbeat) { h.Channels = []protocol.ChannelState{rs485(temp(21.5, t1), pump(1, t1))} }),
			want:  with(func(d *beatDecision) { d.HasChannels = true })},
		{name: "points: a value changed, a point seen first, one the configuration does not name; units and types from it",
			state: func(st *beatState) { st.channels.set(rs485(temp(21.5, t1), pump(1, t1))) },
			hb: hb(func(h *protocol.Heartbeat) {
				h.Channels = []protocol.ChannelState{rs485(temp(21.5, t2), pump(0, t2),
					protocol.PointState{Name: "pressure", Value: 3, Quality: "good", At: t2},
					protocol.PointState{Name: "old", Value: 7, Quality: "good", At: t2})}
			}),
			defs: rs485Defs,
			want: with(func(d *beatDecision) {
				d.HasChannels = true
				d.Channels = []protocol.ChannelState{rs485(temp(21.5, t2), pump(0, t2),
					protocol.PointState{Name: "pressure", Value: 3, Quality: "good", At: t2},
					protocol.PointState{Name: "old", Value: 7, Quality: "good", At: t2})}
				d.ChangedPoints = []resource.PointRef{ref("rs485-1.pump", false, "", "good", t2), ref("rs485-1.pressure", 3.0, "bar", "good", t2),
					ref("rs485-1.old", 7.0, "", "good", t2)}
			}),
			after: func(st *beatState) {
				st.channels.set(rs485(temp(21.5, t2), pump(0, t2),
					protocol.PointState{Name: "pressure", Value: 3, Quality: "good", At: t2},
					protocol.PointState{Name: "old", Value: 7, Quality: "good", At: t2}))
			}},
		{name: "points: a failed read is a change of quality without a value; not ONLINE, the points are stale",
			state: func(st *beatState) { st.channels.set(rs485(temp(21.5, t1), pump(1, t1))) },
			hb: hb(func(h *protocol.Heartbeat) {
				h.Status = resource.StatusError
				h.Channels = []protocol.ChannelState{rs485(protocol.PointState{Name: "temp", Quality: "bad", Error: "modbus timeout (slave 7)", At: t2}, pump(1, t1))}
			}),
			defs: rs485Defs,
			want: with(func(d *beatDecision) {
				d.Status, d.Deadline = resource.StatusError, t0.Add(6*interval)
				d.HasChannels = true
				d.Channels = []protocol.ChannelState{rs485(protocol.PointState{Name: "temp", Quality: "bad", Error: "modbus timeout (slave 7)", At: t2}, pump(1, t1))}
				d.ChangedPoints = []resource.PointRef{{ID: "rs485-1.temp", Unit: "°C", Quality: "stale", At: &t2}}
			}),
			after: func(st *beatState) {
				st.status, st.storedDeadline = resource.StatusError, t0.Add(6*interval)
				st.channels.set(rs485(protocol.PointState{Name: "temp", Quality: "bad", Error: "modbus timeout (slave 7)", At: t2}, pump(1, t1)))
			}},
		{name: "channels unchanged: reported, none stored",
			hb:   hb(func(h *protocol.Heartbeat) { h.Channels = []protocol.ChannelState{uartIdle} }),
			want: with(func(d *beatDecision) { d.HasChannels = true })},
		{name: "a model without serial ports stores no channel",
			state: func(st *beatState) { st.model = ig100; st.channels = channelStates{} },
			hb:    hb(func(h *protocol.Heartbeat) { h.Channels = []protocol.ChannelState{uartIdle} }),
			want:  same},
		{name: "the tunnel's state, as reported",
			hb: hb(func(h *protocol.Heartbeat) {
				h.VPN = &protocol.VPN{Up: true, InterfaceName: "wg0", Endpoint: "vpn.example:51820", PeerCount: 2, LastHandshake: &handshake}
			}),
			want: with(func(d *beatDecision) {
				d.HasVPN = true
				d.VPN = cloud.VPNState{Up: true, InterfaceName: "wg0", Endpoint: "vpn.example:51820", PeerCount: 2, LastHandshake: handshake.Time}
			})},
		{name: "a heartbeat event once a metrics interval passed",
			state: func(st *beatState) { st.lastHBEvent = t0.Add(-5 * time.Minute) },
			hb:    hb(func(h *protocol.Heartbeat) { h.VPN = &protocol.VPN{InterfaceName: "wg0"} }),
			want: with(func(d *beatDecision) {
				d.HasVPN = true
				d.VPN = cloud.VPNState{InterfaceName: "wg0"}
			}),
			event: `{"appliedVersion":3,"ipAddress":"192.0.2.7","status":"ONLINE","vpn":{"up":false,"interfaceName":"wg0","endpoint":"","peerCount":0}}`,
			after: func(st *beatState) { st.lastHBEvent = t0 }},
		{name: "the first heartbeat event of a connection, with what is stored",
			state:   func(st *beatState) { st.lastHBEvent = time.Time{} },
			hb:      hb(func(h *protocol.Heartbeat) { h.IPAddress = ""; h.AppliedVersion = 7; h.Status = resource.StatusError }),
			desired: 5,
			want: with(func(d *beatDecision) {
				d.Status, d.IPAddress, d.AppliedVersion, d.Deadline = resource.StatusError, "198.51.100.1", 5, t0.Add(6*interval)
			}),
			event: `{"appliedVersion":5,"ipAddress":"198.51.100.1","status":"ERROR"}`,
			after: func(st *beatState) {
				st.status, st.appliedVersion, st.storedDeadline, st.lastHBEvent = resource.StatusError, 5, t0.Add(6*interval), t0
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := beatState{status: resource.StatusOnline, appliedVersion: 3, storedDeadline: t0.Add(5 * time.Minute),
				lastHBEvent: t0.Add(-time.Minute), metricsInterval: 5 * time.Minute, model: ig500,
				channels: channelStates{uartIdle}}
			if tc.state != nil {
				tc.state(&st)
			}
			want := st
			want.channels = slices.Clone(st.channels)
			if tc.after != nil {
				tc.after(&want)
			}
			before := st
			before.channels = slices.Clone(st.channels)
			asked := false
			knownDesired := func() int64 {
				asked = true
				if tc.desired == 0 {
					t.Error("the desired version was asked for, although the applied one is not above the stored one")
				}
				return tc.desired
			}
			h := tc.hb
			defs := func() pointDefs {
				if tc.defs == nil {
					t.Error("the desired configuration's points were asked for, although no point changed")
				}
				return tc.defs
			}
			d := st.beat(&h, beatIn{now: t0, interval: interval, remote: "198.51.100.1"}, knownDesired, defs, make([]protocol.ChannelState, 0, 1))
			if tc.desired != 0 && !asked {
				t.Error("an applied version above the stored one was not checked against the desired one")
			}
			if !reflect.DeepEqual(st, before) {
				t.Fatalf("deciding changed the state:\n%+v\nwas\n%+v", st, before)
			}
			ev := d.Event
			d.Event = nil
			if !reflect.DeepEqual(d, tc.want) {
				t.Errorf("decision\n%+v\nwant\n%+v", d, tc.want)
			}
			switch {
			case ev == nil && tc.event != "":
				t.Errorf("no heartbeat event, want one with %s", tc.event)
			case ev != nil && tc.event == "":
				t.Errorf("a heartbeat event %s, want none", ev.Data)
			case ev != nil:
				if string(ev.Data) != tc.event || ev.Type != protocol.EventHeartbeat || ev.Severity != resource.SeverityInfo ||
					ev.Message != "heartbeat ("+string(h.Status)+")" || !ev.CreatedAt.Time.Equal(t0) || ev.ID != "" {
					t.Errorf("heartbeat event %+v (data %s), want data %s at %s", ev, ev.Data, tc.event, t0)
				}
			}
			d.Event = ev
			st.applyChannels(&d)
			st.apply(&d, t0)
			if !reflect.DeepEqual(st, want) {
				t.Errorf("state after the store took it\n%+v\nwant\n%+v", st, want)
			}
		})
	}
}

// TestChannelStatesKeptCompactly: the channels a connection keeps between
// heartbeats take the room they need, not a doubling slice grown one
// channel at a time, and their ids are the model's strings, not the ones
// decoded from each connection's heartbeat (memory every idle agent
// holds).
func TestChannelStatesKeptCompactly(t *testing.T) {
	ig500 := catalog.Find("IG-500")
	st := beatState{status: resource.StatusOnline, metricsInterval: time.Hour, model: ig500, lastHBEvent: time.Now()}
	var reported []protocol.ChannelState
	for _, ch := range slices.Backward(ig500.Channels) {
		// A copy of the id, as a decoder makes.
		reported = append(reported, protocol.ChannelState{ID: string([]byte(ch.ID)), Available: true, Live: "idle"})
	}
	for _, n := range []int{3, 3, len(reported)} {
		h := &protocol.Heartbeat{Status: resource.StatusOnline, Channels: reported[:n]}
		d := st.beat(h, beatIn{now: time.Now(), interval: time.Second}, func() int64 { return 0 }, nil, nil)
		st.applyChannels(&d)
		if len(st.channels) != n || cap(st.channels) != n {
			t.Fatalf("after %d of the model's %d channels: len %d, cap %d", n, len(ig500.Channels), len(st.channels), cap(st.channels))
		}
		if !slices.IsSortedFunc(st.channels, func(a, b protocol.ChannelState) int { return strings.Compare(a.ID, b.ID) }) {
			t.Fatalf("channels not sorted by id: %v", st.channels)
		}
		reported[0].Live = "rx 1" // a change, stored in place
	}
	for _, ch := range st.channels {
		mc, _ := ig500.Channel(ch.ID)
		if unsafe.StringData(ch.ID) != unsafe.StringData(mc.ID) {
			t.Errorf("channel %s keeps the decoded id, not the model's", ch.ID)
		}
	}
	if got, _ := st.channels.get(reported[0].ID); got.Live != "rx 1" {
		t.Errorf("channel %s: live %q, want the last reported", got.ID, got.Live)
	}
}

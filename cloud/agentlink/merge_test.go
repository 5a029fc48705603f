package agentlink

import (
	"reflect"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// The heartbeats of one session in a transaction merge into one group
// whose result is what applying them in order would leave; another
// session of the same device is a group of its own; a skipped heartbeat
// takes no part; Reset starts the next transaction empty.
func TestHeartbeatMerge(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	dev := Device{ID: "d1"}
	ch := func(id, live string) protocol.ChannelState {
		return protocol.ChannelState{ID: id, Available: true, Live: live}
	}
	hbs := []HeartbeatIn{
		{Device: dev, Session: "a", At: t0, Deadline: t0.Add(time.Minute), HasChannels: true, Channels: []protocol.ChannelState{ch("gpio-1", "0"), ch("gpio-2", "0")}},
		{Device: dev, Session: "b", At: t0.Add(time.Second)},
		{Device: dev, Session: "a", At: t0.Add(2 * time.Second)}, // skipped
		{Device: dev, Session: "a", At: t0.Add(3 * time.Second), HasChannels: true, Channels: []protocol.ChannelState{ch("gpio-2", "1")}},
		{Device: dev, Session: "a", At: t0.Add(4 * time.Second)},
	}
	var m HeartbeatMerge
	for round := range 2 {
		for i := range hbs {
			if i == 2 {
				m.Skip()
				continue
			}
			m.Add(&hbs[i], true)
		}
		want := []HeartbeatGroup{
			{DeviceID: "d1", Session: "a", First: 0, Last: 4, Deadline: t0.Add(time.Minute), SerialAt: 3,
				Channels: []protocol.ChannelState{ch("gpio-1", "0"), ch("gpio-2", "1")}},
			{DeviceID: "d1", Session: "b", First: 1, Last: 1, SerialAt: -1},
		}
		if !reflect.DeepEqual(m.Groups, want) {
			t.Fatalf("round %d: groups\n%+v\nwant\n%+v", round, m.Groups, want)
		}
		var order []int
		for i := m.Groups[0].First; i >= 0; i = m.Next(i) {
			order = append(order, i)
		}
		if !reflect.DeepEqual(order, []int{0, 3, 4}) {
			t.Errorf("round %d: session a's heartbeats %v, want [0 3 4]", round, order)
		}
		if hbs[0].Channels[1].Live != "0" {
			t.Errorf("merging changed a heartbeat's own channels: %+v", hbs[0].Channels)
		}
		m.Reset()
		if len(m.Groups) != 0 {
			t.Fatalf("after Reset: %d groups", len(m.Groups))
		}
	}
	// A model without serial I/O: channels do not count.
	m.Add(&hbs[0], false)
	if g := m.Groups[0]; g.SerialAt != -1 || g.Channels != nil {
		t.Errorf("no serial I/O: SerialAt %d, channels %v", g.SerialAt, g.Channels)
	}
}

// The stored form of the channels' points follows their channels through
// the merge: encoded by the caller or, when left out, by the merge.
func TestHeartbeatMergePoints(t *testing.T) {
	at := resource.T(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	dev := Device{ID: "d1"}
	pt := func(v float64) []protocol.PointState {
		return []protocol.PointState{{Name: "temp", Value: v, Quality: "good", At: at}}
	}
	first := []protocol.ChannelState{{ID: "gpio-1", Live: "0"}, {ID: "rs485-1", Points: pt(1)}}
	hbs := []HeartbeatIn{
		{Device: dev, Session: "a", HasChannels: true, Channels: first, Points: EncodeChannelPoints(first, nil)},
		{Device: dev, Session: "a", HasChannels: true, Channels: []protocol.ChannelState{{ID: "rs485-2", Points: pt(3)}, {ID: "rs485-1", Points: pt(2)}}}, // not encoded
		{Device: dev, Session: "b", HasChannels: true, Channels: []protocol.ChannelState{{ID: "gpio-1", Live: "1"}}},
	}
	var m HeartbeatMerge
	for i := range hbs {
		m.Add(&hbs[i], true)
	}
	a, b := m.Groups[0], m.Groups[1]
	var ids []string
	for _, c := range a.Channels {
		ids = append(ids, c.ID)
	}
	want := []string{"", cloud.EncodePointStates(pt(2)), cloud.EncodePointStates(pt(3))}
	if !reflect.DeepEqual(ids, []string{"gpio-1", "rs485-1", "rs485-2"}) || !reflect.DeepEqual(a.Points, want) {
		t.Errorf("session a: channels %v points %q, want [gpio-1 rs485-1 rs485-2] %q", ids, a.Points, want)
	}
	if b.Points != nil || b.PointsOf(0) != "" {
		t.Errorf("session b reported no points, has %q", b.Points)
	}
	if hbs[0].Points[1] != cloud.EncodePointStates(pt(1)) {
		t.Errorf("merging changed a heartbeat's own points: %q", hbs[0].Points)
	}
}

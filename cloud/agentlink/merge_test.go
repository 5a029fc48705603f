package agentlink

import (
	"reflect"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
)

// The heartbeats of one session in a transaction merge into one group
// whose result is what applying them in order would leave: the channels of
// the last heartbeat that changed one (each carries every channel, encoded
// by its caller or, when left to the store, by the merge); another session
// of the same device is a group of its own; a skipped heartbeat takes no
// part; Reset starts the next transaction empty.
func TestHeartbeatMerge(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	dev := Device{ID: "d1"}
	ch := func(id, live string) protocol.ChannelState {
		return protocol.ChannelState{ID: id, Available: true, Live: live}
	}
	second := []protocol.ChannelState{ch("gpio-1", "0"), ch("gpio-2", "1")}
	hbs := []HeartbeatIn{
		{Device: dev, Session: "a", At: t0, Deadline: t0.Add(time.Minute), HasChannels: true, Reports: cloud.EncodeChannelReports([]protocol.ChannelState{ch("gpio-1", "0"), ch("gpio-2", "0")})},
		{Device: dev, Session: "b", At: t0.Add(time.Second)},
		{Device: dev, Session: "a", At: t0.Add(2 * time.Second)},                                      // skipped
		{Device: dev, Session: "a", At: t0.Add(3 * time.Second), HasChannels: true, Channels: second}, // encoded by the merge
		{Device: dev, Session: "a", At: t0.Add(4 * time.Second), HasChannels: true},                   // serial telemetry, no channel changed
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
			{DeviceID: "d1", Session: "a", First: 0, Last: 4, Deadline: t0.Add(time.Minute), SerialAt: 4,
				Reports: `[{"id":"gpio-1","available":true,"live":"0"},{"id":"gpio-2","available":true,"live":"1"}]`},
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
		m.Reset()
		if len(m.Groups) != 0 {
			t.Fatalf("after Reset: %d groups", len(m.Groups))
		}
	}
	// A model without serial I/O: channels do not count.
	m.Add(&hbs[0], false)
	if g := m.Groups[0]; g.SerialAt != -1 || g.Reports != "" {
		t.Errorf("no serial I/O: SerialAt %d, reports %q", g.SerialAt, g.Reports)
	}
}

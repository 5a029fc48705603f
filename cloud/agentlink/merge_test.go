package agentlink

import (
	"fmt"
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
// part; Reset starts the next transaction empty, after a large one too.
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
	for round := range 4 {
		if round == 2 {
			// A transaction of 2,048 sessions before this one: this one
			// merges into the burst's map, cleared, and its Reset makes the
			// map again at its own size, into which the next merges.
			burst := make([]HeartbeatIn, 2*resetShrinkMin)
			for i := range burst {
				burst[i] = HeartbeatIn{Device: Device{ID: fmt.Sprint("burst-", i)}, Session: "s"}
				m.Add(&burst[i], true)
			}
			if len(m.Groups) != len(burst) {
				t.Fatalf("burst: %d groups, want %d", len(m.Groups), len(burst))
			}
			m.Reset()
		}
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
		if round == 2 && m.peak > resetShrinkMin {
			t.Fatalf("the Reset after the burst's next transaction kept the burst's map (peak %d)", m.peak)
		}
	}
	// A model without serial I/O: channels do not count.
	m.Add(&hbs[0], false)
	if g := m.Groups[0]; g.SerialAt != -1 || g.Reports != "" {
		t.Errorf("no serial I/O: SerialAt %d, reports %q", g.SerialAt, g.Reports)
	}
}

// BenchmarkHeartbeatMergeAfterBurst merges transactions of 240 heartbeats
// (20,000 agents at a heartbeat a second, 84 transactions a second) after
// one of 16,000 (a connect burst or a reconnect storm, the writer's
// largest transaction): the cost per transaction of Add and Reset.
func BenchmarkHeartbeatMergeAfterBurst(b *testing.B) {
	ins := make([]HeartbeatIn, 16000)
	for i := range ins {
		ins[i] = HeartbeatIn{Device: Device{ID: fmt.Sprintf("dev-%05d", i)}, Session: fmt.Sprintf("s-%05d", i)}
	}
	var m HeartbeatMerge
	for i := range ins {
		m.Add(&ins[i], false)
	}
	m.Reset()
	next := 0
	for b.Loop() {
		for range 240 {
			m.Add(&ins[next], false)
			next = (next + 1) % len(ins)
		}
		m.Reset()
	}
}

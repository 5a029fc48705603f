package agentlink

import (
	"sync"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
)

// HeartbeatMerge is the rule by which a store writes the heartbeats of one
// transaction: those of one session are applied as one (a
// HeartbeatGroup), which leaves the state that applying them one by one in
// order would. Both stores merge with it and write each group's result
// with one statement per table. It keeps its memory from one transaction
// to the next (Reset), so that merging allocates nothing per heartbeat in
// the common case; it is not safe for concurrent use.
type HeartbeatMerge struct {
	// Groups are the sessions' merged heartbeats, in the order of their
	// first heartbeat.
	Groups []HeartbeatGroup
	byKey  map[sessionKey]int // index in Groups
	next   []int              // per heartbeat: the next of its group, -1 after the last
}

type sessionKey struct{ device, session string }

// HeartbeatGroup is the heartbeats of one session in one transaction: the
// device row and the serial telemetry time take the values of the last of
// them (Last, SerialAt), the deadline the last one set, each channel the
// state of the last heartbeat that reported it, and every heartbeat's
// event is stored.
type HeartbeatGroup struct {
	DeviceID, Session string
	// First and Last are the group's first and last heartbeat, by their
	// index in the transaction; Next links the others in order.
	First, Last int
	// Deadline is the last deadline set, zero when none.
	Deadline time.Time
	// SerialAt is the last heartbeat that carries serial telemetry, -1
	// when none does.
	SerialAt int
	// Channels are the reported channels, by first report, each in the
	// state of its last.
	Channels []protocol.ChannelState
	// Points is the stored form of each channel's point states
	// (cloud.EncodePointStates), as long as Channels; nil when no channel
	// reports points.
	Points []string
}

// Add merges the transaction's next heartbeat into its session's group
// and returns the group's index; serial is whether the device's model has
// serial I/O (only then do its channels count).
func (m *HeartbeatMerge) Add(in *HeartbeatIn, serial bool) int {
	i := len(m.next)
	m.next = append(m.next, -1)
	if m.byKey == nil {
		m.byKey = make(map[sessionKey]int)
	}
	key := sessionKey{in.Device.ID, in.Session}
	gi, ok := m.byKey[key]
	if !ok {
		gi = len(m.Groups)
		m.byKey[key] = gi
		m.Groups = append(m.Groups, HeartbeatGroup{DeviceID: in.Device.ID, Session: in.Session, First: i, Last: i, SerialAt: -1})
	} else {
		m.next[m.Groups[gi].Last] = i
	}
	g := &m.Groups[gi]
	g.Last = i
	if !in.Deadline.IsZero() {
		g.Deadline = in.Deadline
	}
	if serial && in.HasChannels {
		g.SerialAt = i
		g.Channels, g.Points = mergeChannels(g.Channels, g.Points, in)
	}
	return gi
}

// mergeChannels returns the channels have (with the stored forms of their
// points, havePts) with in's applied over them, as MergeChannels, without
// changing the arrays of either.
func mergeChannels(have []protocol.ChannelState, havePts []string, in *HeartbeatIn) ([]protocol.ChannelState, []string) {
	pts := in.Points
	if len(pts) < len(in.Channels) {
		pts = EncodeChannelPoints(in.Channels, nil)
	}
	if have == nil {
		return in.Channels, pts
	}
	merged := MergeChannels(have, in.Channels)
	if havePts == nil && pts == nil {
		return merged, nil
	}
	out := make([]string, len(merged))
	copy(out, havePts)
	for k, c := range in.Channels {
		p := ""
		if pts != nil {
			p = pts[k]
		}
		for j := range merged {
			if merged[j].ID == c.ID {
				out[j] = p
				break
			}
		}
	}
	return merged, out
}

// EncodeChannelPoints returns the stored form of each channel's point
// states (cloud.EncodePointStates) appended to into[:0]; nil when no
// channel reports points (into's memory is then left alone).
func EncodeChannelPoints(chans []protocol.ChannelState, into []string) []string {
	some := false
	for k := range chans {
		if len(chans[k].Points) > 0 {
			some = true
			break
		}
	}
	if !some {
		return nil
	}
	into = into[:0]
	buf, _ := pointBufs.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	for k := range chans {
		if len(chans[k].Points) == 0 {
			into = append(into, "")
			continue
		}
		// Encoded into a buffer kept for the next heartbeat, then copied
		// once at its length: a channel of 50 points allocated 7.9 KB in
		// three pieces as the encoding grew, now 2.3 KB in one.
		*buf = cloud.AppendPointStates((*buf)[:0], chans[k].Points)
		into = append(into, string(*buf))
	}
	if cap(*buf) <= maxPointBuf {
		pointBufs.Put(buf)
	}
	return into
}

// pointBufs holds EncodeChannelPoints' buffers (*[]byte) for reuse; one
// grown beyond maxPointBuf (a channel of unusually many or long points) is
// left to the collector.
var pointBufs sync.Pool

const maxPointBuf = 64 << 10

// PointsOf returns the stored form of the points of channel k of group g.
func (g *HeartbeatGroup) PointsOf(k int) string {
	if g.Points == nil {
		return ""
	}
	return g.Points[k]
}

// Skip passes over the transaction's next heartbeat: one that failed on
// its own and takes no part.
func (m *HeartbeatMerge) Skip() { m.next = append(m.next, -1) }

// Next returns the heartbeat of i's group after i, -1 after the last.
func (m *HeartbeatMerge) Next(i int) int { return m.next[i] }

// Reset empties m for the next transaction, keeping its memory.
func (m *HeartbeatMerge) Reset() {
	clear(m.byKey)
	clear(m.Groups)
	m.Groups, m.next = m.Groups[:0], m.next[:0]
}

package agentlink

import (
	"time"
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
	// peak is the most groups byKey has held since it was made: a map
	// keeps the room of its largest size, and clearing it visits all of it.
	peak int
}

type sessionKey struct{ device, session string }

// HeartbeatGroup is the heartbeats of one session in one transaction: the
// device row and the serial telemetry time take the values of the last of
// them (Last, SerialAt), the deadline the last one set, the channels the
// reports of the last that changed one (each carries every channel), and
// every heartbeat's event is stored.
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
	// Reports is the stored form of the device's channels after the
	// group (HeartbeatIn.ChannelReports); "" when no channel changed.
	Reports string
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
		if r := in.ChannelReports(); r != "" {
			g.Reports = r
		}
	}
	return gi
}

// Skip passes over the transaction's next heartbeat: one that failed on
// its own and takes no part.
func (m *HeartbeatMerge) Skip() { m.next = append(m.next, -1) }

// Next returns the heartbeat of i's group after i, -1 after the last.
func (m *HeartbeatMerge) Next(i int) int { return m.next[i] }

// Reset empties m for the next transaction, keeping its memory, except a
// map grown by a transaction far larger than this one (a connect burst or
// a reconnect storm: up to the writer's 16,000 jobs), which is made again
// at this one's size: clear visits every slot a map ever grew. After such
// a burst, merging and resetting a transaction of 240 heartbeats took
// 53–62 µs with the map cleared and 30–34 µs with it made again
// (BenchmarkHeartbeatMergeAfterBurst); in the relay's profile the clearing
// was 0.9–1.1 % of its CPU.
func (m *HeartbeatMerge) Reset() {
	n := len(m.byKey)
	m.peak = max(m.peak, n)
	if m.peak > resetShrinkMin && m.peak > 4*n {
		m.byKey, m.peak = make(map[sessionKey]int, n), n
	} else {
		clear(m.byKey)
	}
	clear(m.Groups)
	m.Groups, m.next = m.Groups[:0], m.next[:0]
}

// resetShrinkMin is the size below which Reset always clears the map: a
// transaction's sessions move within a few hundred under steady load, and
// making a map of that size again would only allocate.
const resetShrinkMin = 1024

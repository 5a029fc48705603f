package link

import "sync/atomic"

// Stats are the link's counters since the agent started, for metrics.
type Stats struct {
	// Connected reports whether a session is established now.
	Connected bool
	// Sessions counts sessions established (Welcome received).
	Sessions uint64
	// Reconnects counts the times a session ended or a connection attempt
	// failed and a reconnect was scheduled.
	Reconnects uint64
	// HeartbeatsSent counts heartbeats written to the relay.
	HeartbeatsSent uint64
}

type counters struct {
	sessions, reconnects, heartbeats atomic.Uint64
}

// Stats returns the counters.
func (l *Link) Stats() Stats {
	return Stats{
		Connected:      l.Connected(),
		Sessions:       l.stats.sessions.Load(),
		Reconnects:     l.stats.reconnects.Load(),
		HeartbeatsSent: l.stats.heartbeats.Load(),
	}
}

// heartbeatWritten counts a heartbeat whose write returned err, and
// returns err.
func (l *Link) heartbeatWritten(err error) error {
	if err == nil {
		l.stats.heartbeats.Add(1)
	}
	return err
}

package agentlink

import (
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/shared/protocol"
)

// Close reasons of agent connections, as counted by ConnStats.
const (
	ClosedPeerGone         = "peer_gone"         // the agent closed or the network dropped
	ClosedProtocolError    = "protocol_error"    // malformed, unknown or out-of-order message (4000)
	ClosedTooLarge         = "too_large"         // oversized message or batch (4001)
	ClosedTokenRevoked     = "token_revoked"     // token revoked while connected (4003)
	ClosedReplaced         = "replaced"          // a newer connection of the device took over (4009)
	ClosedShutdown         = "shutdown"          // relay shutting down (1012; 4010 before)
	ClosedHeartbeatTimeout = "heartbeat_timeout" // no heartbeat for three intervals (1008)
	ClosedInternalError    = "internal_error"    // the store failed (1011)
	ClosedOther            = "other"
)

// CloseReasons lists every close reason ConnStats counts.
var CloseReasons = [...]string{ClosedPeerGone, ClosedProtocolError, ClosedTooLarge, ClosedTokenRevoked,
	ClosedReplaced, ClosedShutdown, ClosedHeartbeatTimeout, ClosedInternalError, ClosedOther}

func closeReasonIndex(code websocket.StatusCode) int {
	switch code {
	case 0:
		return 0
	case protocol.CloseProtocolError:
		return 1
	case protocol.CloseTooLarge:
		return 2
	case protocol.CloseUnauthorized:
		return 3
	case protocol.CloseReplaced:
		return 4
	case protocol.CloseServiceRestart, protocol.CloseShutdown:
		return 5
	case websocket.StatusPolicyViolation:
		return 6
	case websocket.StatusInternalError:
		return 7
	}
	return len(CloseReasons) - 1
}

// connCounters count accepted and closed agent sessions and sum the
// heartbeat-to-stored latencies.
type connCounters struct {
	accepted  atomic.Int64
	closed    [len(CloseReasons)]atomic.Int64
	latencyNS atomic.Int64
}

// sessionEnded counts a session that ended with close code (0: the peer
// went away).
func (c *connCounters) sessionEnded(code websocket.StatusCode) {
	c.closed[closeReasonIndex(code)].Add(1)
}

// heartbeatStored counts one stored heartbeat's latency in the histogram
// and its sum.
func (c *counters) heartbeatStored(d time.Duration) {
	c.hbLatency[bucketOf(d)].Add(1)
	c.conns.latencyNS.Add(int64(d))
}

// ConnStats are the endpoint's session counters since start, for metrics.
type ConnStats struct {
	// Accepted counts sessions that passed authentication and the
	// websocket upgrade.
	Accepted int64
	// Closed counts ended sessions by close reason (CloseReasons).
	Closed map[string]int64
	// HeartbeatLatencySum is the sum of the latencies counted in
	// Stats.HeartbeatLatency.
	HeartbeatLatencySum time.Duration
}

// ConnStats returns the session counters.
func (s *Server) ConnStats() ConnStats {
	st := ConnStats{
		Accepted:            s.stats.conns.accepted.Load(),
		Closed:              make(map[string]int64, len(CloseReasons)),
		HeartbeatLatencySum: time.Duration(s.stats.conns.latencyNS.Load()),
	}
	for i, r := range CloseReasons {
		st.Closed[r] = s.stats.conns.closed[i].Load()
	}
	return st
}

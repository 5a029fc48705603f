package link

import (
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestRelayAtTheLastSeqKeepsTheLinkUp: a record numbered 2^63-1 (MaxSeq),
// the highest the relay takes, was stored for this device by something
// else than this agent (its token used elsewhere). The agent cannot number
// a record above it, so the spool's rebase fails; the link used to end
// every session there, and the device never came back. Now the link stays
// up (heartbeats go on, one connection), its records stay spooled and
// unsent, and the log says why.
func TestRelayAtTheLastSeqKeepsTheLinkUp(t *testing.T) {
	r := newRelay(t)
	r.stored[protocol.MaxSeq] = protocol.Record{Seq: protocol.MaxSeq, Metric: &resource.MetricSample{CapturedAt: resource.T(time.Now())}}
	sp := openSpool(t)
	fillSpool(t, sp, 1, 3)
	h := startLink(t, r, sp, func(o *Options) { o.HeartbeatInterval = 20 * time.Millisecond })
	eventually(t, "heartbeats", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.heartbeats) >= 5
	})
	r.mu.Lock()
	conns, batches := r.conns, len(r.batches)
	r.mu.Unlock()
	if conns != 1 || batches != 0 {
		t.Errorf("%d connections and %d record batches; want 1 and none", conns, batches)
	}
	if !h.link.Connected() {
		t.Error("the link is not up")
	}
	if got := sp.Stats().Pending; got != 3 {
		t.Errorf("%d records pending, want the 3 kept", got)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "cannot number above") || !strings.Contains(logs, "relayLastSeq=9223372036854775807") {
		t.Errorf("the log does not say why records are not sent:\n%s", logs)
	}
}

// TestHeartbeatOutOfBoundsSentWithoutIt: a channel whose id the relay
// refuses (over protocol.MaxChannelID bytes; the agent used to shorten it
// to 200, which the relay refused at every beat) is left out of the
// heartbeat, once logged; the heartbeat goes, with the other channels.
func TestHeartbeatOutOfBoundsSentWithoutIt(t *testing.T) {
	r := newRelay(t)
	long := strings.Repeat("x", protocol.MaxChannelID+1)
	h := startLink(t, r, nil, func(o *Options) {
		o.HeartbeatInterval = 20 * time.Millisecond
		o.Heartbeat = func() protocol.Heartbeat {
			return protocol.Heartbeat{Status: resource.StatusOnline, Channels: []protocol.ChannelState{{ID: long}, {ID: "ttyS0"}}}
		}
	})
	eventually(t, "heartbeats", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.heartbeats) >= 3
	})
	r.mu.Lock()
	hb := r.heartbeats[len(r.heartbeats)-1]
	r.mu.Unlock()
	if len(hb.Channels) != 1 || hb.Channels[0].ID != "ttyS0" {
		t.Errorf("channels sent: %+v", hb.Channels)
	}
	if n := strings.Count(h.logs.String(), "heartbeat out of the protocol's bounds"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, h.logs.String())
	}
}

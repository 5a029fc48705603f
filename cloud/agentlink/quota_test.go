package agentlink_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/agent/link"
	"github.com/fleet/fleet/agent/spool"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/logbuf"
)

// realAgent is fleet-agent's own link and spool (agent/link, agent/spool)
// connected to e's endpoint as the device of token, its spool filled with
// n metric samples a second apart (a backlog) before it connects. It runs
// until the test ends.
type realAgent struct {
	sp   *spool.Spool
	link *link.Link
	logs *logbuf.Buffer
}

func startRealAgent(t *testing.T, e *env, token string, n int) *realAgent {
	t.Helper()
	sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	from := time.Now().Add(-time.Duration(n) * time.Second).Truncate(time.Second)
	for i := range n {
		b, err := link.EncodeRecord(metricRec(0, from.Add(time.Duration(i)*time.Second), float64(i%100)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sp.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	logs := &logbuf.Buffer{}
	l, err := link.New(link.Options{
		URL: e.base, Token: token, Spool: sp,
		Hello: func() protocol.Hello { return hello() },
		Heartbeat: func() protocol.Heartbeat {
			return protocol.Heartbeat{Status: resource.StatusOnline}
		},
		HeartbeatInterval: time.Hour, BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &realAgent{sp: sp, link: l, logs: logs}
}

// waitAcked waits until the relay acknowledged every record of a's spool.
func (a *realAgent) waitAcked(t *testing.T, d time.Duration, want int) {
	t.Helper()
	eventually(t, d, func() string {
		if st := a.sp.Stats(); st.Pending != 0 || st.Acked != uint64(want) {
			return fmt.Sprintf("spool: %d pending, %d acknowledged", st.Pending, st.Acked)
		}
		return ""
	})
}

// TestSeqTheAgentCannotFollowRefused: a record numbered 2^63-1, sent with a
// device's token by something else than its agent, used to be stored; the
// agent then had no number left above it and never sent a record again.
// Now the relay refuses it (a protocol error naming the seq) and stores
// nothing of it, and the device's agent connects and delivers its records.
func TestSeqTheAgentCannotFollowRefused(t *testing.T) {
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		e := newEnv(t, open, nil)
		id, tok := e.addDevice("IG-500")
		a, w := e.connect(tok, hello())
		if w.LastSeq != 0 {
			t.Fatalf("a new device's lastSeq %d", w.LastSeq)
		}
		a.send(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{metricRec(protocol.MaxSeq, time.Now(), 2)}}})
		ce := a.expectClose(5 * time.Second)
		if ce.Code != protocol.CloseProtocolError || !strings.Contains(ce.Reason, "seq") || !strings.Contains(ce.Reason, "9223372036854775807") {
			t.Fatalf("close %d %q; want 4000 naming the seq", ce.Code, ce.Reason)
		}
		// The device's agent comes back and delivers.
		ag := startRealAgent(t, e, tok, 5)
		eventually(t, 10*time.Second, func() string {
			if n := e.metrics(id); n != 5 {
				return fmt.Sprintf("%d metric samples stored", n)
			}
			return ""
		})
		if !ag.link.Connected() {
			t.Error("the agent is not connected")
		}
		if strings.Contains(ag.logs.String(), "cannot number above") {
			t.Errorf("the agent could not follow:\n%s", ag.logs.String())
		}
		ag.waitAcked(t, 5*time.Second, 5)
	})
}

// TestDeviceIngestQuota: one device floods records; the relay stores them
// at the quota's pace (its burst, then Items a second), records one
// ingest.throttled event, and an agent with a backlog above the burst gets
// all of it stored, slower.
func TestDeviceIngestQuota(t *testing.T) {
	const rate, burst = 200, 2000 // burst: ten seconds of rate
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		e := newEnv(t, open, func(c *agentlink.Config) { c.Quota = agentlink.Quota{Items: rate, Bytes: 8 << 20} })
		id, tok := e.addDevice("IG-500")
		a, _ := e.connect(tok, hello())
		start := time.Now()
		base := start.Add(-time.Hour)
		var seq uint64
		for range 6 { // 3,000 records, as fast as the relay acknowledges them
			items := make([]protocol.Record, protocol.MaxBatch)
			for i := range items {
				seq++
				items[i] = metricRec(seq, base.Add(time.Duration(seq)*time.Millisecond), 1)
			}
			acked := a.records(items...)
			elapsed := time.Since(start)
			if limit := burst + rate*elapsed.Seconds() + 1; float64(acked) > limit {
				t.Errorf("%d records stored after %s; the quota allows %.0f", acked, elapsed, limit)
			}
		}
		a.ws.CloseNow()
		if n := e.countEvents(id, protocol.EventIngestThrottled, nil); n != 1 {
			t.Errorf("%d ingest.throttled events, want 1", n)
		}
		if st := e.srv.Stats(); st.Throttled == 0 {
			t.Error("no message counted as throttled")
		}
		ev := e.events(id, protocol.EventIngestThrottled)
		if len(ev) == 1 && (ev[0].Severity != resource.SeverityWarning || !strings.Contains(ev[0].Message, "200 items a second")) {
			t.Errorf("event %+v", ev[0])
		}

		// An agent back from an outage with a backlog above the burst:
		// everything is stored (acknowledged after its commit), none of it
		// refused or lost.
		id2, tok2 := e.addDevice("IG-500")
		const backlog = burst + 600
		ag := startRealAgent(t, e, tok2, backlog)
		ag.waitAcked(t, 30*time.Second, backlog)
		if n := e.countEvents(id2, protocol.EventIngestThrottled, nil); n != 1 {
			t.Errorf("%d ingest.throttled events for the agent's backlog, want 1", n)
		}
	})
}

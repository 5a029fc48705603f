package agentlink_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
)

// gated holds the heartbeats and records batches of the devices in held
// inside the store until open is closed, and counts the heartbeats inside
// Heartbeat at once.
type gated struct {
	agentlink.Store
	open chan struct{}

	mu          sync.Mutex
	held        map[string]bool
	inside, max int // heartbeats of held devices inside Heartbeat: now, at most
	recordsIn   int // records batches of held devices waiting
}

func (g *gated) hold(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held[id] = true
}

func (g *gated) counts() (inside, max, records int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inside, g.max, g.recordsIn
}

func (g *gated) Heartbeat(ctx context.Context, in agentlink.HeartbeatIn, done func(agentlink.HeartbeatOut, error)) error {
	g.mu.Lock()
	held := g.held[in.Device.ID]
	if held {
		g.inside++
		g.max = max(g.max, g.inside)
	}
	g.mu.Unlock()
	if held {
		<-g.open
		g.mu.Lock()
		g.inside--
		g.mu.Unlock()
	}
	return g.Store.Heartbeat(ctx, in, done)
}

func (g *gated) Records(ctx context.Context, in agentlink.RecordsIn) (agentlink.RecordsOut, error) {
	g.mu.Lock()
	held := g.held[in.Device.ID]
	if held {
		g.recordsIn++
	}
	g.mu.Unlock()
	if held {
		<-g.open
	}
	return g.Store.Records(ctx, in)
}

// gatedEnv is an endpoint with maxWorkers workers over a gated store.
func gatedEnv(t *testing.T, open storetest.Opener, maxWorkers int) (*env, *gated) {
	g := &gated{open: make(chan struct{}), held: map[string]bool{}}
	e := newEnv(t, open, func(c *agentlink.Config) {
		g.Store = c.Store
		c.Store = g
		c.MaxWorkers = maxWorkers
	})
	return e, g
}

// The workers that handle the agents' messages are bounded: when the
// store holds back (here: every heartbeat of six agents waits in the
// store's queue), at most MaxWorkers heartbeats are in hand and the rest
// wait their turn on their connections, then are all stored. A records
// batch waiting for its commit holds no worker: with a single worker,
// another agent's heartbeat is stored while the batch waits, and the batch
// is acknowledged after.
func TestWorkersBounded(t *testing.T) {
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		e, g := gatedEnv(t, open, 2)
		var ids []string
		var agents []*agent
		for range 6 {
			id, tok := e.addDevice("IG-500")
			a, _ := e.connect(tok, hello())
			g.hold(id)
			ids, agents = append(ids, id), append(agents, a)
		}
		for _, a := range agents {
			a.heartbeat(protocol.Heartbeat{})
		}
		eventually(t, 5*time.Second, func() string {
			if in, _, _ := g.counts(); in != 2 {
				return fmt.Sprintf("%d heartbeats in the store's hands, want 2 (the workers' bound)", in)
			}
			return ""
		})
		time.Sleep(200 * time.Millisecond) // time for a third to get in, were the bound not held
		if _, most, _ := g.counts(); most != 2 {
			t.Fatalf("%d heartbeats were in hand at once with MaxWorkers 2", most)
		}
		close(g.open)
		for _, id := range ids {
			eventually(t, 5*time.Second, func() string {
				if n := e.obs.heartbeatCount(id); n != 1 {
					return fmt.Sprintf("device %s: %d heartbeats stored, want 1", id, n)
				}
				return ""
			})
		}
	})
	stores.Run(t, func(t *testing.T, open storetest.Opener) {
		e, g := gatedEnv(t, open, 1)
		slowID, slowTok := e.addDevice("IG-500")
		otherID, otherTok := e.addDevice("IG-500")
		slow, _ := e.connect(slowTok, hello())
		other, _ := e.connect(otherTok, hello())
		g.hold(slowID)
		slow.send(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{metricRec(1, time.Now(), 12)}}})
		eventually(t, 5*time.Second, func() string {
			if _, _, r := g.counts(); r != 1 {
				return "the records batch has not reached the store"
			}
			return ""
		})
		other.heartbeat(protocol.Heartbeat{})
		eventually(t, 5*time.Second, func() string {
			if n := e.obs.heartbeatCount(otherID); n != 1 {
				return fmt.Sprintf("%d heartbeats of the other agent stored while a records batch waits, want 1", n)
			}
			return ""
		})
		close(g.open)
		m := slow.recv()
		if m.Type != protocol.TypeAck || m.Ack == nil || m.Ack.Seq != 1 {
			t.Fatalf("after the store let the batch through: %+v, want ack of seq 1", m)
		}
		if n := e.metrics(slowID); n != 1 {
			t.Fatalf("%d metric samples stored, want 1", n)
		}
	})
}

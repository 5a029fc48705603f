package agentlink

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// committedStore answers every heartbeat at once, as if its commit were
// done: what BenchmarkConnHeartbeat measures is the connection's own work
// (the store's is measured in cloud/sqlite and cloud/postgres).
type committedStore struct{ Store }

func (committedStore) Heartbeat(_ context.Context, _ HeartbeatIn, done func(HeartbeatOut, error)) error {
	done(HeartbeatOut{}, nil)
	return nil
}

// BenchmarkConnHeartbeat is a connection's work per decoded heartbeat of 8
// channels, the store's left out: "steady" repeats one heartbeat (the
// common case: nothing changed), "changing" changes one channel's live
// value and the tunnel's peer count every time. Its B/op is the
// connection's share of the relay's allocation per heartbeat.
func BenchmarkConnHeartbeat(b *testing.B) {
	for _, changing := range []bool{false, true} {
		name := "steady"
		if changing {
			name = "changing"
		}
		b.Run(name, func(b *testing.B) {
			s := New(Config{Store: committedStore{}, Logger: slog.New(slog.DiscardHandler)})
			defer s.cancel()
			model, ok := catalog.Lookup("IG-500")
			if !ok {
				b.Fatal("no IG-500 in the catalog")
			}
			c := &conn{srv: s, dev: Device{ID: "dev", OrgID: "org", Model: "IG-500"}, session: "s", remote: "10.0.0.9", log: s.log}
			c.status, c.metricsInterval, c.model = resource.StatusOnline, time.Hour, model
			c.channels, c.lastHBEvent = map[string]protocol.ChannelState{}, time.Now()
			c.hbInterval.Store(int64(30 * time.Second))
			c.storedDeadline = time.Now().Add(time.Hour)
			m := heartbeat8()
			h := m.Heartbeat
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if changing {
					i++
					h.Channels[0].Live = [...]string{"1", "2"}[i%2]
					h.VPN.PeerCount = i % 2
				}
				if err := c.heartbeat(h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

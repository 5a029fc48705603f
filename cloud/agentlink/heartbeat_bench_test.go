package agentlink

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
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
// value and the tunnel's peer count every time. The "points50" cases add 50
// points to rs485-1: "reread" reads them again (only their time changes:
// the channel is stored, no point changed), "changing" changes every
// value (each with a new array of points, as decoded). Its B/op is the connection's share of the relay's allocation per
// heartbeat.
func BenchmarkConnHeartbeat(b *testing.B) {
	for _, tc := range []struct {
		name             string
		points           int
		changing, reread bool
	}{
		{name: "steady"},
		{name: "changing", changing: true},
		{name: "points50/steady", points: 50},
		{name: "points50/reread", points: 50, reread: true},
		{name: "points50/changing", points: 50, changing: true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := New(Config{Store: committedStore{}, Logger: slog.New(slog.DiscardHandler)})
			defer s.cancel()
			model := catalog.Find("IG-500")
			if model == nil {
				b.Fatal("no IG-500 in the catalog")
			}
			c := &conn{srv: s, dev: Device{ID: "dev", OrgID: "org", Model: "IG-500"}, session: "s", remote: "10.0.0.9"}
			c.status, c.metricsInterval, c.model = resource.StatusOnline, time.Hour, model
			c.channels, c.lastHBEvent = channelStates{}, time.Now()
			c.hbInterval.Store(int64(30 * time.Second))
			c.storedDeadline = time.Now().Add(time.Hour)
			m := heartbeat8()
			h := m.Heartbeat
			pd := pointDefs{}
			for k := range tc.points {
				name := fmt.Sprintf("point_%02d", k)
				pd["rs485-1"] = append(pd["rs485-1"], serialcfg.PointDef{ID: "rs485-1." + name, ChannelID: "rs485-1", Name: name, Type: "f32", Unit: "°C"})
				h.Channels[1].Points = append(h.Channels[1].Points, protocol.PointState{Name: name, Value: 20 + float64(k)/8, Quality: "good", At: resource.T(time.Now())})
			}
			c.points.Store(&pd) // as read at the first change
			pts := h.Channels[1].Points
			// Point times are checked against the heartbeat's (at most
			// MaxFutureSkew ahead, never before the clock was set): each
			// reread moves them on a millisecond from an hour ago.
			base := time.Now().Add(-time.Hour)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if tc.changing {
					h.Channels[0].Live = [...]string{"1", "2"}[i%2]
					h.VPN.PeerCount = i % 2
				}
				if tc.reread || (tc.changing && tc.points > 0) {
					// A new array, as the decoder makes for every
					// heartbeat (the connection keeps the last one).
					pts = slices.Clone(pts)
					at := resource.T(base.Add(time.Duration(i) * time.Millisecond))
					for k := range pts {
						pts[k].At = at
						if tc.changing {
							pts[k].Value += 0.125
						}
					}
					h.Channels[1].Points = pts
				}
				if err := c.heartbeat(h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package sqlite_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/sqlitetest"
)

// benchDevices is the number of connected devices in the benchmark.
const benchDevices = 20000

// BenchmarkAgentHeartbeats measures heartbeats stored through the batching
// writer from many concurrent connections.
func BenchmarkAgentHeartbeats(b *testing.B) {
	ctx := context.Background()
	db := sqlitetest.Open(b)
	store, err := sqlite.NewAgentStore(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	org, _ := db.CreateOrg(ctx, "x")
	n := benchDevices
	devs := make([]agentlink.Device, n)
	for i := range devs {
		id := ids.New()
		sum := sha256.Sum256([]byte(id))
		if _, err := db.W.Exec(`INSERT INTO devices (id, org_id, name, serial_number, model, token_hash, created_at) VALUES (?, ?, 'g', ?, 'IG-500', ?, 0)`, id, org.ID, id, sum[:]); err != nil {
			b.Fatal(err)
		}
		devs[i] = agentlink.Device{ID: id, OrgID: org.ID, Model: "IG-500"}
	}
	// Connect every device as the endpoint would, many at once (the writer
	// batches them).
	var setup sync.WaitGroup
	sem := make(chan struct{}, 512)
	for i := range devs {
		setup.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; setup.Done() }()
			id := devs[i].ID
			now := time.Now()
			if _, err := store.Connect(ctx, devs[i], "s"+id, now, now.Add(time.Hour)); err != nil {
				b.Error(err)
				return
			}
			if _, err := store.Hello(ctx, agentlink.HelloIn{Device: devs[i], Session: "s" + id, At: now, HeartbeatInterval: time.Minute}); err != nil {
				b.Error(err)
				return
			}
			var chans []protocol.ChannelState
			for _, c := range []string{"uart-1", "rs485-1", "rs485-2", "canfd-1", "gpio-1", "gpio-2", "gpio-3", "gpio-4"} {
				chans = append(chans, protocol.ChannelState{ID: c, Available: true, Live: "1"})
			}
			if err := heartbeat(ctx, store, agentlink.HeartbeatIn{Device: devs[i], Session: "s" + id, At: now, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline,
				HasChannels: true, Channels: chans, Event: &resource.Event{ID: ids.New(), Type: "heartbeat", Severity: resource.SeverityInfo, CreatedAt: resource.T(now)}}); err != nil {
				b.Error(err)
			}
		}()
	}
	setup.Wait()
	if b.Failed() {
		return
	}
	st0 := store.Stats()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/n + 1
	start := time.Now()
	for i := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < per; k++ {
				now := time.Now()
				var dl time.Time
				if k%3 == 0 {
					dl = now.Add(time.Minute) // the relay refreshes it every third heartbeat
				}
				err := heartbeat(ctx, store, agentlink.HeartbeatIn{Device: devs[i], Session: "s" + devs[i].ID, At: now, Deadline: dl,
					Status: resource.StatusOnline, PrevStatus: resource.StatusOnline, IPAddress: "10.0.0.1", HasChannels: true,
					Channels: []protocol.ChannelState{{ID: "gpio-1", Available: true, Live: fmt.Sprint(k % 2)}}})
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rate := float64(per*n) / time.Since(start).Seconds()
	b.ReportMetric(rate, "heartbeats/s")
	if b.N > 1 {
		b.Logf("store writer alone: %.0f heartbeats stored per second | target >= 20000 (the relay's whole budget)", rate)
	}
	st := store.Stats()
	st.Jobs -= st0.Jobs
	st.Transactions -= st0.Transactions
	st.Busy -= st0.Busy
	st.Commit -= st0.Commit
	b.ReportMetric(float64(st.Jobs)/float64(st.Transactions), "jobs/tx")
	b.ReportMetric(st.Busy.Seconds()/time.Since(start).Seconds(), "writer-busy")
	b.ReportMetric(st.Commit.Seconds()/time.Since(start).Seconds(), "commit-share")
}

// heartbeat stores one heartbeat and waits for its commit.
func heartbeat(ctx context.Context, store *sqlite.AgentStore, in agentlink.HeartbeatIn) error {
	done := make(chan error, 1)
	if err := store.Heartbeat(ctx, in, func(_ agentlink.HeartbeatOut, err error) { done <- err }); err != nil {
		return err
	}
	return <-done
}

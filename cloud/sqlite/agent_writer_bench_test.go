package sqlite

import (
	"crypto/sha256"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// BenchmarkWriterHeartbeatTx measures the writer's own cost per heartbeat:
// transactions of batch heartbeats (each changing one channel) applied
// straight by runTx on 20,000 connected devices that have each sent one
// before, without goroutines handing jobs over. Its ns/op is the writer's time per heartbeat. In the
// points50 cases the changed channel is rs485-1 with 50 points read again.
// Every channel's stored form is encoded beforehand, as the connections do.
func BenchmarkWriterHeartbeatTx(b *testing.B) {
	for _, batch := range []int{200, 2000} {
		b.Run(fmt.Sprint(batch), func(b *testing.B) { benchWriterTx(b, batch, 0) })
		b.Run(fmt.Sprint(batch, "/points50"), func(b *testing.B) { benchWriterTx(b, batch, 50) })
	}
}

func benchWriterTx(b *testing.B, batch, points int) {
	db, s, org := newAgentStore(b)
	const n = 20000
	devs := make([]agentlink.Device, n)
	now := time.Now()
	// Every channel's state, as the connections encode it for the store:
	// eight channels, gpio-1 alternating (or rs485-1's 50 points).
	var pointStates [2][]protocol.PointState
	var reports [2]string
	for v := range reports {
		for k := range points {
			pointStates[v] = append(pointStates[v], protocol.PointState{Name: fmt.Sprintf("point_%02d", k), Value: 20 + float64(k)/8 + float64(v),
				Quality: "good", At: resource.T(now.Add(time.Duration(v) * time.Second))})
		}
		var chans []protocol.ChannelState
		for _, c := range []string{"canfd-1", "gpio-1", "gpio-2", "gpio-3", "gpio-4", "rs485-1", "rs485-2", "uart-1"} {
			chans = append(chans, protocol.ChannelState{ID: c, Available: true, Live: "0"})
		}
		if points > 0 {
			chans[5].Points = pointStates[v]
		} else {
			chans[1].Live = fmt.Sprint(v)
		}
		reports[v] = cloud.EncodeChannelReports(chans)
	}
	tx, err := db.W.Begin()
	if err != nil {
		b.Fatal(err)
	}
	for i := range devs {
		id := ids.New()
		sum := sha256.Sum256([]byte(id))
		if _, err := tx.Exec(`INSERT INTO devices (id, org_id, name, serial_number, model, token_hash, created_at, status, agent_session) VALUES (?, ?, 'g', ?, 'IG-500', ?, 0, 'ONLINE', ?)`, id, org.ID, id, sum[:], "s-"+id); err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(`INSERT INTO serial_state (device_id) VALUES (?)`, id); err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(`UPDATE devices SET channel_reports = ? WHERE id = ?`, reports[0], id); err != nil {
			b.Fatal(err)
		}
		devs[i] = agentlink.Device{ID: id, OrgID: org.ID, Model: "IG-500"}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	jobs := make([]*ingestJob, batch)
	errs := make([]error, batch)
	next, tick := 0, 0
	// runBatch makes the next batch of jobs with the timer stopped (B/op
	// is the writer's own allocation per heartbeat; the CPU figure
	// includes making them) and runs it.
	runBatch := func() {
		b.StopTimer()
		at := now.Add(time.Duration(tick) * time.Millisecond)
		tick += batch
		for k := range jobs {
			d := devs[next%n]
			in := agentlink.HeartbeatIn{Device: d, Session: "s-" + d.ID, At: at, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline,
				IPAddress: "10.0.0.1", HasChannels: true, Reports: reports[(next/n+1)%2]}
			if next%3 == 0 {
				in.Deadline = at.Add(time.Minute)
			}
			jobs[k] = &ingestJob{hb: &hbJob{in: in, serial: true}}
			next++
		}
		b.StartTimer()
		if _, err := s.w.runTx(jobs, errs); err != nil {
			b.Fatal(err)
		}
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	// The steady state: every device has sent a heartbeat before (the
	// writer knows its rowids), as on a relay whose agents are connected.
	for next < n {
		runBatch()
	}
	cpu0 := processCPU()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		runBatch()
	}
	b.StopTimer()
	// CPU time (user + system) rather than wall time: other work sharing
	// the machine stretches the latter.
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/heartbeat")
}

// processCPU returns the CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package storetest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// PointWeek is the point history benchmarks' data set (DESIGN.md
// "Performance targets"): 7 days of a 1 s point, 604,800 samples.
const PointWeek = 7 * 24 * 3600

// SlowValue is the i-th sample of a slowly moving 1 s point: a
// temperature read as a Modbus register in tenths of a degree (the scaled
// integer most field points are), drifting by a degree or two an hour with
// the sensor's last digit flickering now and then.
func SlowValue(i int) float64 {
	t := float64(i)
	raw := math.Round(215 + 15*math.Sin(2*math.Pi*t/3600) + 5*math.Sin(2*math.Pi*t/86400))
	if i%37 == 0 {
		raw++
	}
	return raw * 0.1
}

// PointHistoryBench runs the point history benchmarks on s: it stores
// PointWeek samples of a slowly moving 1 s point through the agent store
// (in PointBatch records of protocol.MaxPointSamples), as agents send them,
// compacts them as the relay does, and reports, as sub-benchmarks:
//
//   - bytes: bytes per sample on disk in chunks ("bytes/sample", from
//     size after compaction) and as one row per sample in the head
//     ("head-bytes/sample", from size before), beside 16 raw;
//   - buckets-7d: the whole week as 1,000 step buckets, p99 ("p99-ms"),
//     p50, and the process's CPU time per query ("cpu-ms/op": on a busy
//     machine the wall time includes waiting for a CPU);
//   - raw-1000: a page of 1,000 raw samples ending anywhere in the week,
//     the same figures;
//   - preview-7d: a threshold rule on the point previewed over the week
//     (Store.Rules().PreviewRule, POST /alert-rules/preview's store call),
//     the same figures and the alerts it finds ("alerts"), checked
//     against the engine's state machine run over the same values.
//
// size returns the bytes the store's point history tables take on disk
// (vacuumed first, so that only live rows count).
func PointHistoryBench(b *testing.B, s Stores, size func() int64) {
	ctx := context.Background()
	org, err := s.Store.CreateOrg(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	d, token := Device(b, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "SN-points", Model: "IG-500"})
	dev := Auth(b, s.Agent, token)
	const point = "rs485-1.boiler_temp"
	end := time.Now().UTC().Truncate(time.Second)
	start := end.Add(-PointWeek * time.Second)
	empty := size()
	loaded := time.Now()
	for i := 0; i < PointWeek; {
		var items []protocol.Record
		for k := 0; k < 16 && i < PointWeek; k++ {
			n := min(protocol.MaxPointSamples, PointWeek-i)
			batch := &protocol.PointBatch{Samples: make([]protocol.PointSample, n)}
			for j := range batch.Samples {
				batch.Samples[j] = protocol.PointSample{Point: point, At: resource.T(start.Add(time.Duration(i+j) * time.Second)), Value: SlowValue(i + j)}
			}
			items = append(items, protocol.Record{Seq: uint64(i + 1), Points: batch})
			i += n
		}
		out, err := s.Agent.Records(ctx, agentlink.RecordsIn{Device: dev, Session: "bench", Items: items})
		if err != nil {
			b.Fatal(err)
		}
		if len(out.Points) == 0 {
			b.Fatalf("a batch stored nothing")
		}
	}
	loadRate := PointWeek / time.Since(loaded).Seconds()
	headBytes := size() - empty
	// The relay's compaction at the end of the week: every sample but the
	// last minute's.
	if _, err := s.PointHistory.CompactPoints(ctx, cloud.DefaultPointCompaction(end)); err != nil {
		b.Fatal(err)
	}
	chunkBytes := size() - empty

	b.Run("bytes", func(b *testing.B) {
		for range b.N {
		}
		b.ReportMetric(float64(chunkBytes)/PointWeek, "bytes/sample")
		b.ReportMetric(float64(headBytes)/PointWeek, "head-bytes/sample")
		b.ReportMetric(16, "raw-bytes/sample")
		b.ReportMetric(loadRate, "load-samples/s")
	})
	pts := s.Store.Points()
	// timed runs op b.N times and reports its p99, p50 and process CPU.
	timed := func(b *testing.B, op func(i int) error) {
		took := make([]time.Duration, 0, b.N)
		cpu0, cpuErr := processCPU()
		b.ResetTimer()
		for i := range b.N {
			t := time.Now()
			err := op(i)
			took = append(took, time.Since(t))
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if cpu1, err := processCPU(); err == nil && cpuErr == nil {
			b.ReportMetric((cpu1-cpu0)*1000/float64(b.N), "cpu-ms/op")
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	}
	query := func(b *testing.B, q func(i int) cloud.PointQuery, check func(cloud.PointSeries) error) {
		timed(b, func(i int) error {
			got, err := pts.PointSamples(ctx, org.ID, d.ID, point, q(i))
			if err == nil {
				err = check(got)
			}
			return err
		})
	}
	b.Run("buckets-7d", func(b *testing.B) {
		step := PointWeek * time.Second / 1000
		query(b, func(int) cloud.PointQuery {
			return cloud.PointQuery{From: start, To: end, Step: step, Limit: 2000}
		}, func(s cloud.PointSeries) error {
			if n := len(s.Buckets); n < 1000 || n > 1001 { // 1,000 steps, aligned to the epoch
				return fmt.Errorf("%d buckets", n)
			}
			total := 0
			for _, k := range s.Buckets {
				total += k.Count
			}
			if total != PointWeek {
				return fmt.Errorf("buckets count %d samples of %d", total, PointWeek)
			}
			return nil
		})
	})
	b.Run("preview-7d", func(b *testing.B) {
		cfg := rs485Config(9600)
		cfg.RS485.Points = []serialcfg.RS485Point{{Name: "boiler_temp", Function: "holding", Register: 0, Type: "i16", Scale: 0.1, Unit: "°C"}}
		if _, err := s.Store.Serial().PutChannel(ctx, org.ID, d.ID, "rs485-1", cfg); err != nil {
			b.Fatal(err)
		}
		rule, want := previewWeekRule(start, end)
		want.DeviceID = d.ID
		timed(b, func(int) error {
			got, err := s.Store.Rules().PreviewRule(ctx, org.ID, rule, start, end)
			if err == nil && (got.Opened != want.Opened || len(got.Devices) != 1 || got.Devices[0] != want) {
				err = fmt.Errorf("preview %+v, want %+v", got, want)
			}
			return err
		})
		b.ReportMetric(float64(want.Opened), "alerts")
	})
	b.Run("raw-1000", func(b *testing.B) {
		query(b, func(i int) cloud.PointQuery {
			to := end.Add(-time.Duration(i*7919%PointWeek) * time.Second)
			return cloud.PointQuery{From: to.Add(-time.Hour), To: to, Limit: 1000}
		}, func(s cloud.PointSeries) error {
			if len(s.Raw) != 1000 && !s.Window.From.Before(start) {
				return fmt.Errorf("%d samples", len(s.Raw))
			}
			return nil
		})
	})
}

// processCPU is the CPU time the process used so far, in seconds (Linux:
// /proc/self/stat).
func processCPU() (float64, error) {
	p, err := procfs.Self()
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}

// PointIngestBench measures the agent store storing point samples as the
// DESIGN.md load sends them: devices agents (2,000 in the benchmark), each
// sending one PointBatch record of 50 samples per round, all at once, for
// b.N rounds. It reports the samples stored per second ("samples/s"): the
// store writer alone, without websockets or decoding (fleet-loadgen
// measures the relay end to end).
func PointIngestBench(b *testing.B, s Stores, devices int) {
	ctx := context.Background()
	org, err := s.Store.CreateOrg(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	devs := make([]agentlink.Device, devices)
	for i := range devs {
		_, token := Device(b, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: fmt.Sprintf("SN-%05d", i), Model: "IG-500"})
		devs[i] = Auth(b, s.Agent, token)
	}
	const points = 50
	start := time.Now().Add(-time.Hour).Truncate(time.Second)
	round := func(d agentlink.Device, r int) error {
		batch := &protocol.PointBatch{Samples: make([]protocol.PointSample, points)}
		at := resource.T(start.Add(time.Duration(r) * time.Second))
		for k := range batch.Samples {
			batch.Samples[k] = protocol.PointSample{Point: fmt.Sprintf("rs485-1.p%02d", k), At: at, Value: SlowValue(r + k)}
		}
		out, err := s.Agent.Records(ctx, agentlink.RecordsIn{Device: d, Session: "bench", Items: []protocol.Record{{Seq: uint64(r + 1), Points: batch}}})
		if err == nil && len(out.Points) != points {
			err = fmt.Errorf("stored %d of %d samples", len(out.Points), points)
		}
		return err
	}
	// A first round makes the series (and warms the caches).
	concurrently(devices, func(i int) {
		if err := round(devs[i], 0); err != nil {
			b.Error(err)
		}
	})
	b.ResetTimer()
	t := time.Now()
	concurrently(devices, func(i int) {
		for r := 1; r <= b.N; r++ {
			if err := round(devs[i], r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(devices*points*b.N)/time.Since(t).Seconds(), "samples/s")
}

// previewWeekRule is the rule preview-7d previews over [start, end] on
// the week of SlowValue samples: over 23.0 for a minute, clear under 22.5
// (the daily swing crosses it a few times a day, the last digit's flicker
// more often), and what it must answer, replayed here through the
// engine's state machine.
func previewWeekRule(start, end time.Time) (resource.AlertRule, resource.RulePreviewDevice) {
	value, clear := 23.0, 22.5
	r := resource.AlertRule{Name: "boiler hot", Enabled: true, Severity: resource.SeverityWarning,
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "point.rs485-1.boiler_temp", Op: ">", Value: &value, Clear: &clear, For: "1m"}}
	th := alert.Threshold{Cond: cloud.RuleCondition{Kind: resource.ConditionThreshold, Op: ">", Value: value, Clear: clear, For: time.Minute}}
	var want resource.RulePreviewDevice
	var openAt time.Time
	for i := range PointWeek {
		at := start.Add(time.Duration(i) * time.Second)
		switch th.Step(at, SlowValue(i)) {
		case alert.Opens:
			want.Opened, openAt = want.Opened+1, at
		case alert.Resolve:
			want.OpenForMs += at.Sub(openAt).Milliseconds()
		}
	}
	if th.Open {
		want.OpenForMs += end.Sub(openAt).Milliseconds()
	}
	return r, want
}

package storetest

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// The point history part of the suite (DESIGN.md "Points"): samples come
// in through the agent store's Records, as agents send them, and are read
// through Store.Points().PointSamples, as the API reads them.

// pointRecord is a PointBatch record of samples.
func pointRecord(samples ...protocol.PointSample) protocol.Record {
	return protocol.Record{Seq: seq.Add(1), Points: &protocol.PointBatch{Samples: samples}}
}

// good and bad are samples of point at t.
func good(point string, t time.Time, v float64) protocol.PointSample {
	return protocol.PointSample{Point: point, At: resource.T(t), Value: v}
}

func bad(point string, t time.Time, cause string) protocol.PointSample {
	return protocol.PointSample{Point: point, At: resource.T(t), Error: cause}
}

// pointSeries reads q of d's point.
func (e *env) pointSeries(d device, point string, q cloud.PointQuery) cloud.PointSeries {
	e.t.Helper()
	s, err := e.Store.Points().PointSamples(e.ctx, d.OrgID, d.ID, point, q)
	if err != nil {
		e.t.Fatalf("samples of %s: %v", point, err)
	}
	return s
}

// rawValues is s's raw samples as "at=value" strings (times as offsets
// from t0).
func rawValues(s cloud.PointSeries) []string {
	out := make([]string, len(s.Raw))
	for i, x := range s.Raw {
		out[i] = fmt.Sprintf("%v=%v", x.At.Sub(t0), x.Value)
	}
	return out
}

// seconds makes a 1 s point's samples: n of them from start, value f(i).
func seconds(point string, start time.Time, n int, f func(i int) float64) []protocol.PointSample {
	out := make([]protocol.PointSample, n)
	for i := range out {
		out[i] = good(point, start.Add(time.Duration(i)*time.Second), f(i))
	}
	return out
}

// storePoints sends samples in PointBatch records of at most
// protocol.MaxPointSamples, several records to a Records call, and
// returns how many the store reports inserted.
func (e *env) storePoints(d device, samples []protocol.PointSample) int {
	e.t.Helper()
	n := 0
	for len(samples) > 0 {
		var items []protocol.Record
		for k := 0; k < 8 && len(samples) > 0; k++ {
			m := min(len(samples), protocol.MaxPointSamples)
			items = append(items, pointRecord(samples[:m]...))
			samples = samples[m:]
		}
		n += len(e.records(d, items...).Points)
	}
	return n
}

// testPointsExactlyOnce: a batch sent again stores nothing new and reports
// nothing; a partial overlap stores only the new samples; the answers are
// the samples sent, once each.
func testPointsExactlyOnce(t *testing.T, open Opener) {
	e := newEnv(t, open)
	d := e.device(e.org("acme").ID, "IG-500")
	const p = "rs485-1.boiler_temp"
	batch := pointRecord(good(p, t0, 21.5), good(p, t0.Add(time.Second), 21.625), bad(p, t0.Add(2*time.Second), "modbus timeout (slave 1)"),
		good("rs485-1.pressure", t0, 1.5))
	batch.Seq = 10
	out := e.records(d, batch, metricRecord(t0, 1))
	if len(out.Points) != 4 || out.LastSeq < 10 {
		t.Fatalf("first send stored %d point samples (last seq %d), want 4", len(out.Points), out.LastSeq)
	}
	if out.Points[2] != batch.Points.Samples[2] {
		t.Errorf("stored %+v, sent %+v", out.Points[2], batch.Points.Samples[2])
	}
	if again := e.records(d, batch); len(again.Points) != 0 {
		t.Errorf("resend stored %d point samples", len(again.Points))
	}
	overlap := pointRecord(good(p, t0.Add(time.Second), 21.625), good(p, t0.Add(3*time.Second), 22))
	if o := e.records(d, overlap); len(o.Points) != 1 || o.Points[0] != overlap.Points.Samples[1] {
		t.Errorf("overlap stored %+v, want the one new sample", o.Points)
	}
	got := rawValues(e.pointSeries(d, p, cloud.PointQuery{From: t0.Add(-time.Minute), To: t0.Add(time.Minute)}))
	want := []string{"0s=21.5", "1s=21.625", "2s=<nil>", "3s=22"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("samples %v, want %v", got, want)
	}
	// The same samples from a second handle (another relay) are resends too.
	if e2 := e.reopen(); e2 != nil {
		if o := e2.records(d, batch); len(o.Points) != 0 {
			t.Errorf("resend through a second handle stored %d point samples", len(o.Points))
		}
	}
	if got := e.pointSeries(d, "rs485-1.pressure", cloud.PointQuery{From: t0, To: t0}); len(got.Raw) != 1 {
		t.Errorf("pressure: %v", rawValues(got))
	}
}

// testPointsRaw: raw samples ascending in [from, to]; more than limit gives
// the newest limit with window.from moved up to the first; bool points
// read as booleans; bad readings as null.
func testPointsRaw(t *testing.T, open Opener) {
	e := newEnv(t, open)
	d := e.device(e.org("acme").ID, "IG-500")
	const p = "rs485-1.flow"
	if n := e.storePoints(d, seconds(p, t0, 3000, func(i int) float64 { return float64(i) / 4 })); n != 3000 {
		t.Fatalf("stored %d of 3000", n)
	}
	checkPointsRaw(t, e, d, p)

	// gpio-1 is an input by default: its level is a bool point.
	lvl := pointRecord(good("gpio-1.level", t0, 1), good("gpio-1.level", t0.Add(time.Second), 0), bad("gpio-1.level", t0.Add(2*time.Second), "gpio read failed"))
	e.records(d, lvl)
	s := e.pointSeries(d, "gpio-1.level", cloud.PointQuery{From: t0, To: t0.Add(time.Hour)})
	if got := fmt.Sprint(rawValues(s)); got != "[0s=true 1s=false 2s=<nil>]" {
		t.Errorf("gpio level %s", got)
	}
	// A configured point without samples yet: no samples, no error.
	if s := e.pointSeries(d, "gpio-2.level", cloud.PointQuery{From: t0, To: t0.Add(time.Hour)}); len(s.Raw) != 0 || s.Raw == nil {
		t.Errorf("gpio-2 level: %#v", s.Raw)
	}
}

// checkPointsRaw checks raw answers over the 3,000 samples testPointsRaw
// stored (value i/4 at t0 + i s).
func checkPointsRaw(t *testing.T, e *env, d device, p string) {
	t.Helper()
	s := e.pointSeries(d, p, cloud.PointQuery{From: t0.Add(10 * time.Second), To: t0.Add(19 * time.Second), Limit: 100})
	if got := fmt.Sprint(rawValues(s)); got != "[10s=2.5 11s=2.75 12s=3 13s=3.25 14s=3.5 15s=3.75 16s=4 17s=4.25 18s=4.5 19s=4.75]" {
		t.Errorf("window [10s, 19s]: %s", got)
	}
	if !s.Window.From.Equal(t0.Add(10*time.Second)) || !s.Window.To.Equal(t0.Add(19*time.Second)) {
		t.Errorf("window %v", s.Window)
	}
	from, to := t0.Add(-time.Hour), t0.Add(time.Hour)
	s = e.pointSeries(d, p, cloud.PointQuery{From: from, To: to, Limit: 1000})
	if len(s.Raw) != 1000 || !s.Raw[0].At.Equal(t0.Add(2000*time.Second)) || !s.Raw[999].At.Equal(t0.Add(2999*time.Second)) {
		t.Fatalf("limit 1000 of 3000: %d samples from %v to %v", len(s.Raw), s.Raw[0].At, s.Raw[len(s.Raw)-1].At)
	}
	if !s.Window.From.Equal(t0.Add(2000*time.Second)) || !s.Window.To.Equal(to) {
		t.Errorf("cut window %v, want from the first returned sample", s.Window)
	}
	for i := 1; i < len(s.Raw); i++ {
		if !s.Raw[i].At.After(s.Raw[i-1].At.Time) {
			t.Fatalf("not ascending at %d", i)
		}
	}
	// The default limit is 1000; a limit above the maximum is the maximum.
	if s := e.pointSeries(d, p, cloud.PointQuery{From: from, To: to}); len(s.Raw) != 1000 {
		t.Errorf("default limit: %d samples", len(s.Raw))
	}
	if s := e.pointSeries(d, p, cloud.PointQuery{From: from, To: to, Limit: 1 << 20}); len(s.Raw) != 3000 || !s.Window.From.Equal(from) {
		t.Errorf("large limit: %d samples, window %v", len(s.Raw), s.Window)
	}
	if s := e.pointSeries(d, p, cloud.PointQuery{From: t0.Add(2990 * time.Second), To: to, Limit: 5}); fmt.Sprint(rawValues(s)) != "[49m55s=748.75 49m56s=749 49m57s=749.25 49m58s=749.5 49m59s=749.75]" {
		t.Errorf("newest 5: %v", rawValues(s))
	}
	if s := e.pointSeries(d, p, cloud.PointQuery{From: t0.Add(-2 * time.Hour), To: t0.Add(-time.Hour)}); len(s.Raw) != 0 {
		t.Errorf("empty window: %v", rawValues(s))
	}
}

// testPointsBuckets: step buckets aligned to multiples of step since the
// epoch, min/max/avg/last/count over the good samples, one per non-empty
// bucket, the newest limit of them.
func testPointsBuckets(t *testing.T, open Opener) {
	e := newEnv(t, open)
	d := e.device(e.org("acme").ID, "IG-500")
	const p = "rs485-1.level"
	e.storePoints(d, levelSamples(p))
	checkPointsBuckets(t, e, d, p)
}

// levelSamples are the samples of testPointsBuckets: from t0 + 5 s one
// every second, value i, every 7th bad; then a gap to t0 + 21 min, where
// a bad reading is alone in its minute.
func levelSamples(p string) []protocol.PointSample {
	var samples []protocol.PointSample
	for i := 0; i < 600; i++ {
		at := t0.Add(time.Duration(5+i) * time.Second)
		if i%7 == 3 {
			samples = append(samples, bad(p, at, "crc error"))
		} else {
			samples = append(samples, good(p, at, float64(i)))
		}
	}
	return append(samples, bad(p, t0.Add(21*time.Minute), "timeout"))
}

// checkPointsBuckets checks the buckets of testPointsBuckets's samples.
func checkPointsBuckets(t *testing.T, e *env, d device, p string) {
	t.Helper()
	want := func(lo, hi int) resource.PointBucket { // good samples lo..hi
		b := resource.PointBucket{Min: math.Inf(1), Max: math.Inf(-1)}
		sum := 0.0
		for i := lo; i <= hi; i++ {
			if i%7 == 3 {
				continue
			}
			v := float64(i)
			b.Min, b.Max, b.Last = min(b.Min, v), max(b.Max, v), v
			b.Count++
			sum += v
		}
		b.Avg = sum / float64(b.Count)
		return b
	}
	s := e.pointSeries(d, p, cloud.PointQuery{From: t0, To: t0.Add(time.Hour), Step: time.Minute, Limit: 1000})
	if len(s.Buckets) != 11 {
		t.Fatalf("%d minute buckets, want 11 (the bad reading alone at 21 min makes none)", len(s.Buckets))
	}
	for k, b := range s.Buckets {
		lo, hi := max(0, 60*k-5), min(599, 60*k+54) // sample i is at 5+i s
		w := want(lo, hi)
		w.At = resource.T(t0.Add(time.Duration(k) * time.Minute))
		if b != w {
			t.Errorf("bucket %d: %+v, want %+v", k, b, w)
		}
	}
	// Buckets align to the epoch, not to from.
	s = e.pointSeries(d, p, cloud.PointQuery{From: t0.Add(90 * time.Second), To: t0.Add(150 * time.Second), Step: time.Minute})
	if len(s.Buckets) != 2 || !s.Buckets[0].At.Equal(t0.Add(time.Minute)) || s.Buckets[0].Count != want(85, 114).Count {
		t.Errorf("buckets of [90s, 150s]: %+v", s.Buckets)
	}
	// The newest limit buckets, window.from at the first.
	s = e.pointSeries(d, p, cloud.PointQuery{From: t0, To: t0.Add(time.Hour), Step: time.Minute, Limit: 3})
	if len(s.Buckets) != 3 || !s.Buckets[0].At.Equal(t0.Add(8*time.Minute)) || !s.Window.From.Equal(t0.Add(8*time.Minute)) {
		t.Errorf("limit 3: %+v, window %v", s.Buckets, s.Window)
	}
	// A step longer than the data: one bucket of everything.
	s = e.pointSeries(d, p, cloud.PointQuery{From: t0, To: t0.Add(time.Hour), Step: 24 * time.Hour})
	if w := want(0, 599); len(s.Buckets) != 1 || s.Buckets[0].Count != w.Count || s.Buckets[0].Last != w.Last || s.Buckets[0].Avg != w.Avg {
		t.Errorf("day bucket: %+v", s.Buckets)
	}
}

// testPointsScope: a device of another organization, an unknown device or
// point, and a model without serial I/O are errors with their codes.
func testPointsScope(t *testing.T, open Opener) {
	e := newEnv(t, open)
	acme, other := e.org("acme"), e.org("other")
	d := e.device(acme.ID, "IG-500")
	e.records(d, pointRecord(good("rs485-1.temp", t0, 20)))
	pts := e.Store.Points()
	q := cloud.PointQuery{From: t0.Add(-time.Hour), To: t0.Add(time.Hour)}
	for _, c := range []struct {
		name, org, dev, point, code string
	}{
		{"other org", other.ID, d.ID, "rs485-1.temp", cloud.ENOTFOUND},
		{"unknown device", acme.ID, "nope", "rs485-1.temp", cloud.ENOTFOUND},
		{"unknown point", acme.ID, d.ID, "rs485-1.nope", cloud.ENOTFOUND},
		{"unknown channel", acme.ID, d.ID, "rs485-9.temp", cloud.ENOTFOUND},
		{"not a point id", acme.ID, d.ID, "temp", cloud.ENOTFOUND},
		{"uart has no points", acme.ID, d.ID, "uart-1.level", cloud.ENOTFOUND},
		{"model without serial io", acme.ID, e.device(acme.ID, "IG-100").ID, "rs485-1.temp", cloud.ECAPABILITY},
	} {
		_, err := pts.PointSamples(e.ctx, c.org, c.dev, c.point, q)
		if got := cloud.ErrorCode(err); got != c.code {
			t.Errorf("%s: %v (%s), want %s", c.name, err, got, c.code)
		}
	}
	if _, err := pts.PointSamples(e.ctx, acme.ID, d.ID, "rs485-1.temp", cloud.PointQuery{From: t0, To: t0.Add(-time.Second)}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("from after to: %v", err)
	}
	// The other organization's device with the same point sees only its own.
	d2 := e.device(other.ID, "IG-500")
	e.records(d2, pointRecord(good("rs485-1.temp", t0, 99)))
	if s := e.pointSeries(d, "rs485-1.temp", q); fmt.Sprint(rawValues(s)) != "[0s=20]" {
		t.Errorf("acme's device: %v", rawValues(s))
	}
	if s := e.pointSeries(d2, "rs485-1.temp", q); fmt.Sprint(rawValues(s)) != "[0s=99]" {
		t.Errorf("other's device: %v", rawValues(s))
	}
}

// compactAll folds every head sample captured before before.
func (e *env) compactAll(before time.Time) int64 {
	e.t.Helper()
	n, err := e.PointHistory.CompactPoints(e.ctx, cloud.PointCompaction{Before: before})
	if err != nil {
		e.t.Fatalf("compact: %v", err)
	}
	return n
}

// testPointsCompaction: folding the head into chunks changes no answer,
// whether a point's samples are all in chunks, all in the head or some in
// each; a sample resent after its compaction is not stored again; a
// series whose oldest sample has not waited long enough is left alone.
func testPointsCompaction(t *testing.T, open Opener) {
	e := newEnv(t, open)
	d := e.device(e.org("acme").ID, "IG-500")
	const raw, buckets = "rs485-1.flow", "rs485-1.level"
	flow := seconds(raw, t0, 3000, func(i int) float64 { return float64(i) / 4 })
	e.storePoints(d, flow)
	e.storePoints(d, levelSamples(buckets))
	check := func(when string) {
		t.Helper()
		t.Run(when, func(t *testing.T) {
			checkPointsRaw(t, e, d, raw)
			checkPointsBuckets(t, e, d, buckets)
		})
	}
	check("head only")

	// Waited too little: nothing folds.
	if n, err := e.PointHistory.CompactPoints(e.ctx, cloud.PointCompaction{Before: t0.Add(time.Hour), Wait: 2 * time.Hour}); n != 0 || err != nil {
		t.Errorf("compaction of series younger than the wait folded %d (%v)", n, err)
	}
	// Half of flow in chunks, half in the head.
	if n := e.compactAll(t0.Add(1500 * time.Second)); n != 1500+601 {
		t.Errorf("first compaction folded %d samples, want %d", n, 1500+601)
	}
	check("chunks and head")
	// Resends of compacted samples store nothing; new samples go on.
	if n := e.storePoints(d, flow[:2000]); n != 0 {
		t.Errorf("resend after compaction stored %d samples", n)
	}
	check("after resends")
	if n := e.compactAll(t0.Add(24 * time.Hour)); n != 1500 {
		t.Errorf("second compaction folded %d samples, want 1500", n)
	}
	check("chunks only")
	if n := e.compactAll(t0.Add(48 * time.Hour)); n != 0 {
		t.Errorf("third compaction folded %d", n)
	}
	// More samples after the chunks: the newest chunk takes them.
	more := seconds(raw, t0.Add(3000*time.Second), 10, func(i int) float64 { return 1000 + float64(i) })
	if n := e.storePoints(d, more); n != 10 {
		t.Fatalf("stored %d of 10 new samples", n)
	}
	e.compactAll(t0.Add(48 * time.Hour))
	s := e.pointSeries(d, raw, cloud.PointQuery{From: t0, To: t0.Add(time.Hour), Limit: 10000})
	if len(s.Raw) != 3010 || s.Raw[3009].Value != 1009.0 || s.Raw[2999].Value != 749.75 {
		t.Errorf("after appending: %d samples, last %v", len(s.Raw), s.Raw[len(s.Raw)-1])
	}
	// The exactly-once test's answers, bad reading included, survive too.
	const p = "rs485-1.boiler_temp"
	e.records(d, pointRecord(good(p, t0, 21.5), good(p, t0.Add(time.Second), 21.625), bad(p, t0.Add(2*time.Second), "modbus timeout (slave 1)")))
	e.compactAll(t0.Add(48 * time.Hour))
	if got := fmt.Sprint(rawValues(e.pointSeries(d, p, cloud.PointQuery{From: t0, To: t0.Add(time.Minute)}))); got != "[0s=21.5 1s=21.625 2s=<nil>]" {
		t.Errorf("compacted boiler_temp %s", got)
	}
}

// testPointsRetention: a sweep deletes every sample older than the
// retention, in chunks (whole or trimmed) and in the head, and nothing
// younger; a second sweep finds nothing.
func testPointsRetention(t *testing.T, open Opener) {
	e := newEnv(t, open)
	now := time.Date(2026, 6, 1, 13, 7, 30, 0, time.UTC)
	e.clock.Set(now)
	d := e.device(e.org("acme").ID, "IG-500")
	keep := 30 * 24 * time.Hour
	cut := now.Add(-keep)
	const p, late = "rs485-1.temp", "rs485-2.temp"
	// A sample a minute over 40 days, all but the last two days compacted
	// (chunks of 6 hours: one straddles the cut).
	start := now.Add(-40*24*time.Hour + 17*time.Minute) // chunks start 17 minutes after the cut's 6 h multiples
	var samples []protocol.PointSample
	for at := start; !at.After(now); at = at.Add(time.Minute) {
		samples = append(samples, good(p, at, float64(at.Unix()%1000)))
	}
	e.storePoints(d, samples)
	e.compactAll(now.Add(-48 * time.Hour))
	// A spool arriving late: head samples older than the cut, and younger.
	e.storePoints(d, []protocol.PointSample{good(late, cut.Add(-time.Hour), 1), good(late, cut.Add(time.Hour), 2)})
	older := 0
	for _, x := range samples {
		if x.At.Before(cut) {
			older++
		}
	}
	n, err := e.PointHistory.SweepPoints(e.ctx, keep)
	if err != nil || n != int64(older+1) {
		t.Errorf("sweep deleted %d (%v), want %d", n, err, older+1)
	}
	q := func(point string, from, to time.Time) []resource.PointSample {
		return e.pointSeries(d, point, cloud.PointQuery{From: from, To: to, Limit: 10000}).Raw
	}
	if got := q(p, start, cut.Add(-time.Millisecond)); len(got) != 0 {
		t.Errorf("%d samples older than the retention survived (oldest %v)", len(got), got[0].At)
	}
	kept := 0
	for from := cut; from.Before(now.Add(time.Minute)); from = from.Add(5 * 24 * time.Hour) {
		kept += len(q(p, from, from.Add(5*24*time.Hour-time.Millisecond)))
	}
	if kept != len(samples)-older {
		t.Errorf("%d samples kept, want %d", kept, len(samples)-older)
	}
	if got := q(late, start, now); len(got) != 1 || got[0].Value != 2.0 {
		t.Errorf("late series kept %v", got)
	}
	if n, err := e.PointHistory.SweepPoints(e.ctx, keep); n != 0 || err != nil {
		t.Errorf("second sweep deleted %d (%v)", n, err)
	}
	if _, err := e.PointHistory.SweepPoints(e.ctx, 0); err == nil {
		t.Error("a point retention of 0 is accepted")
	}
}

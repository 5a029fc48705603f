package api

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// tricky floats: both sides of encoding/json's switch to exponent form,
// negative zero, the extremes.
var trickyFloats = []float64{0, math.Copysign(0, -1), 1, -1, 21.5, 0.1, 1e-6, 9.99e-7, 1e-7, -1e-7, 1.5e-9, 1e20, 1e21, 123456789012345678901234.0,
	math.MaxFloat64, math.SmallestNonzeroFloat64, -math.MaxFloat64, 65535, 4294967295, float64(math.MaxInt64), 1.0 / 3}

func TestPointEncodingMatchesEncodingJSON(t *testing.T) {
	at := resource.T(time.Date(2026, 1, 2, 15, 4, 5, 123456789, time.UTC))
	win := resource.Window{From: resource.T(at.Add(-time.Hour)), To: at}
	raw := resource.PointSamples{Data: []resource.PointSample{{At: at, Value: nil}, {At: at, Value: true}, {At: at, Value: false}}, Window: win}
	buckets := resource.PointBuckets{Data: []resource.PointBucket{}, Window: win}
	for _, f := range trickyFloats {
		raw.Data = append(raw.Data, resource.PointSample{At: at, Value: f})
		buckets.Data = append(buckets.Data, resource.PointBucket{At: at, Min: f, Max: -f, Avg: f / 3, Last: f, Count: 7})
	}
	// Times across days, before 1970, at the ends of the range.
	for _, t := range []time.Time{resource.MinTime, resource.MinTime.Add(999 * time.Millisecond), time.Date(1969, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1970, 1, 1, 0, 0, 0, 1e6, time.UTC), time.Date(2024, 2, 29, 23, 59, 59, 999e6, time.UTC),
		time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(1900, 6, 15, 12, 34, 56, 789e6, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(2026, 1, 2, 15, 4, 5, 0, time.FixedZone("x", -7*3600))} {
		raw.Data = append(raw.Data, resource.PointSample{At: resource.T(t), Value: 1.0})
	}
	got, err := appendPointSamples(nil, raw.Data, &raw.Window)
	if err != nil {
		t.Fatal(err)
	}
	if want := stdEncode(t, raw); !bytes.Equal(got, want) {
		t.Errorf("raw samples:\n got %s\nwant %s", got, want)
	}
	if got, want := appendPointBuckets(nil, buckets.Data, &buckets.Window), stdEncode(t, buckets); !bytes.Equal(got, want) {
		t.Errorf("buckets:\n got %s\nwant %s", got, want)
	}
	empty := resource.PointSamples{Data: []resource.PointSample{}, Window: win}
	if got, _ := appendPointSamples(nil, nil, &win); !bytes.Equal(got, stdEncode(t, empty)) {
		t.Errorf("empty: %s", got)
	}
	// A value JSON cannot carry is null, never a broken body.
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got := appendFloat(nil, f); string(got) != "null" {
			t.Errorf("appendFloat(%v) = %s", f, got)
		}
	}
	// A type the stores do not make still encodes as JSON.
	if got, err := appendPointValue(nil, 42); err != nil || string(got) != "42" {
		t.Errorf("int value: %s %v", got, err)
	}
}

func TestPointCSV(t *testing.T) {
	at := resource.T(time.Date(2026, 1, 2, 15, 4, 5, 7e6, time.UTC))
	series := cloud.PointSeries{
		Raw:     []resource.PointSample{{At: at, Value: 21.5}, {At: at, Value: nil}, {At: at, Value: true}, {At: at, Value: 1e-7}},
		Buckets: []resource.PointBucket{{At: at, Min: 1, Max: 3.25, Avg: 2, Last: 3, Count: 4}, {At: at, Min: math.NaN()}},
	}
	got, err := appendPointCSV(nil, false, &series)
	if err != nil {
		t.Fatal(err)
	}
	want := "at,value\n2026-01-02T15:04:05.007Z,21.5\n2026-01-02T15:04:05.007Z,\n2026-01-02T15:04:05.007Z,true\n2026-01-02T15:04:05.007Z,1e-7\n"
	if string(got) != want {
		t.Errorf("raw CSV:\n got %q\nwant %q", got, want)
	}
	got, err = appendPointCSV([]byte("keep:"), true, &series)
	if err != nil {
		t.Fatal(err)
	}
	want = "keep:at,min,max,avg,last,count\n2026-01-02T15:04:05.007Z,1,3.25,2,3,4\n2026-01-02T15:04:05.007Z,,0,0,0,0\n"
	if string(got) != want {
		t.Errorf("bucket CSV:\n got %q\nwant %q", got, want)
	}
	// What a CSV reader makes of it: a header and one record per row.
	recs, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(string(got), "keep:"))).ReadAll()
	if err != nil || len(recs) != 3 || len(recs[0]) != 6 {
		t.Errorf("read back: %v %v", recs, err)
	}
}

func TestParseStep(t *testing.T) {
	ok := map[string]time.Duration{"1s": time.Second, "30s": 30 * time.Second, "5m": 5 * time.Minute, "1h": time.Hour, "1h30m": 90 * time.Minute,
		"1d": 24 * time.Hour, "24h": 24 * time.Hour, "1500ms": 0, "86400s": 24 * time.Hour}
	for s, want := range ok {
		got, err := parseStep(s)
		if want == 0 {
			if err == nil {
				t.Errorf("%q: accepted as %v, want refused (not whole seconds)", s, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0s", "0", "500ms", "2d", "0d", "-1d", "+1d", "d", "1.5d", "25h", "1h0m1s1ms", "-5m", "1 h", "1y", "1e3s", "1D"} {
		if got, err := parseStep(s); err == nil {
			t.Errorf("%q accepted as %v", s, got)
		}
	}
}

func TestPointParams(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		query string
		from  time.Time
		to    time.Time
		limit int
		step  time.Duration
		err   string // a prefix of the message
	}{
		{"", now.Add(-time.Hour), now, 1000, 0, ""},
		{"limit=10000&step=5m", now.Add(-time.Hour), now, 10000, 5 * time.Minute, ""},
		{"from=2026-04-01T00:00:00Z&to=2026-04-02T00:00:00.000Z&step=1d", time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC), 1000, 24 * time.Hour, ""},
		{"to=2026-04-02T00:00:00Z", time.Date(2026, 4, 1, 23, 0, 0, 0, time.UTC), time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC), 1000, 0, ""},
		{"from=2026-05-01T13:00:00Z", time.Time{}, time.Time{}, 0, 0, "from: must not be after to"},
		{"from=yesterday", time.Time{}, time.Time{}, 0, 0, "from: must be an RFC 3339 timestamp"},
		{"to=2026-13-01T00:00:00Z", time.Time{}, time.Time{}, 0, 0, "to: must be an RFC 3339 timestamp"},
		{"limit=0", time.Time{}, time.Time{}, 0, 0, "limit: must be an integer between 1 and 10000"},
		{"limit=10001", time.Time{}, time.Time{}, 0, 0, "limit: must be an integer between 1 and 10000"},
		{"step=500ms", time.Time{}, time.Time{}, 0, 0, "step: must be a duration from 1s to 1d"},
		{"step=2d", time.Time{}, time.Time{}, 0, 0, "step: must be a duration from 1s to 1d"},
		{"step=", time.Time{}, time.Time{}, 0, 0, "step: must be a duration from 1s to 1d"},
		{"step=1m&step=5m", time.Time{}, time.Time{}, 0, 0, "step: must be given at most once"},
		{"bucket=5m", time.Time{}, time.Time{}, 0, 0, `"bucket": unknown query parameter`},
	}
	for _, c := range cases {
		p := params{r: httptest.NewRequest("GET", "/x?"+c.query, nil)}
		p.query("from", "to", "limit", "step")
		from, to := p.metricsWindow(now)
		limit := p.limit(pointSamplesDefault, pointSamplesMax)
		step := p.step()
		if c.err != "" {
			if p.err == nil || cloud.ErrorCode(p.err) != cloud.EINVALID || !strings.HasPrefix(cloud.ErrorMessage(p.err), c.err) {
				t.Errorf("%q: error %v, want validation_error %q...", c.query, p.err, c.err)
			}
			continue
		}
		if p.err != nil || !from.Equal(c.from) || !to.Equal(c.to) || limit != c.limit || step != c.step {
			t.Errorf("%q: %v %v %d %v %v", c.query, from, to, limit, step, p.err)
		}
	}
}

func TestValidPointID(t *testing.T) {
	for id, want := range map[string]bool{
		"rs485-1.boiler_temp": true, "gpio-1.level": true, "canfd-1.rpm2": true, "a.b": true,
		"rs485-1": false, ".x": false, "rs485-1.": false, "rs485-1.Boiler": false, "rs485-1.1x": false, "rs485-1.a-b": false,
		"rs485-1." + strings.Repeat("a", 33): false, strings.Repeat("c", 33) + ".x": false, "": false,
	} {
		if got := validPointID(id); got != want {
			t.Errorf("validPointID(%q) = %v", id, got)
		}
	}
}

func TestWantsCSV(t *testing.T) {
	for accept, want := range map[string]bool{
		"": false, "*/*": false, "application/json": false, "text/csv": true, "text/csv; charset=utf-8": true,
		"text/csv;q=0": false, "application/json, text/csv": false, "text/csv, application/json": true,
		"application/json;q=0.5, text/csv": true, "text/csv;q=0.2, application/json;q=0.9": false, "text/html, */*;q=0.8": false,
		"garbage;;;, text/csv": true, "TEXT/CSV": true,
	} {
		var h []string
		if accept != "" {
			h = []string{accept}
		}
		if got := wantsCSV(h); got != want {
			t.Errorf("wantsCSV(%q) = %v", accept, got)
		}
	}
}

// BenchmarkPointSamplesEncode is the cost of encoding a raw page of 1,000
// samples (the samples route's default limit): by hand into a reused
// buffer, as the handler does, against encoding/json.
func BenchmarkPointSamplesEncode(b *testing.B) {
	start := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	page := resource.PointSamples{Data: make([]resource.PointSample, 1000)}
	for i := range page.Data {
		page.Data[i] = resource.PointSample{At: resource.T(start.Add(time.Duration(i) * time.Second)), Value: 20 + float64(i%97)*0.125}
	}
	page.Window = resource.Window{From: page.Data[0].At, To: page.Data[999].At}
	b.Run("hand", func(b *testing.B) {
		buf := make([]byte, 0, 64<<10)
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, err = appendPointSamples(buf[:0], page.Data, &page.Window); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encoding-json", func(b *testing.B) {
		var buf bytes.Buffer
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(page); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(buf.Len()))
	})
	b.Run("csv", func(b *testing.B) {
		series := cloud.PointSeries{Raw: page.Data, Window: page.Window}
		buf := make([]byte, 0, 64<<10)
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, err = appendPointCSV(buf[:0], false, &series); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(buf)))
	})
}

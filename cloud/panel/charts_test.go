package panel_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
)

// chartSamples are samples of one device every step over the span before
// end, newest last; noSensor lists tempCpu as missing in each.
func chartSamples(end time.Time, span, step time.Duration, noSensor bool) []resource.MetricSample {
	var out []resource.MetricSample
	for at := end.Add(-span); !at.After(end); at = at.Add(step) {
		m := resource.MetricSample{CapturedAt: resource.T(at), CPUPct: 12.5, MemPct: 40, DiskUsedPct: 60, TempCPU: 51, LoadAvg1: 0.7}
		if noSensor {
			m.TempCPU, m.Missing = 0, []string{"tempCpu"}
		}
		out = append(out, m)
	}
	return out
}

// newDevice adds an IG-100 of the harness's organization with samples.
func (h *harness) newDevice(name string, samples []resource.MetricSample) string {
	h.t.Helper()
	d, tok := must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.org.ID, Name: name, SerialNumber: "SN-" + name, Model: "IG-100"}))
	if len(samples) > 0 {
		storetest.Metrics(h.t, h.s.Agent, h.agent(tok), samples...)
	}
	return d.ID
}

func activeRange(body string) string {
	i := strings.Index(body, `aria-current="true">`)
	if i < 0 {
		return ""
	}
	rest := body[i+len(`aria-current="true">`):]
	return rest[:strings.Index(rest, "<")]
}

// TestChartDefaultRange: without a range in the URL the device page opens
// on the smallest range that holds the device's first sample: 1h for a new
// device (none yet, or all of the last 20 minutes), 24h for 12 hours of
// samples, 7d for 3 days; a range in the URL is kept. A device without
// samples says so in each chart instead of an empty frame.
func TestChartDefaultRange(t *testing.T) { stores.Run(t, testChartDefaultRange) }

func testChartDefaultRange(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	now := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	devs := []struct {
		name, want string
		samples    []resource.MetricSample
		count      string
	}{
		{"new", "1h", nil, "No samples in the last 1h."},
		{"twenty-minutes", "1h", chartSamples(now, 20*time.Minute, time.Minute, false), "21 samples in the last 1h."},
		{"half-a-day", "24h", chartSamples(now, 12*time.Hour, 10*time.Minute, false), "73 samples in the last 24h."},
		{"three-days", "7d", chartSamples(now, 72*time.Hour, 10*time.Minute, false), "433 samples in the last 7d."},
	}
	c := h.signIn(cloud.RoleViewer)
	for _, d := range devs {
		id := h.newDevice(d.name, d.samples)
		body := c.get("/panel/devices/" + id).body
		if got := activeRange(body); got != d.want {
			t.Errorf("%s: opens on %q, want %q", d.name, got, d.want)
		}
		if !strings.Contains(body, d.count) {
			t.Errorf("%s: the page does not say %q", d.name, d.count)
		}
		if n := strings.Count(body, "No samples yet"); (d.samples == nil) != (n == 5) || d.samples != nil && n != 0 {
			t.Errorf("%s: %d charts say No samples yet", d.name, n)
		}
		if !strings.Contains(body, `CPU (%), last `+strings.Replace(strings.Replace(d.want, "h", " h", 1), "d", " d", 1)+`</figcaption>`) {
			t.Errorf("%s: the CPU chart's caption does not name the range", d.name)
		}
		// An explicit range is kept, whatever the data.
		if got := activeRange(c.get("/panel/devices/" + id + "?range=7d").body); got != "7d" {
			t.Errorf("%s ?range=7d: opens on %q", d.name, got)
		}
		if got := activeRange(c.get("/panel/devices/" + id + "?range=1h").body); got != "1h" {
			t.Errorf("%s ?range=1h: opens on %q", d.name, got)
		}
	}
}

// num writes a chart time as panel.js sends it: Unix seconds, a fraction
// only when there is one.
func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

type chartData struct {
	From, To int64
	Metrics  struct {
		T       []float64  `json:"t"`
		CPUPct  []*float64 `json:"cpuPct"`
		TempCPU []*float64 `json:"tempCpu"`
	}
}

func (c *client) chartData(t *testing.T, path string) chartData {
	t.Helper()
	r := c.get(path)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s: %d %q %s", path, r.status, r.header.Get("Content-Type"), r.body)
	}
	var d chartData
	if err := json.Unmarshal([]byte(r.body), &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// TestChartDataSince: the chart data route answers the samples of the
// range newer than since (the chart's last sample), so a live chart
// fetches only what it lacks; since older than the range, or none or
// nonsense, answers the whole range, never more; another organization's
// device is not found.
func TestChartDataSince(t *testing.T) { stores.Run(t, testChartDataSince) }

func testChartDataSince(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	now := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	id := h.newDevice("live", chartSamples(now, 2*time.Hour, time.Minute, false)) // 121 samples, 60 of them in the last hour
	c := h.signIn(cloud.RoleViewer)
	base := "/panel/devices/" + id + "/metrics.json?range=1h"
	all := c.chartData(t, base)
	if n := len(all.Metrics.T); n < 59 || n > 61 || len(all.Metrics.CPUPct) != n {
		t.Fatalf("the last hour: %d samples", n)
	}
	if all.To-all.From != 3600 || all.To < now.Unix() {
		t.Errorf("window %d..%d", all.From, all.To)
	}
	last := all.Metrics.T[len(all.Metrics.T)-1]
	if last != float64(now.Unix()) {
		t.Errorf("last sample at %v, want %v", last, now.Unix())
	}
	for since, want := range map[string]int{
		num(last):                                0,
		num(all.Metrics.T[len(all.Metrics.T)-4]): 3,
		num(last - 0.5):                          1,
		"1":                                      len(all.Metrics.T), // bounded by the range
		"yesterday":                              len(all.Metrics.T),
		"NaN":                                    len(all.Metrics.T),
	} {
		if got := c.chartData(t, base+"&since="+since); len(got.Metrics.T) != want {
			t.Errorf("since %s: %d samples, want %d", since, len(got.Metrics.T), want)
		}
	}
	if got := c.chartData(t, "/panel/devices/"+id+"/metrics.json?range=24h"); len(got.Metrics.T) != 121 {
		t.Errorf("the last 24h: %d samples, want 121", len(got.Metrics.T))
	}
	if r := c.get("/panel/devices/" + h.foreign.ID + "/metrics.json"); r.status != http.StatusNotFound {
		t.Errorf("another organization's device: %d", r.status)
	}
	if r := h.anon().get(base); r.status == http.StatusOK {
		t.Errorf("signed out: %d", r.status)
	}
}

// TestChartNoSensor: a device whose host has no thermal sensor (its agent
// lists tempCpu as missing) shows "No sensor" for the CPU temperature, not
// a line at 0 °C, and its chart data has no temperature values; its other
// charts draw. A device with a sensor has a temperature chart.
func TestChartNoSensor(t *testing.T) { stores.Run(t, testChartNoSensor) }

func testChartNoSensor(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	now := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	vm := h.newDevice("vm", chartSamples(now, 30*time.Minute, time.Minute, true))
	box := h.newDevice("box", chartSamples(now, 30*time.Minute, time.Minute, false))
	c := h.signIn(cloud.RoleViewer)
	body := c.get("/panel/devices/" + vm).body
	if !strings.Contains(body, `<figure class="chart" data-series="tempCpu" data-no-sensor="true">`) ||
		strings.Count(body, `<p class="empty chart-empty">No sensor</p>`) != 1 {
		t.Errorf("no-sensor device: the temperature chart does not say No sensor")
	}
	d := c.chartData(t, "/panel/devices/"+vm+"/metrics.json?range=1h")
	if len(d.Metrics.TempCPU) != 31 || len(d.Metrics.CPUPct) != 31 {
		t.Fatalf("no-sensor chart data: %d temperatures, %d cpu", len(d.Metrics.TempCPU), len(d.Metrics.CPUPct))
	}
	for i := range d.Metrics.TempCPU {
		if d.Metrics.TempCPU[i] != nil || d.Metrics.CPUPct[i] == nil || *d.Metrics.CPUPct[i] != 12.5 {
			t.Fatalf("sample %d: tempCpu %v, cpuPct %v; want no temperature and a cpu value", i, d.Metrics.TempCPU[i], d.Metrics.CPUPct[i])
		}
	}
	body = c.get("/panel/devices/" + box).body
	if strings.Contains(body, "No sensor") || strings.Contains(body, `data-no-sensor`) {
		t.Errorf("a device with a sensor says No sensor")
	}
	if d := c.chartData(t, "/panel/devices/"+box+"/metrics.json?range=1h"); len(d.Metrics.TempCPU) != 31 || d.Metrics.TempCPU[0] == nil || *d.Metrics.TempCPU[0] != 51 {
		t.Errorf("a device with a sensor: temperatures %v", d.Metrics.TempCPU)
	}
}

// TestPointChartDefaultRangeAndSince: a point's chart opens on the
// smallest range that holds its first sample (1h for 20 minutes of
// samples), a range in the URL is kept, and its chart data route answers
// the buckets from the one holding since on (the last may have grown).
func TestPointChartDefaultRangeAndSince(t *testing.T) {
	stores.Run(t, testPointChartDefaultRangeAndSince)
}

func testPointChartDefaultRangeAndSince(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	end := time.Now().Add(-time.Minute).Truncate(time.Minute)
	h.seedPoint(end, 20*time.Minute) // one sample every 10 s: 241 samples in 5 s buckets
	c := h.signIn(cloud.RoleViewer)
	page := "/panel/devices/" + h.device.ID + "/points/" + testPoint
	if got := activeRange(c.get(page).body); got != "1 h" {
		t.Errorf("a point with 20 minutes of samples opens on %q, want 1 h", got)
	}
	if got := activeRange(c.get(page + "?range=7d").body); got != "7 d" {
		t.Errorf("?range=7d opens on %q", got)
	}
	var all struct {
		From, To int64
		Chart    struct {
			T   []int64    `json:"t"`
			Avg []*float64 `json:"avg"`
		}
	}
	get := func(q string) {
		t.Helper()
		r := c.get(page + "/chart.json?range=1h" + q)
		if r.status != http.StatusOK {
			t.Fatalf("chart.json%s: %d", q, r.status)
		}
		if err := json.Unmarshal([]byte(r.body), &all); err != nil {
			t.Fatal(err)
		}
	}
	get("")
	if n := len(all.Chart.T); n != 241 || all.To-all.From != 3600 {
		t.Fatalf("the last hour: %d buckets (t and gaps), window %d..%d", n, all.From, all.To)
	}
	last := all.Chart.T[len(all.Chart.T)-1]
	if last != end.Unix() {
		t.Errorf("last bucket at %d, want %d", last, end.Unix())
	}
	get(fmt.Sprintf("&since=%d", last))
	if len(all.Chart.T) != 1 || all.Chart.T[0] != last {
		t.Errorf("since the last bucket: %v, want that bucket alone", all.Chart.T)
	}
	get(fmt.Sprintf("&since=%d", last-60))
	// 7 buckets of one sample each (one every 10 s), the 6 empty 5 s
	// buckets between them as gaps.
	if len(all.Chart.T) != 13 || all.Chart.T[0] != last-60 || all.Chart.T[len(all.Chart.T)-1] != last {
		t.Errorf("since a minute before the last: %v", all.Chart.T)
	}
}

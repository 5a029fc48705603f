package panel_test

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// seedPoint stores samples of testPoint as its agent sends them: one value
// every 10 s over the last span, ending at end (a sawtooth from 20 to 29),
// in records of at most protocol.MaxPointSamples.
func (h *harness) seedPoint(end time.Time, span time.Duration) int {
	h.t.Helper()
	dev := h.agent(h.token)
	var items []protocol.Record
	var batch []protocol.PointSample
	n := 0
	for at := end.Add(-span); !at.After(end); at = at.Add(10 * time.Second) {
		batch = append(batch, protocol.PointSample{Point: testPoint, At: resource.T(at), Value: 20 + float64(n%10)})
		n++
		if len(batch) == protocol.MaxPointSamples {
			items = append(items, protocol.Record{Seq: uint64(len(items) + 1), Points: &protocol.PointBatch{Samples: batch}})
			batch = nil
		}
	}
	if len(batch) > 0 {
		items = append(items, protocol.Record{Seq: uint64(len(items) + 1), Points: &protocol.PointBatch{Samples: batch}})
	}
	if _, err := h.s.Agent.Records(h.ctx, cloud.RecordsIn{Device: dev, Session: "seed", Items: items}); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// TestPointsList: the device page lists each point with its value and
// unit, quality and age, as text; the list alone is the fragment htmx
// polls; a device without points says how to configure them.
func TestPointsList(t *testing.T) { stores.Run(t, testPointsList) }

func testPointsList(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleViewer)
	page := "/panel/devices/" + h.device.ID
	row := regexp.MustCompile(`(?s)<tr data-point-id="rs485-1.boiler_temp">.*?</tr>`)

	body := c.get(page).body
	if r := row.FindString(body); !strings.Contains(r, `href="/panel/devices/`+h.device.ID+`/points/rs485-1.boiler_temp"`) || !strings.Contains(r, "never") {
		t.Errorf("before any reading the row is %q", r)
	}
	if !strings.Contains(body, `hx-get="/panel/devices/`+h.device.ID+`/points" hx-trigger="live:device from:body"`) {
		t.Error("the points list does not refresh itself")
	}

	now := time.Now()
	storetest.Channels(t, h.s.Agent, h.agent(h.token), now, protocol.ChannelState{ID: "rs485-1", Available: true,
		Points: []protocol.PointState{{Name: "boiler_temp", Value: 21.299999237060547, Quality: "good", At: resource.T(now.Add(-3 * time.Second))}}})
	frag := c.get(page + "/points")
	r := row.FindString(frag.body)
	if frag.status != http.StatusOK || strings.Contains(frag.body, "<html") {
		t.Fatalf("points fragment: %d", frag.status)
	}
	for _, want := range []string{`<span class="value">21.3</span> <span class="unit">°C</span>`, `<span class="quality q-good">good</span>`} {
		if !strings.Contains(r, want) {
			t.Errorf("the row lacks %s: %s", want, r)
		}
	}
	if !regexp.MustCompile(`>([3-9]|1[0-9]) s ago</time>`).MatchString(r) {
		t.Errorf("the row's age: %s", r)
	}

	// A failed read: quality bad, with the agent's cause as text.
	storetest.Channels(t, h.s.Agent, h.agent(h.token), now, protocol.ChannelState{ID: "rs485-1", Available: true,
		Points: []protocol.PointState{{Name: "boiler_temp", Quality: "bad", Error: `<img src=x onerror=alert(1)> exception 2`, At: resource.T(now)}}})
	r = row.FindString(c.get(page + "/points").body)
	if !strings.Contains(r, `<span class="quality q-bad">bad</span> <span class="err">&lt;img src=x onerror=alert(1)&gt; exception 2</span>`) {
		t.Errorf("a bad point's row: %s", r)
	}

	// No points configured (its gpio channels are outputs, so no level
	// either): how to configure them.
	other, _ := must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.org.ID, Name: "Spare", SerialNumber: "SN-3", Model: "IG-500"}))
	for _, ch := range must(h.db.Serial().Serial(h.ctx, h.org.ID, other.ID)).Channels {
		if g := ch.Config.GPIO; g != nil && g.Direction == "in" {
			g.Direction, g.DebounceMs = "out", 0
			must(h.db.Serial().PutChannel(h.ctx, h.org.ID, other.ID, ch.ID, ch.Config))
		}
	}
	if body := c.get("/panel/devices/" + other.ID).body; !strings.Contains(body, "No points are configured.") || !strings.Contains(body, "docs/points.md") {
		t.Errorf("a device without points does not say how to configure them: %s", excerpt(body, `id="points"`))
	}
	if body := c.get("/panel/devices/" + h.gate.ID).body; !strings.Contains(body, "has no serial I/O port, so it has no points") {
		t.Error("the IG-100's page does not say it has no points")
	}
	for _, p := range []string{"/panel/devices/" + h.foreign.ID + "/points", "/panel/devices/" + h.foreign.ID + "/points/" + testPoint} {
		if r := c.get(p); r.status != http.StatusNotFound {
			t.Errorf("another organization's %s: %d", p, r.status)
		}
	}
}

// TestPointChart: a point's page charts 1 h, 24 h and 7 d of step buckets
// and its CSV route answers the same rows with the API's columns.
func TestPointChart(t *testing.T) { stores.Run(t, testPointChart) }

func testPointChart(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	end := time.Now().Add(-time.Minute).Truncate(time.Minute)
	// 721 samples, 10 s apart, the last 1 to 2 minutes before now (the
	// clock's second decides): 348 to 361 of them in the last hour.
	h.seedPoint(end, 2*time.Hour)
	c := h.signIn(cloud.RoleViewer)
	page := "/panel/devices/" + h.device.ID + "/points/" + testPoint
	counted := regexp.MustCompile(`(\d+) buckets of (\d+ \w+) in the last ([\w ]+):`)
	for _, tc := range []struct {
		rng, step string
		min, max  int // buckets: the window's edges cut one or two
	}{{"1h", "5 s", 348, 361}, {"24h", "2 min", 60, 61}, {"7d", "15 min", 8, 9}} {
		body := c.get(page + "?range=" + tc.rng).body
		m := counted.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("range %s: no bucket count on the page", tc.rng)
		}
		n := 0
		fmt.Sscan(m[1], &n)
		if n < tc.min || n > tc.max || m[2] != tc.step {
			t.Errorf("range %s: %s buckets of %s, want %d..%d of %s", tc.rng, m[1], m[2], tc.min, tc.max, tc.step)
		}
		if !strings.Contains(body, `data-point-chart="{&#34;t&#34;:[`) || !strings.Contains(body, `&#34;avg&#34;:[`) {
			t.Errorf("range %s: no chart data", tc.rng)
		}
		if !strings.Contains(body, `aria-current="true">`+strings.Replace(strings.Replace(tc.rng, "h", " h", 1), "d", " d", 1)+`</a>`) {
			t.Errorf("range %s is not marked current", tc.rng)
		}

		resp := c.get(page + "/samples.csv?range=" + tc.rng)
		if resp.status != http.StatusOK || resp.header.Get("Content-Type") != "text/csv; charset=utf-8" || !strings.HasPrefix(resp.header.Get("Content-Disposition"), "attachment") {
			t.Errorf("range %s CSV: %d %q %q", tc.rng, resp.status, resp.header.Get("Content-Type"), resp.header.Get("Content-Disposition"))
		}
		rows, err := csv.NewReader(strings.NewReader(resp.body)).ReadAll()
		if err != nil || len(rows) != n+1 || strings.Join(rows[0], ",") != "at,min,max,avg,last,count" {
			t.Errorf("range %s CSV: %d rows (want %d and a header), header %v, %v", tc.rng, len(rows), n+1, rows[0], err)
		}
	}
	// The 2-minute buckets of the sawtooth: 12 samples each, 20 to 29.
	rows, _ := csv.NewReader(strings.NewReader(c.get(page + "/samples.csv?range=24h").body)).ReadAll()
	if r := rows[len(rows)/2]; r[1] != "20" || r[2] != "29" || r[5] != "12" {
		t.Errorf("a full 2-minute bucket: %v", r)
	}
	raw, _ := csv.NewReader(strings.NewReader(c.get(page + "/samples.csv?range=1h&raw=1").body)).ReadAll()
	if len(raw) < 349 || len(raw) > 362 || strings.Join(raw[0], ",") != "at,value" || !regexp.MustCompile(`^2\d$`).MatchString(raw[1][1]) {
		t.Errorf("raw CSV of 1 h: %d rows, first %v", len(raw), raw[:min(2, len(raw))])
	}
	if r := c.get("/panel/devices/" + h.device.ID + "/points/rs485-1.no_such_point"); r.status != http.StatusNotFound {
		t.Errorf("an unknown point: %d", r.status)
	}
}

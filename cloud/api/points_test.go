package api_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// rs485PointsBody is rs485Body with points: a temperature as f32, a counter
// as u32, an alarm bit.
func rs485PointsBody() map[string]any {
	b := rs485Body()
	b["points"] = []map[string]any{
		{"name": "boiler_temp", "function": "holding", "register": 0, "type": "f32", "unit": "°C", "deadband": 0.1},
		{"name": "counter", "function": "input", "register": 10, "type": "u32", "order": "CDAB", "intervalMs": 5000},
		{"name": "alarm", "function": "holding", "register": 20, "type": "bool", "bit": 3},
	}
	return b
}

func canfdPointsBody() map[string]any {
	return map[string]any{"kind": "canfd", "nominalBitrate": 500000, "dataBitrate": 2000000, "samplePoint": 0.8, "listenOnly": false,
		"tx":     map[string]any{"enabled": false, "intervalMs": 0, "canId": "0x100", "dataHex": "00"},
		"points": []map[string]any{{"name": "rpm", "canId": "0x1a2", "startBit": 0, "length": 16, "scale": 0.25, "unit": "rpm"}}}
}

// seq numbers the point batches the tests send, as an agent's spool does.
var seq atomic.Uint64

// pointSamples stores samples as an agent sends them: one Records item
// holding a point batch.
func pointSamples(t *testing.T, a agentlink.Store, dev agentlink.Device, samples ...protocol.PointSample) {
	t.Helper()
	items := []protocol.Record{{Seq: seq.Add(1) + 1000, Points: &protocol.PointBatch{Samples: samples}}}
	if _, err := a.Records(context.Background(), agentlink.RecordsIn{Device: dev, Session: "points-test", Items: items}); err != nil {
		t.Fatalf("records: %v", err)
	}
}

func TestPoints(t *testing.T) {
	t.Parallel()
	stores.Run(t, testPoints)
}

func testPoints(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	base := "/api/v1/public/devices/" + d.ID
	e.req(http.MethodPut, base+"/serial/channels/rs485-1", e.keyA, rs485PointsBody()).want(t, http.StatusOK, "")
	e.req(http.MethodPut, base+"/serial/channels/canfd-1", e.keyA, canfdPointsBody()).want(t, http.StatusOK, "")

	list := func() []resource.Point {
		t.Helper()
		r := e.get("/devices/"+d.ID+"/points", e.keyA)
		r.want(t, http.StatusOK, "")
		var l resource.One[[]resource.Point]
		r.decode(t, &l)
		return l.Data
	}
	// Before any reading: every configured point, in channel then
	// configuration order, with no value; the device is not ONLINE.
	pts := list()
	var ids []string
	for _, p := range pts {
		ids = append(ids, p.ID+":"+p.Type+":"+p.Unit)
		if p.Value != nil || p.At != nil || p.Quality != "stale" {
			t.Errorf("point %s before any reading: value %v at %v quality %s", p.ID, p.Value, p.At, p.Quality)
		}
	}
	want := "rs485-1.boiler_temp:f32:°C,rs485-1.counter:u32:,rs485-1.alarm:bool:,canfd-1.rpm:f64:rpm," +
		"gpio-1.level:bool:,gpio-2.level:bool:,gpio-3.level:bool:,gpio-4.level:bool:"
	if got := strings.Join(ids, ","); got != want {
		t.Fatalf("points:\n got %s\nwant %s", got, want)
	}

	// The agent reports: the heartbeat's latest state, and samples.
	now := time.Now().UTC().Truncate(time.Millisecond)
	storetest.Channels(t, e.s.Agent, e.agent(d.ID), now,
		protocol.ChannelState{ID: "rs485-1", Available: true, Live: "16812 0", Points: []protocol.PointState{
			{Name: "boiler_temp", Value: 21.5, Quality: "good", At: resource.T(now)},
			{Name: "counter", Quality: "bad", Error: "modbus exception 2 (illegal data address)", At: resource.T(now)},
			{Name: "alarm", Value: 1, Quality: "good", At: resource.T(now)},
		}})
	start := now.Truncate(time.Minute).Add(-20 * time.Minute)
	var samples, levels []protocol.PointSample
	for i := range 60 {
		at := resource.T(start.Add(time.Duration(i) * 10 * time.Second))
		s := protocol.PointSample{Point: "rs485-1.boiler_temp", At: at, Value: 20 + float64(i)*0.5}
		if i == 30 {
			s = protocol.PointSample{Point: "rs485-1.boiler_temp", At: at, Error: "modbus timeout (slave 7)"}
		}
		samples = append(samples, s)
		levels = append(levels, protocol.PointSample{Point: "gpio-1.level", At: at, Value: float64(i % 2)})
	}
	pointSamples(t, e.s.Agent, e.agent(d.ID), samples...)
	pointSamples(t, e.s.Agent, e.agent(d.ID), levels...)

	byID := map[string]resource.Point{}
	for _, p := range list() {
		byID[p.ID] = p
	}
	if p := byID["rs485-1.boiler_temp"]; p.Value != 21.5 || p.Quality != "good" || p.Error != "" || p.At == nil || !p.At.Equal(now) {
		t.Errorf("boiler_temp: %+v", p)
	}
	if p := byID["rs485-1.counter"]; p.Quality != "bad" || !strings.Contains(p.Error, "exception 2") {
		t.Errorf("counter: %+v", p)
	}
	if p := byID["rs485-1.alarm"]; p.Value != true || p.Quality != "good" {
		t.Errorf("alarm (bool): %+v", p)
	}

	samplesPath := func(point string, q url.Values) string {
		return base + "/points/" + point + "/samples?" + q.Encode()
	}
	window := url.Values{"from": {resource.FormatTime(start)}, "to": {resource.FormatTime(start.Add(10 * time.Minute))}}
	with := func(kv ...string) url.Values {
		q := url.Values{}
		for k, v := range window {
			q[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		return q
	}

	// Raw: every sample ascending, a failed read as null.
	r := e.req(http.MethodGet, samplesPath("rs485-1.boiler_temp", window), e.keyA, nil)
	r.want(t, http.StatusOK, "")
	var raw resource.PointSamples
	r.decode(t, &raw)
	if len(raw.Data) != 60 || !raw.Window.From.Equal(start) || !raw.Window.To.Equal(start.Add(10*time.Minute)) {
		t.Fatalf("raw: %d rows, window %+v", len(raw.Data), raw.Window)
	}
	for i, s := range raw.Data {
		want := any(20 + float64(i)*0.5)
		if i == 30 {
			want = nil
		}
		if !s.At.Equal(start.Add(time.Duration(i)*10*time.Second)) || s.Value != want {
			t.Fatalf("raw row %d: %+v, want %v", i, s, want)
		}
	}
	// The newest limit, window.from moved up to the first returned.
	e.req(http.MethodGet, samplesPath("rs485-1.boiler_temp", with("limit", "10")), e.keyA, nil).decode(t, &raw)
	if len(raw.Data) != 10 || raw.Data[0].Value != 45.0 || !raw.Window.From.Equal(start.Add(500*time.Second)) {
		t.Fatalf("limit 10: %+v", raw)
	}
	// Bools are JSON booleans.
	e.req(http.MethodGet, samplesPath("gpio-1.level", with("limit", "2")), e.keyA, nil).decode(t, &raw)
	if len(raw.Data) != 2 || raw.Data[0].Value != false || raw.Data[1].Value != true {
		t.Fatalf("gpio level: %+v", raw)
	}

	// Buckets of one minute: six samples each, the failed read skipped.
	r = e.req(http.MethodGet, samplesPath("rs485-1.boiler_temp", with("step", "1m")), e.keyA, nil)
	r.want(t, http.StatusOK, "")
	var bk resource.PointBuckets
	r.decode(t, &bk)
	if len(bk.Data) != 10 {
		t.Fatalf("buckets: %s", r.body)
	}
	if b := bk.Data[0]; !b.At.Equal(start) || b.Min != 20 || b.Max != 22.5 || b.Avg != 21.25 || b.Last != 22.5 || b.Count != 6 {
		t.Errorf("bucket 0: %+v", b)
	}
	if b := bk.Data[5]; !b.At.Equal(start.Add(5*time.Minute)) || b.Count != 5 || b.Min != 35.5 || b.Last != 37.5 {
		t.Errorf("bucket 5 (one failed read): %+v", b)
	}

	// CSV: the same rows.
	csvOf := func(q url.Values, point string) [][]string {
		t.Helper()
		r := e.req(http.MethodGet, samplesPath(point, q), e.keyA, nil, "Accept", "text/csv")
		r.want(t, http.StatusOK, "")
		if ct := r.header.Get("Content-Type"); ct != "text/csv; charset=utf-8" {
			t.Fatalf("Content-Type %q", ct)
		}
		recs, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
		if err != nil {
			t.Fatalf("CSV %s: %v", r.body, err)
		}
		return recs
	}
	recs := csvOf(window, "rs485-1.boiler_temp")
	if len(recs) != 61 || strings.Join(recs[0], ",") != "at,value" || strings.Join(recs[1], ",") != resource.FormatTime(start)+",20" ||
		recs[31][1] != "" || recs[2][1] != "20.5" {
		t.Fatalf("raw CSV: %v", recs[:3])
	}
	recs = csvOf(with("limit", "2"), "gpio-1.level")
	if len(recs) != 3 || recs[1][1] != "false" || recs[2][1] != "true" {
		t.Fatalf("bool CSV: %v", recs)
	}
	recs = csvOf(with("step", "1m"), "rs485-1.boiler_temp")
	if len(recs) != 11 || strings.Join(recs[0], ",") != "at,min,max,avg,last,count" ||
		strings.Join(recs[1], ",") != resource.FormatTime(start)+",20,22.5,21.25,22.5,6" {
		t.Fatalf("bucket CSV: %v", recs[:2])
	}
	// Without Accept, or asking for JSON first: JSON.
	r = e.req(http.MethodGet, samplesPath("rs485-1.boiler_temp", with("limit", "1")), e.keyA, nil, "Accept", "application/json, text/csv;q=0.5")
	if ct := r.header.Get("Content-Type"); ct != "application/json" || !json.Valid(r.body) {
		t.Fatalf("JSON preferred: %s %s", ct, r.body)
	}
	// No samples in the window: [] (and an empty CSV is its header).
	empty := url.Values{"from": {resource.FormatTime(start.Add(-48 * time.Hour))}, "to": {resource.FormatTime(start.Add(-47 * time.Hour))}}
	r = e.req(http.MethodGet, samplesPath("rs485-1.counter", empty), e.keyA, nil)
	if r.status != http.StatusOK || !strings.HasPrefix(string(r.body), `{"data":[],"window":`) {
		t.Fatalf("empty: %d %s", r.status, r.body)
	}
	if recs := csvOf(empty, "rs485-1.counter"); len(recs) != 1 {
		t.Fatalf("empty CSV: %v", recs)
	}
	// The default window is the last hour up to now.
	r = e.req(http.MethodGet, base+"/points/rs485-1.boiler_temp/samples", e.keyA, nil)
	r.decode(t, &raw)
	if len(raw.Data) != 60 || raw.Window.To.Sub(raw.Window.From.Time) > time.Hour {
		t.Fatalf("default window: %d rows %+v", len(raw.Data), raw.Window)
	}
}

// TestPointsErrors checks the errors of both routes: the spec's codes, the
// field named, the organization's boundary, the scopes.
func TestPointsErrors(t *testing.T) {
	t.Parallel()
	stores.Run(t, testPointsErrors)
}

func testPointsErrors(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	small := e.device(e.orgA.ID, "IG-100")
	other := e.device(e.orgB.ID, "IG-500")
	base := "/api/v1/public/devices/" + d.ID
	e.req(http.MethodPut, base+"/serial/channels/rs485-1", e.keyA, rs485PointsBody()).want(t, http.StatusOK, "")
	readOnly := e.key(e.orgA.ID, cloud.ScopeDevicesRead)
	metricsOnly := e.key(e.orgA.ID, cloud.ScopeMetricsRead)
	samples := base + "/points/rs485-1.boiler_temp/samples"
	for _, c := range []struct {
		name, path, key string
		status          int
		code, inMsg     string
	}{
		{"from after to", samples + "?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", e.keyA, 400, cloud.EINVALID, "from:"},
		{"bad from", samples + "?from=yesterday", e.keyA, 400, cloud.EINVALID, "from:"},
		{"bad to", samples + "?to=2026-02-30T00:00:00Z", e.keyA, 400, cloud.EINVALID, "to:"},
		{"limit above", samples + "?limit=10001", e.keyA, 400, cloud.EINVALID, "limit:"},
		{"limit zero", samples + "?limit=0", e.keyA, 400, cloud.EINVALID, "limit:"},
		{"step too long", samples + "?step=2d", e.keyA, 400, cloud.EINVALID, "step:"},
		{"step too short", samples + "?step=500ms", e.keyA, 400, cloud.EINVALID, "step:"},
		{"step not whole seconds", samples + "?step=1500ms", e.keyA, 400, cloud.EINVALID, "step:"},
		{"step garbage", samples + "?step=often", e.keyA, 400, cloud.EINVALID, "step:"},
		{"unknown parameter", samples + "?bucket=1m", e.keyA, 400, cloud.EINVALID, "bucket"},
		{"points: unknown parameter", base + "/points?limit=5", e.keyA, 400, cloud.EINVALID, "limit"},
		{"unknown point", base + "/points/rs485-1.nope/samples", e.keyA, 404, cloud.ENOTFOUND, ""},
		{"point of an unknown channel", base + "/points/rs485-9.boiler_temp/samples", e.keyA, 404, cloud.ENOTFOUND, ""},
		{"not a point id", base + "/points/rs485-1/samples", e.keyA, 404, cloud.ENOTFOUND, ""},
		{"not a point id before the query", base + "/points/Rs485-1.Boiler/samples?step=2d", e.keyA, 404, cloud.ENOTFOUND, ""},
		{"unknown device", "/api/v1/public/devices/nosuchdevice00000000000000/points", e.keyA, 404, cloud.ENOTFOUND, ""},
		{"other org's device", "/api/v1/public/devices/" + other.ID + "/points", e.keyA, 404, cloud.ENOTFOUND, ""},
		{"other org's samples", "/api/v1/public/devices/" + other.ID + "/points/rs485-1.boiler_temp/samples", e.keyA, 404, cloud.ENOTFOUND, ""},
		{"no serial.io: points", "/api/v1/public/devices/" + small.ID + "/points", e.keyA, 409, cloud.ECAPABILITY, ""},
		{"no serial.io: samples", "/api/v1/public/devices/" + small.ID + "/points/rs485-1.x/samples", e.keyA, 409, cloud.ECAPABILITY, ""},
		{"samples need metrics:read", samples, readOnly, 403, cloud.EFORBIDDEN, ""},
		{"points need devices:read", base + "/points", metricsOnly, 403, cloud.EFORBIDDEN, ""},
		{"points with devices:read", base + "/points", readOnly, 200, "", ""},
		{"samples with metrics:read", samples, metricsOnly, 200, "", ""},
		{"no key", samples, "", 401, cloud.EUNAUTHORIZED, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.req(http.MethodGet, c.path, c.key, nil)
			r.want(t, c.status, c.code)
			if c.inMsg != "" && !strings.HasPrefix(strings.TrimLeft(r.errMessage(), `"`), c.inMsg) {
				t.Fatalf("message %q does not start with %q", r.errMessage(), c.inMsg)
			}
		})
	}

	// A bad point in a PUT: 400 naming it, and nothing applied.
	var before resource.One[resource.Channel]
	e.get("/devices/"+d.ID+"/serial/channels/rs485-1", e.keyA).decode(t, &before)
	bad := rs485PointsBody()
	bad["baudRate"] = 9600
	bad["points"] = append(bad["points"].([]map[string]any), map[string]any{"name": "x"})
	bad["points"].([]map[string]any)[2]["order"] = "ABDC"
	r := e.req(http.MethodPut, base+"/serial/channels/rs485-1", e.keyA, bad)
	r.want(t, http.StatusBadRequest, cloud.EINVALID)
	if !strings.HasPrefix(r.errMessage(), "points[2].order") {
		t.Errorf("message %q does not name points[2].order", r.errMessage())
	}
	var after resource.One[resource.Channel]
	e.get("/devices/"+d.ID+"/serial/channels/rs485-1", e.keyA).decode(t, &after)
	a, _ := json.Marshal(after.Data.Config)
	b, _ := json.Marshal(before.Data.Config)
	if string(a) != string(b) || after.Data.Config.RS485.BaudRate != 19200 {
		t.Errorf("a refused PUT changed the config:\n%s\n%s", b, a)
	}
	if len(after.Data.Config.RS485.Points) != 3 || after.Data.Config.RS485.Points[2].Order != "ABCD" {
		t.Errorf("stored points: %+v", after.Data.Config.RS485.Points)
	}
	// Points on a model without serial.io.
	e.req(http.MethodPut, "/api/v1/public/devices/"+small.ID+"/serial/channels/rs485-1", e.keyA, rs485PointsBody()).want(t, http.StatusConflict, cloud.ECAPABILITY)
}

// TestSpecValidatorCatchesPointDrift proves the document's description of
// the samples route is strict enough to catch drift in JSON and in CSV.
func TestSpecValidatorCatchesPointDrift(t *testing.T) {
	t.Parallel()
	v := loadSpec(t)
	hdr := func(ct string) http.Header {
		h := http.Header{}
		for k, val := range map[string]string{"Content-Type": ct, "X-RateLimit-Limit": "600", "X-RateLimit-Remaining": "599", "X-RateLimit-Reset": "1700000000",
			"RateLimit": `"default";r=599;t=42`, "RateLimit-Policy": `"default";q=600;w=60`, "X-Request-Id": "abc"} {
			h.Set(k, val)
		}
		return h
	}
	req := httptest.NewRequest(http.MethodGet, "/api/v1/public/devices/abc/points/rs485-1.t/samples", nil)
	const win = `"window":{"from":"2026-01-02T15:00:00.000Z","to":"2026-01-02T16:00:00.000Z"}`
	for name, c := range map[string]struct {
		ct, body string
		ok       bool
	}{
		"raw":                     {"application/json", `{"data":[{"at":"2026-01-02T15:04:05.000Z","value":21.5},{"at":"2026-01-02T15:04:06.000Z","value":null},{"at":"2026-01-02T15:04:07.000Z","value":true}],` + win + `}`, true},
		"buckets":                 {"application/json", `{"data":[{"at":"2026-01-02T15:04:00.000Z","min":1,"max":2,"avg":1.5,"last":2,"count":3}],` + win + `}`, true},
		"empty":                   {"application/json", `{"data":[],` + win + `}`, true},
		"csv":                     {"text/csv; charset=utf-8", "at,value\n2026-01-02T15:04:05.000Z,21.5\n", true},
		"csv buckets":             {"text/csv; charset=utf-8", "at,min,max,avg,last,count\n", true},
		"value as a string":       {"application/json", `{"data":[{"at":"2026-01-02T15:04:05.000Z","value":"21.5"}],` + win + `}`, false},
		"bucket without count":    {"application/json", `{"data":[{"at":"2026-01-02T15:04:00.000Z","min":1,"max":2,"avg":1.5,"last":2}],` + win + `}`, false},
		"raw and bucket mixed":    {"application/json", `{"data":[{"at":"2026-01-02T15:04:00.000Z","value":1,"count":3}],` + win + `}`, false},
		"no window":               {"application/json", `{"data":[]}`, false},
		"csv without header line": {"text/csv; charset=utf-8", "2026-01-02T15:04:05.000Z,21.5\n", false},
		"csv as text/plain":       {"text/plain", "at,value\n", false},
	} {
		err := v.validate(req, 200, hdr(c.ct), []byte(c.body))
		if (err == nil) != c.ok {
			t.Errorf("%s: valid %v, want %v (%v)", name, err == nil, c.ok, err)
		}
	}
}

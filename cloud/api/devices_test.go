package api_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

func TestListDevices(t *testing.T) {
	t.Parallel()
	stores.Run(t, testListDevices)
}

func testListDevices(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	var devs []resource.DeviceDetail
	for i := 0; i < 30; i++ {
		devs = append(devs, e.device(e.orgA.ID, "IG-500"))
	}
	// Oldest first; devices created in the same millisecond by id.
	sort.Slice(devs, func(i, j int) bool {
		if !devs[i].CreatedAt.Equal(devs[j].CreatedAt.Time) {
			return devs[i].CreatedAt.Before(devs[j].CreatedAt.Time)
		}
		return devs[i].ID < devs[j].ID
	})
	var want []string
	for _, d := range devs {
		want = append(want, d.ID)
	}
	other := e.device(e.orgB.ID, "IG-500")

	r := e.get("/devices", e.keyA)
	r.want(t, http.StatusOK, "")
	var page resource.List[resource.Device]
	r.decode(t, &page)
	if len(page.Data) != 25 || !page.Pagination.HasMore || page.Pagination.NextCursor == nil {
		t.Fatalf("default page: %d items, pagination %+v; want 25, hasMore", len(page.Data), page.Pagination)
	}
	for i, d := range page.Data {
		if d.ID != want[i] {
			t.Fatalf("item %d = %s, want %s (oldest first)", i, d.ID, want[i])
		}
		if d.ID == other.ID {
			t.Fatal("org B's device listed with org A's key")
		}
	}
	if *page.Pagination.NextCursor != page.Data[24].ID {
		t.Fatalf("nextCursor %s is not the last item %s", *page.Pagination.NextCursor, page.Data[24].ID)
	}
	r = e.get("/devices?cursor="+*page.Pagination.NextCursor, e.keyA)
	r.want(t, http.StatusOK, "")
	var page2 resource.List[resource.Device]
	r.decode(t, &page2)
	if len(page2.Data) != 5 || page2.Pagination.HasMore || page2.Pagination.NextCursor != nil {
		t.Fatalf("last page: %d items, %+v", len(page2.Data), page2.Pagination)
	}
	if !strings.Contains(string(r.body), `"nextCursor":null`) {
		t.Fatalf("nextCursor must be null on the last page: %s", r.body)
	}

	// limit bounds and the status filter.
	r = e.get("/devices?limit=100", e.keyA)
	r.decode(t, &page)
	if len(page.Data) != 30 {
		t.Fatalf("limit=100: %d items", len(page.Data))
	}
	r = e.get("/devices?limit=1", e.keyA)
	r.decode(t, &page)
	if len(page.Data) != 1 || !page.Pagination.HasMore {
		t.Fatalf("limit=1: %d items", len(page.Data))
	}
	storetest.Connect(t, e.s.Agent, e.agent(want[3]), time.Now(), protocol.Hello{AgentVersion: "1.0.0"})
	r = e.get("/devices?status=ONLINE", e.keyA)
	r.decode(t, &page)
	if len(page.Data) != 1 || page.Data[0].ID != want[3] || page.Data[0].Status != resource.StatusOnline || page.Data[0].LastSeen == nil {
		t.Fatalf("status=ONLINE: %s", r.body)
	}
	// A cursor of org B's list is not an item of org A's list.
	e.get("/devices?cursor="+other.ID, e.keyA).want(t, http.StatusBadRequest, cloud.ECURSOR)
	e.get("/devices?cursor=zzzzzzzzzzzzzzzzzzzzzzzz", e.keyA).want(t, http.StatusBadRequest, cloud.ECURSOR)
	e.get("/devices?cursor=NOT-A-CUID!", e.keyA).want(t, http.StatusBadRequest, cloud.ECURSOR)
}

func TestDeviceDetailAndIsolation(t *testing.T) {
	t.Parallel()
	stores.Run(t, testDeviceDetailAndIsolation)
}

func testDeviceDetailAndIsolation(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	a := e.device(e.orgA.ID, "IG-500")
	b := e.device(e.orgB.ID, "IG-500")
	r := e.get("/devices/"+a.ID, e.keyA)
	r.want(t, http.StatusOK, "")
	var one resource.One[resource.DeviceDetail]
	r.decode(t, &one)
	if one.Data.ID != a.ID || one.Data.Model != "IG-500" || one.Data.SerialNumber != a.SerialNumber || one.Data.Status != resource.StatusProvisioning {
		t.Fatalf("detail: %s", r.body)
	}
	for _, k := range []string{`"agentDeviceName"`, `"agentTimezone"`, `"notes"`, `"createdAt"`} {
		if !strings.Contains(string(r.body), k) {
			t.Errorf("detail lacks %s: %s", k, r.body)
		}
	}
	// Org B's device, channel, metrics, events and alert through org A's key: 404, never data.
	alertB := e.alert(b.ID, "high_cpu", resource.AlertActive, time.Time{})
	for _, c := range []struct{ method, path string }{
		{"GET", "/devices/" + b.ID},
		{"GET", "/devices/" + b.ID + "/metrics"},
		{"GET", "/devices/" + b.ID + "/events"},
		{"GET", "/devices/" + b.ID + "/serial"},
		{"GET", "/devices/" + b.ID + "/serial/telemetry"},
		{"GET", "/devices/" + b.ID + "/serial/channels/rs485-1"},
		{"PATCH", "/devices/" + b.ID + "/serial"},
		{"PUT", "/devices/" + b.ID + "/serial/channels/rs485-1"},
		{"POST", "/alerts/" + alertB.ID + "/acknowledge"},
		{"POST", "/alerts/" + alertB.ID + "/resolve"},
	} {
		var body any
		if c.method == "PATCH" {
			body = map[string]any{"mode": "both"}
		}
		if c.method == "PUT" {
			body = map[string]any{"kind": "rs485", "baudRate": 9600, "dataBits": 8, "parity": "none", "stopBits": 1, "mode": "modbus_rtu_master", "slaveId": 1, "tx": map[string]any{"enabled": false, "intervalMs": 0, "register": 0, "value": 0}}
		}
		r := e.req(c.method, "/api/v1/public"+c.path, e.keyA, body)
		if r.status != http.StatusNotFound || r.errCode() != cloud.ENOTFOUND {
			t.Errorf("%s %s with another org's key: %d %s", c.method, c.path, r.status, r.body)
		}
		if strings.Contains(string(r.body), b.SerialNumber) || strings.Contains(string(r.body), "high_cpu on") {
			t.Errorf("%s %s leaked data: %s", c.method, c.path, r.body)
		}
	}
	// The alert of org B is neither changed nor listed.
	got, err := e.s.Store.Alerts().ListAlerts(context.Background(), e.orgB.ID, cloud.AlertFilter{Page: cloud.Page{Limit: 10}})
	if err != nil || len(got.Data) != 1 || got.Data[0].ID != alertB.ID || got.Data[0].State != resource.AlertActive {
		t.Fatalf("org B's alert changed: %+v %v", got, err)
	}
	var list resource.List[resource.Alert]
	e.get("/alerts?deviceId="+b.ID, e.keyA).decode(t, &list)
	if len(list.Data) != 0 {
		t.Fatalf("org B's alert listed for org A: %+v", list.Data)
	}
	e.get("/devices/nosuchdevice0000000000000", e.keyA).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.get("/devices/NOT_AN_ID", e.keyA).want(t, http.StatusNotFound, cloud.ENOTFOUND)
}

// TestDevicePaginationUnderInserts walks every page while another goroutine
// keeps adding devices: each device that existed before the walk is seen
// exactly once, and no device twice.
func TestDevicePaginationUnderInserts(t *testing.T) {
	t.Parallel()
	stores.Run(t, testDevicePaginationUnderInserts)
}

func testDevicePaginationUnderInserts(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	before := map[string]bool{}
	for i := 0; i < 60; i++ {
		before[e.device(e.orgA.ID, "IG-100").ID] = true
	}
	// The inserter adds at most maxLate devices: unbounded, a loaded
	// machine's slow page requests let it add more than any walk can
	// finish. Each of the first pages waits until a few more were added,
	// so inserts land between and during the page requests.
	const maxLate, perPage, insertPages = 100, 5, 4
	var late atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < maxLate; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, _, err := e.s.Store.AddDevice(context.Background(), cloud.NewDevice{OrgID: e.orgA.ID, Name: fmt.Sprintf("late LATE-%d", i), SerialNumber: fmt.Sprintf("LATE-%d", i), Model: "IG-100"})
			if err != nil {
				t.Error(err)
				return
			}
			late.Add(1)
		}
	}()
	seen := map[string]int{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > (60+maxLate)/7+2 {
			t.Fatal("pagination does not end")
		}
		for deadline := time.Now().Add(time.Minute); pages < insertPages && late.Load() < int64(perPage*(pages+1)); {
			if time.Now().After(deadline) {
				t.Fatalf("only %d devices added in a minute", late.Load())
			}
			time.Sleep(time.Millisecond)
		}
		path := "/devices?limit=7"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := e.get(path, e.keyA)
		r.want(t, http.StatusOK, "")
		var page resource.List[resource.Device]
		r.decode(t, &page)
		for _, d := range page.Data {
			seen[d.ID]++
		}
		if pages == insertPages-1 {
			close(stop)
			wg.Wait()
		}
		if !page.Pagination.HasMore {
			break
		}
		cursor = *page.Pagination.NextCursor
	}
	seenOnce(t, "device", before, seen)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	stores.Run(t, testMetrics)
}

func testMetrics(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	now := time.Now().UTC().Truncate(time.Millisecond)
	var samples []resource.MetricSample
	for i := 0; i < 30; i++ { // every 5 minutes over 150 minutes
		samples = append(samples, resource.MetricSample{CapturedAt: resource.T(now.Add(-time.Duration(i*5) * time.Minute)), CPUPct: float64(i), MemPct: 40, DiskUsedPct: 50, TempCPU: 55.5, LoadAvg1: 0.5})
	}
	storetest.Metrics(t, e.s.Agent, e.agent(d.ID), samples...)
	// Default: the last hour before the server's now (samples at now-0 ..
	// now-55m; the one at now-60m is just outside).
	r := e.get("/devices/"+d.ID+"/metrics", e.keyA)
	r.want(t, http.StatusOK, "")
	var m resource.MetricsResponse
	r.decode(t, &m)
	if len(m.Data) != 12 {
		t.Fatalf("default window: %d samples, want 12", len(m.Data))
	}
	for i := 1; i < len(m.Data); i++ {
		if !m.Data[i].CapturedAt.After(m.Data[i-1].CapturedAt.Time) {
			t.Fatalf("not ascending at %d", i)
		}
	}
	if span := m.Window.To.Sub(m.Window.From.Time); span != time.Hour {
		t.Fatalf("default window spans %s", span)
	}
	// Explicit range with a limit: the newest limit samples, window.from moved.
	from := resource.FormatTime(now.Add(-150 * time.Minute))
	to := resource.FormatTime(now)
	r = e.get("/devices/"+d.ID+"/metrics?from="+from+"&to="+to+"&limit=4", e.keyA)
	r.want(t, http.StatusOK, "")
	r.decode(t, &m)
	if len(m.Data) != 4 || !m.Data[3].CapturedAt.Equal(now) || !m.Window.From.Equal(m.Data[0].CapturedAt.Time) {
		t.Fatalf("limit=4: %s", r.body)
	}
	if !strings.Contains(string(r.body), `.000Z"`) && !strings.Contains(string(r.body), `Z"`) {
		t.Fatalf("timestamps: %s", r.body)
	}
	e.get("/devices/"+d.ID+"/metrics?from="+to+"&to="+from, e.keyA).want(t, http.StatusBadRequest, cloud.EINVALID)
	e.get("/devices/"+d.ID+"/metrics?from=yesterday", e.keyA).want(t, http.StatusBadRequest, cloud.EINVALID)
	e.get("/devices/"+d.ID+"/metrics?limit=1001", e.keyA).want(t, http.StatusBadRequest, cloud.EINVALID)

	// A host without a thermal sensor: tempCpu stays a number, 0, and the
	// additive missing names it (checked against the OpenAPI document by
	// the client's transport); a sample with every sensor has no missing.
	nd := e.device(e.orgA.ID, "IG-100")
	storetest.Metrics(t, e.s.Agent, e.agent(nd.ID),
		resource.MetricSample{CapturedAt: resource.T(now.Add(-2 * time.Minute)), CPUPct: 9.5, MemPct: 48, DiskUsedPct: 61, LoadAvg1: 0.12, Missing: []string{"tempCpu"}},
		resource.MetricSample{CapturedAt: resource.T(now.Add(-time.Minute)), CPUPct: 9.5, MemPct: 48, DiskUsedPct: 61, TempCPU: 41.5, LoadAvg1: 0.12})
	r = e.get("/devices/"+nd.ID+"/metrics", e.keyA)
	r.want(t, http.StatusOK, "")
	if !strings.Contains(string(r.body), `"tempCpu":0,"loadAvg1":0.12,"missing":["tempCpu"]}`) || strings.Count(string(r.body), `"missing"`) != 1 {
		t.Fatalf("no-sensor sample: %s", r.body)
	}
}

func TestEvents(t *testing.T) {
	t.Parallel()
	stores.Run(t, testEvents)
}

func testEvents(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	d2 := e.device(e.orgA.ID, "IG-500")
	base := time.Now().Add(-time.Hour)
	var evs []resource.Event
	for i := 0; i < 60; i++ {
		typ, sev := "heartbeat", resource.SeverityInfo
		if i%10 == 0 {
			typ, sev = "alert.vpn_down", resource.SeverityCritical
		}
		evs = append(evs, resource.Event{Type: typ, Severity: sev, Message: fmt.Sprintf("event %d", i), CreatedAt: resource.T(base.Add(time.Duration(i) * time.Second)),
			Data: []byte(`{"interfaceName":"wg0","endpoint":"vpn.example:51820","peerCount":1}`)})
	}
	evs = storetest.Events(t, e.s.Agent, e.agent(d.ID), evs...)
	storetest.Events(t, e.s.Agent, e.agent(d2.ID), resource.Event{Type: "agent.started", Severity: resource.SeverityInfo, Message: "x"})
	r := e.get("/devices/"+d.ID+"/events", e.keyA)
	r.want(t, http.StatusOK, "")
	var page resource.List[resource.Event]
	r.decode(t, &page)
	if len(page.Data) != 50 || !page.Pagination.HasMore || page.Data[0].Message != "event 59" {
		t.Fatalf("default page: %d items, first %q", len(page.Data), page.Data[0].Message)
	}
	r = e.get("/devices/"+d.ID+"/events?cursor="+*page.Pagination.NextCursor+"&limit=200", e.keyA)
	r.decode(t, &page)
	if len(page.Data) != 10 || page.Pagination.HasMore || page.Data[9].Message != "event 0" {
		t.Fatalf("second page: %d items", len(page.Data))
	}
	r = e.get("/devices/"+d.ID+"/events?severity=CRITICAL&type=alert.vpn_down", e.keyA)
	r.decode(t, &page)
	if len(page.Data) != 6 {
		t.Fatalf("filtered: %d items", len(page.Data))
	}
	if !strings.Contains(string(r.body), `"peerCount":1`) {
		t.Fatalf("event data missing: %s", r.body)
	}
	// A cursor of another device's list is invalid.
	r = e.get("/devices/"+d2.ID+"/events", e.keyA)
	r.decode(t, &page)
	e.get("/devices/"+d.ID+"/events?cursor="+page.Data[0].ID, e.keyA).want(t, http.StatusBadRequest, cloud.ECURSOR)
	e.get("/devices/"+d.ID+"/events?limit=201", e.keyA).want(t, http.StatusBadRequest, cloud.EINVALID)
	e.get("/devices/"+d.ID+"/events?severity=LOW", e.keyA).want(t, http.StatusBadRequest, cloud.EINVALID)
}

// TestEventPaginationUnderInserts walks a device's events (newest first)
// while new events keep arriving: each pre-existing event is seen exactly
// once and the walk ends.
func TestEventPaginationUnderInserts(t *testing.T) {
	t.Parallel()
	stores.Run(t, testEventPaginationUnderInserts)
}

func testEventPaginationUnderInserts(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	base := time.Now().Add(-time.Hour)
	var evs []resource.Event
	for i := 0; i < 90; i++ {
		// Several events share a millisecond: the id breaks the tie.
		evs = append(evs, resource.Event{Type: "heartbeat", Severity: resource.SeverityInfo, Message: "hb", CreatedAt: resource.T(base.Add(time.Duration(i/3) * time.Millisecond))})
	}
	evs = storetest.Events(t, e.s.Agent, e.agent(d.ID), evs...)
	before := map[string]bool{}
	for _, ev := range evs {
		before[ev.ID] = true
	}
	var stop func()
	seen := map[string]int{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages == 1 { // new events arrive while the walk goes on
			stop = storetest.WriteLoop(t, func(int) error {
				_, err := e.s.Agent.Records(context.Background(), agentlink.RecordsIn{Device: e.agent(d.ID), Session: "s", Items: []protocol.Record{{Seq: 1,
					Event: &protocol.Event{ID: ids.New(), Type: "usb.attached", Severity: resource.SeverityInfo, Message: "new", Data: []byte(`{}`), CreatedAt: resource.T(time.Now())}}}})
				return err
			})
		}
		if pages > 100 {
			t.Fatal("pagination does not end")
		}
		path := "/devices/" + d.ID + "/events?limit=8"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var page resource.List[resource.Event]
		r := e.get(path, e.keyA)
		r.want(t, http.StatusOK, "")
		r.decode(t, &page)
		for _, ev := range page.Data {
			seen[ev.ID]++
		}
		if !page.Pagination.HasMore {
			break
		}
		cursor = *page.Pagination.NextCursor
	}
	if stop == nil {
		t.Fatal("the walk ended before inserts began")
	}
	stop()
	seenOnce(t, "event", before, seen)
}

// seenOnce checks a walk through every page that ran while new items were
// inserted: each item there before the walk was seen exactly once, and no
// item (old or new) twice.
func seenOnce(t *testing.T, what string, before map[string]bool, seen map[string]int) {
	t.Helper()
	for id := range before {
		if seen[id] != 1 {
			t.Errorf("%s %s seen %d times", what, id, seen[id])
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s %s seen %d times", what, id, n)
		}
	}
}

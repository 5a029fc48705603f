package sqlite_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/resource"
)

func TestDeviceReadPaths(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	other := MustOrg(t, db, "other")
	svc := sqlite.NewDeviceService(db)

	d := MustDevice(t, db, org.ID, "IG-500")
	foreign := MustDevice(t, db, other.ID, "IG-500")

	got, err := svc.Device(ctx, org.ID, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != d.ID || got.Status != resource.StatusProvisioning || got.Model != "IG-500" || got.LastSeen != nil {
		t.Errorf("device = %+v", got)
	}
	if _, err := svc.Device(ctx, org.ID, foreign.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("other org's device: err = %v, want not_found", err)
	}

	now := time.Now().UTC().Truncate(time.Millisecond)
	var samples []resource.MetricSample
	for i := 0; i < 10; i++ {
		samples = append(samples, resource.MetricSample{CapturedAt: resource.T(now.Add(time.Duration(i-10) * time.Minute)), CPUPct: float64(i)})
	}
	n, err := db.InsertMetrics(ctx, d.ID, samples)
	if err != nil || n != 10 {
		t.Fatalf("insert metrics: %d, %v", n, err)
	}
	if n, _ := db.InsertMetrics(ctx, d.ID, samples[:3]); n != 0 {
		t.Errorf("re-insert stored %d samples, want 0", n)
	}
	m, err := svc.Metrics(ctx, org.ID, d.ID, cloud.MetricsQuery{From: now.Add(-time.Hour), To: now, Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Data) != 4 || m.Data[0].CPUPct != 6 || m.Data[3].CPUPct != 9 {
		t.Errorf("metrics = %+v", m.Data)
	}
	if !m.Window.From.Equal(m.Data[0].CapturedAt.Time) || !m.Window.To.Equal(now) {
		t.Errorf("window = %+v", m.Window)
	}
	m, err = svc.Metrics(ctx, org.ID, d.ID, cloud.MetricsQuery{From: now.Add(-time.Hour), To: now, Limit: 200})
	if err != nil || len(m.Data) != 10 || !m.Window.From.Equal(now.Add(-time.Hour)) {
		t.Errorf("untruncated metrics: %d samples, window %+v, err %v", len(m.Data), m.Window, err)
	}
	if _, err := svc.Metrics(ctx, org.ID, d.ID, cloud.MetricsQuery{From: now, To: now.Add(-time.Hour)}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("from after to: err = %v", err)
	}

	if _, err := db.InsertMetrics(ctx, d.ID, []resource.MetricSample{{CapturedAt: resource.T(now), CPUPct: math.NaN()}}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("NaN sample: err = %v, want validation_error", err)
	}
	if e, err := db.InsertEvent(ctx, d.ID, resource.Event{Type: "agent.started", Data: json.RawMessage("null")}); err != nil || string(e.Data) != "{}" {
		t.Errorf("event with null data stored as %s, %v", e.Data, err)
	}
	ev, err := db.InsertEvent(ctx, d.ID, resource.Event{Type: "vpn_down", Severity: resource.SeverityError, Message: "tunnel down",
		Data: json.RawMessage(`{"interfaceName":"wg0","endpoint":"1.2.3.4:51820","peerCount":0}`)})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := svc.Events(ctx, org.ID, d.ID, cloud.EventFilter{Type: "vpn_down"})
	if err != nil || len(evs.Data) != 1 || evs.Data[0].ID != ev.ID || evs.Pagination.HasMore || evs.Pagination.NextCursor != nil {
		t.Errorf("events = %+v, %v", evs, err)
	}
	if _, err := svc.Events(ctx, other.ID, d.ID, cloud.EventFilter{}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("events of another org's device: err = %v", err)
	}
}

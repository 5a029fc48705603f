package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/resource"
)

// TestOrgIsolation calls every read and write of the services with the
// other organization's id: each answers not_found and changes nothing.
func TestOrgIsolation(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	other := MustOrg(t, db, "intruder")
	d := MustDevice(t, db, org.ID, "IG-500")
	ev, _ := db.InsertEvent(ctx, d.ID, resource.Event{Type: "agent.started"})
	a, err := db.InsertAlert(ctx, sqlite.NewAlert{DeviceID: d.ID, RuleName: "high_cpu"})
	if err != nil {
		t.Fatal(err)
	}
	devs := sqlite.NewDeviceService(db)
	serial := sqlite.NewSerialService(db)
	alerts := sqlite.NewAlertService(db)
	mode := "passthrough"
	now := time.Now()
	for name, call := range map[string]func(orgID string) error{
		"Device": func(o string) error { _, err := devs.Device(ctx, o, d.ID); return err },
		"Metrics": func(o string) error {
			_, err := devs.Metrics(ctx, o, d.ID, cloud.MetricsQuery{From: now.Add(-time.Hour), To: now})
			return err
		},
		"Events":    func(o string) error { _, err := devs.Events(ctx, o, d.ID, cloud.EventFilter{}); return err },
		"Serial":    func(o string) error { _, err := serial.Serial(ctx, o, d.ID); return err },
		"Telemetry": func(o string) error { _, err := serial.Telemetry(ctx, o, d.ID); return err },
		"Channel":   func(o string) error { _, err := serial.Channel(ctx, o, d.ID, "rs485-1"); return err },
		"PatchSerial": func(o string) error {
			_, err := serial.PatchSerial(ctx, o, d.ID, cloud.SerialPatch{Mode: &mode})
			return err
		},
		"PutChannel": func(o string) error {
			_, err := serial.PutChannel(ctx, o, d.ID, "rs485-1", rs485Config(9600))
			return err
		},
		"Acknowledge": func(o string) error { _, err := alerts.Acknowledge(ctx, o, a.ID); return err },
		"Resolve":     func(o string) error { _, err := alerts.Resolve(ctx, o, a.ID); return err },
	} {
		if err := call(other.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
			t.Errorf("%s from another organization: err = %v, want not_found", name, err)
		}
		if err := call(org.ID); err != nil && name != "Acknowledge" && name != "Resolve" {
			t.Errorf("%s from the owner: %v", name, err)
		}
	}
	// Nothing leaked into the intruder's lists.
	if l, _ := devs.ListDevices(ctx, other.ID, cloud.DeviceFilter{}); len(l.Data) != 0 {
		t.Errorf("intruder lists %d devices", len(l.Data))
	}
	if l, _ := alerts.ListAlerts(ctx, other.ID, cloud.AlertFilter{State: resource.AlertResolved}); len(l.Data) != 0 {
		t.Errorf("intruder lists %d alerts", len(l.Data))
	}
	if _, err := devs.Events(ctx, other.ID, d.ID, cloud.EventFilter{Page: cloud.Page{Cursor: ev.ID}}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("events with the owner's cursor from another org: %v", err)
	}
}

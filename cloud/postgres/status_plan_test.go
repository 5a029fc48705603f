package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/shared/resource"
)

// TestAlertEngineDeviceReadsUseIndexes: among 2,000 devices, the alert
// engine's pages of devices in a status a status rule watches, and of
// OFFLINE devices, read only those devices, through their partial indexes
// (the planner may sort the few it finds), never every device.
func TestAlertEngineDeviceReadsUseIndexes(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, migratedDB(t))
	devicesOfAcme(t, db, 2000)
	if _, err := db.Pool.Exec(ctx, `UPDATE devices SET status = CASE WHEN serial_number < 'SN-0010' THEN 'ERROR' WHEN serial_number < 'SN-0050' THEN 'OFFLINE' ELSE 'ONLINE' END, last_seen = 1000`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE devices`); err != nil {
		t.Fatal(err)
	}
	status, err := sqlstore.StatusDevicesSQL([]resource.DeviceStatus{resource.StatusError, resource.StatusUpdating})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sql   string
		args  []any
		index string
	}{
		{status, []any{"", 100}, "devices_status_watch"},
		{sqlstore.OfflineDevicesSQL, []any{"", "", "", int64(1) << 50, 100}, "devices_offline"},
	} {
		all := explain(t, db, tc.sql, tc.args...)
		if strings.Contains(all, "Seq Scan") || !strings.Contains(all, tc.index) {
			t.Errorf("planned as\n%s\nwant a scan of %s, for %s", all, tc.index, tc.sql)
		}
	}
}

// explain returns the plan of query (with ? placeholders) for args.
func explain(t *testing.T, db *postgres.DB, query string, args ...any) string {
	t.Helper()
	for i := 1; strings.Contains(query, "?"); i++ {
		query = strings.Replace(query, "?", fmt.Sprintf("$%d", i), 1)
	}
	rows, err := db.Pool.Query(context.Background(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// devicesOfAcme creates the organization acme and its n devices (serial
// numbers SN-0000, SN-0001, ...), returned oldest first.
func devicesOfAcme(t *testing.T, db *postgres.DB, n int) (cloud.Org, []resource.DeviceDetail) {
	t.Helper()
	ctx := context.Background()
	org, err := db.CreateOrg(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]resource.DeviceDetail, n)
	for i := range devs {
		if devs[i], _, err = db.AddDevice(ctx, cloud.NewDevice{OrgID: org.ID, Name: fmt.Sprintf("gw-%04d", i), SerialNumber: fmt.Sprintf("SN-%04d", i), Model: "IG-500"}); err != nil {
			t.Fatal(err)
		}
	}
	return org, devs
}

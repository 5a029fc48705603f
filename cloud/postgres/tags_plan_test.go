package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

// TestDeviceTagPageUsesKeysetIndex: GET /devices?tag= of an organization
// of 2,000 devices (a tenth of them tagged) on a relay whose table holds
// 20,000 more of other organizations reads only the organization's devices
// through its index (the planner may sort the few that match), never every
// device of the table.
func TestDeviceTagPageUsesKeysetIndex(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, migratedDB(t))
	org, devs := devicesOfAcme(t, db, 2000)
	for i, d := range devs {
		if i%10 == 0 {
			if err := db.SetDeviceTags(ctx, d.ID, []string{"line-3", "site:north"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cursor := devs[500].ID
	// Other organizations hold most of the table, as on a shared relay.
	other, err := db.CreateOrg(ctx, "others")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO devices (id, org_id, name, serial_number, model, status, token_hash, created_at, tags)
		SELECT 'other' || g, $1, 'gw', 'S' || g, 'IG-500', 'ONLINE', convert_to('h' || g, 'UTF8'), g, '["line-3","site:north"]' FROM generate_series(1, 20000) g`, other.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE devices`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"", cursor} {
		k := sqlstore.DeviceList(org.ID, cloud.DeviceFilter{Page: cloud.Page{Cursor: c}})
		k.Where, k.WhereArgs = db.TagsWhere([]string{"line-3", "site:north"})
		q, args, err := k.SQL()
		if err != nil {
			t.Fatal(err)
		}
		all := explain(t, db, q, args...)
		if strings.Contains(all, "Seq Scan") || !strings.Contains(all, "devices_org_") {
			t.Errorf("planned as\n%s\nwant a scan of an organization index, for %s", all, q)
		}
	}
}

package postgres

import (
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/ids"
)

// TestNumbered: the shared statements' ? placeholders become $1, $2, … in
// order, also in the statements built per call (a serial patch, a list
// page); a statement already numbered is left as it is.
func TestNumbered(t *testing.T) {
	mode, url := "both", "https://hooks.example.com/x"
	patch, _ := sqlstore.SerialPatchSQL(cloud.SerialPatch{Mode: &mode, WebhookURL: &url}, "d")
	page, _, err := sqlstore.DeviceList("o", cloud.DeviceFilter{Status: "ONLINE", Page: cloud.Page{Cursor: ids.New()}}).SQL()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, want string }{
		{patch, `UPDATE serial_state SET desired_version = desired_version + 1, mode = $1, webhook_url = $2 WHERE device_id = $3`},
		{page, `SELECT ` + sqlstore.DeviceColumns + ` FROM devices WHERE org_id = $1 AND status = $2 AND (created_at, id) > ((SELECT max(c.created_at) FROM devices c WHERE c.id = $3 AND c.org_id = $4), $5) ORDER BY created_at, id LIMIT $6`},
		{`SELECT id FROM devices WHERE org_id = ? AND id = ?`, `SELECT id FROM devices WHERE org_id = $1 AND id = $2`},
		{`SELECT 1`, `SELECT 1`},
		{`UPDATE t SET a = $1 WHERE b = $2`, `UPDATE t SET a = $1 WHERE b = $2`},
	} {
		// Twice: the second answer comes from the kept rewrite.
		for range 2 {
			if got := numbered(c.in); got != c.want {
				t.Errorf("numbered(%q) = %q, want %q", c.in, got, c.want)
			}
		}
	}
}

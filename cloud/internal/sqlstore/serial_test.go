package sqlstore

import (
	"slices"
	"testing"

	"github.com/fleet/fleet/cloud"
)

// TestSerialPatchSQL: each field of the patch sets its column, a cleared
// URL sets NULL without an argument, and the arguments follow the
// placeholders (the PostgreSQL store numbers them: its numbered test).
func TestSerialPatchSQL(t *testing.T) {
	mode, url, on := "both", "https://hooks.example.com/x", true
	for _, tc := range []struct {
		name     string
		p        cloud.SerialPatch
		wantSQL  string
		wantArgs []any
	}{
		{"nothing", cloud.SerialPatch{},
			`UPDATE serial_state SET desired_version = desired_version + 1 WHERE device_id = ?`, []any{"d"}},
		{"all", cloud.SerialPatch{Mode: &mode, WebhookURL: &url, WebhookEnabled: &on},
			`UPDATE serial_state SET desired_version = desired_version + 1, mode = ?, webhook_url = ?, webhook_enabled = ? WHERE device_id = ?`,
			[]any{mode, url, on, "d"}},
		{"clear the URL", cloud.SerialPatch{ClearWebhookURL: true, WebhookURL: &url},
			`UPDATE serial_state SET desired_version = desired_version + 1, webhook_url = NULL WHERE device_id = ?`, []any{"d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, args := SerialPatchSQL(tc.p, "d")
			if q != tc.wantSQL || !slices.Equal(args, tc.wantArgs) {
				t.Errorf("got\n%s %v\nwant\n%s %v", q, args, tc.wantSQL, tc.wantArgs)
			}
		})
	}
}

package sqlstore

import (
	"slices"
	"testing"

	"github.com/fleet/fleet/cloud"
)

// TestSerialPatchSQL: each field of the patch sets its column, a cleared
// URL sets NULL without an argument, and the arguments follow the
// placeholders in either dialect.
func TestSerialPatchSQL(t *testing.T) {
	mode, url, on := "both", "https://hooks.example.com/x", true
	for _, tc := range []struct {
		name     string
		p        cloud.SerialPatch
		ph       Placeholder
		wantSQL  string
		wantArgs []any
	}{
		{"nothing", cloud.SerialPatch{}, Question,
			`UPDATE serial_state SET desired_version = desired_version + 1 WHERE device_id = ?`, []any{"d"}},
		{"all, sqlite", cloud.SerialPatch{Mode: &mode, WebhookURL: &url, WebhookEnabled: &on}, Question,
			`UPDATE serial_state SET desired_version = desired_version + 1, mode = ?, webhook_url = ?, webhook_enabled = ? WHERE device_id = ?`,
			[]any{mode, url, on, "d"}},
		{"all, postgres", cloud.SerialPatch{Mode: &mode, WebhookURL: &url, WebhookEnabled: &on}, Dollar,
			`UPDATE serial_state SET desired_version = desired_version + 1, mode = $1, webhook_url = $2, webhook_enabled = $3 WHERE device_id = $4`,
			[]any{mode, url, on, "d"}},
		{"clear the URL", cloud.SerialPatch{ClearWebhookURL: true, WebhookURL: &url}, Dollar,
			`UPDATE serial_state SET desired_version = desired_version + 1, webhook_url = NULL WHERE device_id = $1`, []any{"d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, args := SerialPatchSQL(tc.p, "d", tc.ph)
			if q != tc.wantSQL || !slices.Equal(args, tc.wantArgs) {
				t.Errorf("got\n%s %v\nwant\n%s %v", q, args, tc.wantSQL, tc.wantArgs)
			}
		})
	}
}

package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/resource"
)

// stdEncode is what writeJSON would produce.
func stdEncode(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var trickyStrings = []string{
	"", "plain", `quote " and \ backslash`, "tab\tnew\nline\rcr\bbs\fff", "ctl \x00\x01\x1f\x7f",
	"<html> & 'amp'", "unicode é ü 日本 🚀", "bad utf8 \xff\xfe end", "line sep \u2028 para \u2029",
	"truncated \xe6\x97", "/slash/",
}

func TestHandEncodingMatchesEncodingJSON(t *testing.T) {
	now := resource.T(time.Date(2026, 1, 2, 15, 4, 5, 123456789, time.UTC))
	seen := resource.T(time.Date(2026, 1, 2, 15, 4, 5, 0, time.FixedZone("x", 3600)))
	next := "cursor0000000000000000000"
	for _, s := range trickyStrings {
		devs := resource.List[resource.Device]{Data: []resource.Device{
			{ID: "abc", Name: s, SerialNumber: s, Status: resource.StatusOnline, Model: "IG-500", FirmwareVersion: s, LastSeen: &seen, IPAddress: "10.0.0.1", Location: s, CreatedAt: now, Tags: []string{s, "line-3"}},
			{ID: "def", Name: "n", Status: resource.StatusOffline, CreatedAt: now, Tags: []string{}},
		}, Pagination: resource.Pagination{NextCursor: &next, HasMore: true}}
		if got, want := appendDeviceList(nil, &devs), stdEncode(t, devs); !bytes.Equal(got, want) {
			t.Errorf("devices %q:\n got %s\nwant %s", s, got, want)
		}
		alerts := resource.List[resource.Alert]{Data: []resource.Alert{
			{ID: "a1", State: resource.AlertAcknowledged, Severity: resource.SeverityCritical, Message: s, Payload: json.RawMessage(`{ "value" : 97.5, "s": "x y" }`), DeviceID: "d", RuleID: "r", AcknowledgedAt: &now, CreatedAt: now},
			{ID: "a2", State: resource.AlertActive, Payload: json.RawMessage(`{}`), CreatedAt: now},
		}}
		got, err := appendAlertList(nil, &alerts)
		if err != nil {
			t.Fatal(err)
		}
		if want := stdEncode(t, alerts); !bytes.Equal(got, want) {
			t.Errorf("alerts %q:\n got %s\nwant %s", s, got, want)
		}
	}
	// A device without tags still lists "tags":[] (never null).
	if got := appendDevice(nil, &resource.Device{}); !bytes.HasSuffix(got, []byte(`,"tags":[]}`)) {
		t.Errorf("nil tags: %s", got)
	}
	empty := resource.List[resource.Device]{Data: []resource.Device{}}
	if got, want := appendDeviceList(nil, &empty), stdEncode(t, empty); !bytes.Equal(got, want) {
		t.Errorf("empty: got %s want %s", got, want)
	}
	if _, err := appendAlertList(nil, &resource.List[resource.Alert]{Data: []resource.Alert{{Payload: json.RawMessage(`{bad`)}}}); err == nil {
		t.Error("invalid payload accepted")
	}
}

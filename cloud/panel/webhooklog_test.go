package panel_test

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
)

// TestWebhookDeliveryLog: Settings → Webhooks lists 50 deliveries a page,
// newest first, with Older, Newer and Newest links that keep the filters
// (state, event, device) in the URL; a filter or link out of bounds is a
// 400 that says so; another organization's deliveries never show.
func TestWebhookDeliveryLog(t *testing.T) { stores.Run(t, testWebhookDeliveryLog) }

func testWebhookDeliveryLog(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	now := time.Now()
	var ds []*webhook.Delivery
	var atts []webhook.Attempt
	// 70 signal deliveries of the device (pending), then 3 failed
	// alert.resolved ones of the gatehouse; one of the other organization.
	for i := range 70 {
		ds = append(ds, &webhook.Delivery{ID: fmt.Sprintf("sig%02d", i), OrgID: h.org.ID, DeviceID: h.device.ID, Event: webhook.EventSignal,
			URL: "https://example.com/signals", Body: []byte(`{}`), NextAttemptAt: now, CreatedAt: now})
	}
	for i := range 3 {
		id := fmt.Sprintf("res%d", i)
		ds = append(ds, &webhook.Delivery{ID: id, OrgID: h.org.ID, DeviceID: h.gate.ID, Event: webhook.EventAlertResolved,
			URL: "https://example.com/alerts", Body: []byte(`{}`), NextAttemptAt: now, CreatedAt: now})
		atts = append(atts, webhook.Attempt{DeliveryID: id, Number: 1, At: now, StatusCode: 410, State: webhook.StateFailed})
	}
	ds = append(ds, &webhook.Delivery{ID: "theirs", OrgID: h.other.ID, DeviceID: h.foreign.ID, Event: webhook.EventSignal,
		URL: "https://example.com/other", Body: []byte(`{}`), NextAttemptAt: now, CreatedAt: now})
	if err := h.s.Outbox.WriteOutbox(h.ctx, ds, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Outbox.WriteOutbox(h.ctx, nil, atts); err != nil {
		t.Fatal(err)
	}
	c := h.signIn(cloud.RoleAdmin)
	rowID := regexp.MustCompile(`<tr data-delivery-id="([^"]+)">`)
	links := regexp.MustCompile(`<a href="([^"]+)"(?: rel="(?:next|prev)")?>(Newest|Newer|Older) deliveries</a>`)
	type pageOf struct {
		ids   []string
		links map[string]string
	}
	get := func(path string) pageOf {
		t.Helper()
		r := c.get(path)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, r.status)
		}
		p := pageOf{links: map[string]string{}}
		for _, m := range rowID.FindAllStringSubmatch(r.body, -1) {
			p.ids = append(p.ids, m[1])
		}
		for _, m := range links.FindAllStringSubmatch(r.body, -1) {
			p.links[m[2]] = html.UnescapeString(m[1])
		}
		if strings.Contains(r.body, "theirs") {
			t.Errorf("%s shows the other organization's delivery", path)
		}
		return p
	}
	// 74 of the organization: the harness's failed alert.opened, 70 signals, 3 resolved.
	first := get("/panel/settings/webhooks")
	if len(first.ids) != 50 || first.ids[0] != "res2" || first.ids[49] != "sig23" || first.links["Older"] == "" || first.links["Newer"] != "" || first.links["Newest"] != "" {
		t.Fatalf("first page: %d rows %v, links %v", len(first.ids), first.ids, first.links)
	}
	second := get(first.links["Older"])
	if len(second.ids) != 24 || second.ids[0] != "sig22" || second.ids[23] != h.delivery || second.links["Older"] != "" || second.links["Newer"] == "" || second.links["Newest"] == "" {
		t.Fatalf("second page: %d rows %v, links %v", len(second.ids), second.ids, second.links)
	}
	if back := get(second.links["Newer"]); strings.Join(back.ids, ",") != strings.Join(first.ids, ",") {
		t.Errorf("Newer from the second page: %v", back.ids)
	}
	// Filters, kept by the page links.
	if p := get("/panel/settings/webhooks?state=failed"); strings.Join(p.ids, ",") != "res2,res1,res0,"+h.delivery {
		t.Errorf("failed deliveries: %v", p.ids)
	}
	if p := get("/panel/settings/webhooks?event=alert.resolved&device=" + h.gate.ID); strings.Join(p.ids, ",") != "res2,res1,res0" {
		t.Errorf("the gatehouse's alert.resolved deliveries: %v", p.ids)
	}
	sig := get("/panel/settings/webhooks?event=serial.signal&device=" + h.device.ID)
	if len(sig.ids) != 50 || sig.ids[0] != "sig69" || !strings.Contains(sig.links["Older"], "event=serial.signal") || !strings.Contains(sig.links["Older"], "device="+h.device.ID) {
		t.Fatalf("the device's signals: %v, links %v", sig.ids, sig.links)
	}
	if p := get(sig.links["Older"]); len(p.ids) != 20 || p.ids[19] != "sig00" {
		t.Errorf("the device's older signals: %v", p.ids)
	}
	// Out of bounds: said, 400, nothing listed.
	for q, want := range map[string]string{
		"state=lost":                        "state: choose pending, delivered, failed or exhausted",
		"event=" + strings.Repeat("a", 65):  "event: an event name",
		"device=" + strings.Repeat("x", 65): "device: not a device id",
		"before=abc":                        "the page link is not valid",
		"before=5&after=9":                  "the page link is not valid",
	} {
		r := c.get("/panel/settings/webhooks?" + q)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, want) || rowID.MatchString(r.body) {
			t.Errorf("?%s: %d, want 400 saying %q", q, r.status, want)
		}
	}
}

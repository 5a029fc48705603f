package panel_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
)

// TestOfflineLastSeen: a device that went OFFLINE after its last heartbeat
// 10 minutes ago reads "10 min ago" on the fleet page and its own page,
// not "just now", with the exact time in the element.
func TestOfflineLastSeen(t *testing.T) { stores.Run(t, testOfflineLastSeen) }

func testOfflineLastSeen(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	seen := time.Now().Add(-10*time.Minute - 5*time.Second)
	dev := h.agent(h.token)
	session := storetest.Connect(t, h.s.Agent, dev, seen, protocol.Hello{AgentVersion: "1.3.0", HeartbeatInterval: protocol.Duration{Duration: time.Minute}})
	// The relay notices the silence only now.
	if _, _, err := h.s.Agent.Disconnect(h.ctx, dev, session, time.Now(), "heartbeats stopped"); err != nil {
		t.Fatal(err)
	}
	if d := must(h.db.Devices().Device(h.ctx, h.org.ID, h.device.ID)); d.Status != "OFFLINE" {
		t.Fatalf("status %s, want OFFLINE", d.Status)
	}
	c := h.signIn(cloud.RoleViewer)
	want := `<time datetime="` + seen.UTC().Format("2006-01-02T15:04:05.000Z") + `" title="` + seen.UTC().Format("2006-01-02 15:04:05 UTC") + `" data-tick>10 min ago</time>`
	fleet := c.get("/panel/").body
	row := regexp.MustCompile(`(?s)<tr[^>]*>\s*<td[^>]*><a href="/panel/devices/` + h.device.ID + `".*?</tr>`).FindString(fleet)
	if !strings.Contains(row, "OFFLINE") || !strings.Contains(row, want) {
		t.Errorf("fleet page row of the OFFLINE device, want %s: %s", want, row)
	}
	page := c.get("/panel/devices/" + h.device.ID).body
	last := regexp.MustCompile(`(?s)<dt>Last seen</dt>\s*<dd[^>]*>.*?</dd>`).FindString(page)
	if !strings.Contains(last, want) {
		t.Errorf("device page: %s, want %s", last, want)
	}
	for _, body := range []string{row, last} {
		if strings.Contains(body, "just now") || strings.Contains(body, "s ago") {
			t.Errorf("an OFFLINE device last seen 10 min ago reads %s", body)
		}
	}
	// Under a minute (the sweep takes a device OFFLINE after three silent
	// heartbeat intervals, 15 s in the demo) it says the seconds.
	quick, tok := must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.org.ID, Name: "Quick", SerialNumber: "SN-Q", Model: "IG-500"}))
	storetest.Offline(t, h.s.Agent, h.agent(tok), time.Now().Add(-40*time.Second), 5*time.Second)
	row = regexp.MustCompile(`(?s)<tr[^>]*>\s*<td[^>]*><a href="/panel/devices/` + quick.ID + `".*?</tr>`).FindString(c.get("/panel/").body)
	if !regexp.MustCompile(`>4\d s ago</time>`).MatchString(row) {
		t.Errorf("fleet page row of a device OFFLINE and last seen 40 s ago: %s", row)
	}
}

// TestTimesReadAlike: every time a page shows is a <time> element with
// its ISO datetime, reading either "2026-11-27 07:40:12 UTC" or how long
// ago (with the former in its title); an ISO time inside an alert's
// message reads the same way in the panel while the API keeps the message.
func TestTimesReadAlike(t *testing.T) { stores.Run(t, testTimesReadAlike) }

func testTimesReadAlike(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	const msg = "Device offline: no heartbeat since 2026-11-22T05:35:57.337Z (silent for 1m30s or more)"
	a := storetest.Alert(t, h.s.Engine, h.db.Alerts(), storetest.NewAlert{OrgID: h.org.ID, DeviceID: h.device.ID, Rule: "device_offline", Message: msg})
	h.online()
	c := h.signIn(cloud.RoleOwner)
	readable := `Device offline: no heartbeat since <time datetime="2026-11-22T05:35:57.337Z">2026-11-22 05:35:57 UTC</time> (silent for 1m30s or more)`
	for _, path := range []string{"/panel/alerts", "/panel/alerts/" + a.ID} {
		if body := c.get(path).body; !strings.Contains(body, readable) {
			t.Errorf("%s does not show the message's time as the panel shows times", path)
		}
	}
	if body := c.get("/panel/alerts/" + a.ID).body; !strings.Contains(body, "<title>Alert: Device offline: no heartbeat since 2026-11-22 05:35:57 UTC (silent for 1m30s or more) · Fleet</title>") {
		t.Error("the alert's title keeps the raw ISO time")
	}
	if got := must(h.db.Alerts().Alert(h.ctx, h.org.ID, a.ID)); got.Message != msg {
		t.Errorf("the stored message changed: %q", got.Message)
	}
	elem := regexp.MustCompile(`<time([^>]*)>([^<]*)</time>`)
	abs := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`)
	rel := regexp.MustCompile(`^(now|\d+ s ago|\d+ min ago|\d+ h ago|\d+ days ago)$`)
	attrs := regexp.MustCompile(`^ datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"(?: title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")?(?: data-tick)?(?: class="[a-z ]+")?$`)
	for _, path := range []string{"/panel/", "/panel/devices/" + h.device.ID, "/panel/alerts", "/panel/alerts/" + a.ID, "/panel/alerts/" + h.alerts[0].ID,
		"/panel/settings/api-keys", "/panel/settings/webhooks", "/panel/settings/members", "/panel/alerts/rules/" + h.rules[0].ID,
		"/panel/alerts/silences", "/panel/rollouts", "/panel/rollouts/" + h.rollouts[0].ID, "/panel/releases", "/panel/claims"} {
		n := 0
		for _, m := range elem.FindAllStringSubmatch(c.get(path).body, -1) {
			n++
			if !attrs.MatchString(m[1]) || !abs.MatchString(m[2]) && !(rel.MatchString(m[2]) && strings.Contains(m[1], " title=")) {
				t.Errorf("%s: a time reads otherwise: <time%s>%s</time>", path, m[1], m[2])
			}
		}
		if n == 0 {
			t.Errorf("%s shows no time", path)
		}
	}
}

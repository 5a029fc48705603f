package panel_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/panel"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

var (
	idRE    = regexp.MustCompile(`<tr data-device-id="([^"]+)">`)
	rowRE   = regexp.MustCompile(`(?s)<tr data-device-id="[^"]+">.*?</tr>`)
	stripRE = regexp.MustCompile(`(?s)<div class="strip".*?</div>`)
	tagRE   = regexp.MustCompile(`<[^>]*>`)
	spaceRE = regexp.MustCompile(`\s+`)
)

// readText is the text of an HTML fragment as a person reads it: tags
// dropped, whitespace collapsed.
func readText(html string) string {
	return strings.TrimSpace(spaceRE.ReplaceAllString(tagRE.ReplaceAllString(html, " "), " "))
}

// fleetRows are the fleet table's rows as read, in order.
func fleetRows(body string) []string {
	var rows []string
	for _, r := range rowRE.FindAllString(body, -1) {
		rows = append(rows, readText(r))
	}
	return rows
}

// names are the rows' first words up to the serial number.
func rowNames(rows []string, serials ...string) string {
	var out []string
	for _, r := range rows {
		for _, s := range serials {
			if i := strings.Index(r, " "+s+" "); i > 0 {
				out = append(out, r[:i])
			}
		}
	}
	return strings.Join(out, ",")
}

func TestFleetAtAGlance(t *testing.T) { stores.Run(t, testFleetAtAGlance) }

func testFleetAtAGlance(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	now := time.Now()
	// Press line 1 (h.device): ONLINE, four ACTIVE alerts (three WARNING,
	// one ERROR), a sample a minute ago after an older one.
	dev := h.agent(h.token)
	storetest.Connect(t, h.s.Agent, dev, now, protocol.Hello{AgentVersion: "1.0.0"})
	storetest.Metrics(t, h.s.Agent, dev,
		resource.MetricSample{CapturedAt: resource.T(now.Add(-2 * time.Minute)), CPUPct: 99, MemPct: 99, DiskUsedPct: 99},
		resource.MetricSample{CapturedAt: resource.T(now.Add(-time.Minute)), CPUPct: 42.4, MemPct: 61.6, DiskUsedPct: 77})
	_, oldToken := must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.org.ID, Name: "Old pump", SerialNumber: "SN-OLD", Model: "IG-100"}))
	storetest.Offline(t, h.s.Agent, h.agent(oldToken), now.Add(-3*time.Hour), time.Minute)
	boiler, _ := must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.org.ID, Name: "Boiler 7", SerialNumber: "SN-B7", Model: "IG-500"}))
	storetest.Alert(t, h.s.Engine, h.db.Alerts(), storetest.NewAlert{OrgID: h.org.ID, DeviceID: boiler.ID, Rule: "disk_full", Message: "disk full", State: resource.AlertAcknowledged})
	storetest.Alert(t, h.s.Engine, h.db.Alerts(), storetest.NewAlert{OrgID: h.org.ID, DeviceID: boiler.ID, Rule: "high_cpu", Message: "was hot", State: resource.AlertResolved})
	// The other organization's alert counts nowhere here.
	storetest.Alert(t, h.s.Engine, h.db.Alerts(), storetest.NewAlert{OrgID: h.other.ID, DeviceID: h.foreign.ID, Rule: "disk_full", Message: "not yours"})
	serials := []string{"SN-1", "SN-2", "SN-OLD", "SN-B7"}

	c := h.signIn(cloud.RoleViewer)
	body := c.get("/panel/").body
	strip := readText(stripRE.FindString(body))
	if want := "Open alerts 0 CRITICAL 2 ERROR 3 WARNING 0 INFO Devices 4 all 1 ONLINE 1 OFFLINE 0 CONNECTING 0 ERROR 2 PROVISIONING 0 REBOOTING 0 UPDATING"; strip != want {
		t.Errorf("overview strip reads\n%q, want\n%q", strip, want)
	}
	if !strings.Contains(body, `<a href="/panel/alerts?severity=ERROR" data-summary-alerts="ERROR"><strong>2</strong>`) {
		t.Error("the strip's ERROR count does not link to the alerts filtered by ERROR")
	}
	rows := fleetRows(body)
	if got := rowNames(rows, serials...); got != "Press line 1,Gatehouse,Old pump,Boiler 7" {
		t.Errorf("default order: %s", got)
	}
	want := map[string]*regexp.Regexp{
		"Press line 1": regexp.MustCompile(`^Press line 1 SN-1 ONLINE ERROR 4 open 42% 62% 77% \d+ s ago IG-500`),
		"Gatehouse":    regexp.MustCompile(`^Gatehouse SN-2 PROVISIONING none — — — never IG-100`),
		"Old pump":     regexp.MustCompile(`^Old pump SN-OLD OFFLINE none — — — 3 h ago IG-100`),
		"Boiler 7":     regexp.MustCompile(`^Boiler 7 SN-B7 PROVISIONING ERROR 1 open — — — never IG-500`),
	}
	for _, r := range rows {
		for name, re := range want {
			if strings.HasPrefix(r, name+" ") && !re.MatchString(r) {
				t.Errorf("row reads %q, want %s", r, re)
			}
		}
	}
	for _, s := range []string{`<th scope="col">Alerts</th>`, `<th scope="col" class="num">CPU</th>`, `data-device-id="` + h.device.ID + `"`,
		`data-field="cpu"`, `data-field="alerts"`, `data-tick>`, `<a href="/panel/?sort=worst">worst first</a>`} {
		if !strings.Contains(body, s) {
			t.Errorf("fleet page lacks %s", s)
		}
	}
	if strings.Contains(body, "Not yours") || strings.Contains(body, h.foreign.ID) {
		t.Error("the other organization's device is on the fleet page")
	}

	// Worst first: the worst open alert, then how many, then OFFLINE
	// before the rest.
	worst := c.get("/panel/?sort=worst").body
	if got := rowNames(fleetRows(worst), serials...); got != "Press line 1,Boiler 7,Old pump,Gatehouse" {
		t.Errorf("worst first: %s", got)
	}
	for _, s := range []string{"Devices 1–4 of 4, worst first", `<input type="hidden" name="sort" value="worst">`, `href="/panel/?sort=worst&amp;status=OFFLINE"`,
		`<a href="/panel/?sort=worst" aria-current="true">worst first</a>`} {
		if !strings.Contains(worst, s) {
			t.Errorf("worst-first page lacks %s", s)
		}
	}

	// Paging keeps the sort: 52 devices, the fillers never seen.
	for i := range 48 {
		must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.org.ID, Name: fmt.Sprintf("Filler %02d", i), SerialNumber: fmt.Sprintf("F-%02d", i), Model: "IG-100"}))
	}
	first := c.get("/panel/?sort=worst").body
	if !strings.Contains(first, `href="/panel/?page=2&amp;sort=worst" rel="next"`) {
		t.Error("the next page link loses the sort")
	}
	second := c.get("/panel/?page=2&sort=worst").body
	if !strings.Contains(second, "Devices 51–52 of 52, worst first") {
		t.Error("page 2 of worst first is not devices 51–52")
	}
	seen := map[string]bool{}
	for _, m := range idRE.FindAllStringSubmatch(first+second, -1) {
		seen[m[1]] = true
	}
	if len(seen) != 52 {
		t.Errorf("two pages of worst first show %d devices, want all 52 once", len(seen))
	}
	for _, r := range fleetRows(second) {
		if !strings.HasPrefix(r, "Filler ") {
			t.Errorf("page 2 of worst first shows %q, want the fillers never seen", r)
		}
	}

	// Without Config.Glance the columns and the alerts strip are gone.
	bare := newHarness(t, open, func(c *panel.Config) { c.Glance = nil })
	if b := bare.signIn(cloud.RoleViewer).get("/panel/").body; strings.Contains(b, "Open alerts") || strings.Contains(b, `data-field="cpu"`) || !strings.Contains(b, "<strong>2</strong> all") {
		t.Error("without Glance the page shows glance columns or lacks the device counts")
	}
}

package panel_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestAuditOperations: what a signed-in member changes in the panel is
// recorded as the member's (id, email, address): the mode and forwarding
// of a device (from and to, the URL's scheme and host only), a DBC import,
// and a bulk acknowledge (one record per alert); a refused form has none.
func TestAuditOperations(t *testing.T) { stores.Run(t, testAuditOperations) }

func testAuditOperations(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	member := h.users[cloud.RoleMember]
	c := h.signIn(cloud.RoleMember)
	audit := func(f cloud.AuditFilter) []cloud.AuditRecord {
		return must(h.db.Audit().ListAudit(h.ctx, h.org.ID, f)).Records
	}
	byMember := func(t *testing.T, r cloud.AuditRecord) {
		t.Helper()
		if r.Actor.Kind != cloud.ActorUser || r.Actor.ID != member.ID || r.Actor.Name != member.Email || r.IP != "127.0.0.1" {
			t.Errorf("%s by %+v from %q, want the member %s from 127.0.0.1", r.Action, r.Actor, r.IP, member.Email)
		}
	}
	serial := "/panel/devices/" + h.device.ID + "/serial"
	if r := c.post(serial, url.Values{"mode": {"both"}, "webhookUrl": {"http://insecure.example/x"}, "webhookEnabled": {"on"}}); r.status != http.StatusBadRequest {
		t.Fatalf("refused form: %d", r.status)
	}
	if got := audit(cloud.AuditFilter{Action: "serial."}); len(got) != 0 {
		t.Fatalf("a refused form was recorded: %+v", got)
	}
	if r := c.post(serial, url.Values{"mode": {"both"}, "webhookUrl": {"https://hooks.example.com/press/s3cr3t"}, "webhookEnabled": {"on"}}); r.status != http.StatusSeeOther {
		t.Fatalf("mode and forwarding: %d %s", r.status, r.body)
	}
	recs := audit(cloud.AuditFilter{Action: cloud.ActionSerialUpdated})
	if len(recs) != 1 {
		t.Fatalf("%d serial records, want 1: %+v", len(recs), recs)
	}
	byMember(t, recs[0])
	var d struct {
		Mode       struct{ From, To string }
		Forwarding struct {
			To struct {
				WebhookEnabled bool   `json:"webhookEnabled"`
				WebhookURL     string `json:"webhookUrl"`
			}
		}
	}
	if err := json.Unmarshal(recs[0].Details, &d); err != nil || d.Mode.From != "managed" || d.Mode.To != "both" ||
		!d.Forwarding.To.WebhookEnabled || d.Forwarding.To.WebhookURL != "https://hooks.example.com" || strings.Contains(string(recs[0].Details), "s3cr3t") {
		t.Errorf("details %s (%v)", recs[0].Details, err)
	}
	if recs[0].Target != (cloud.AuditTarget{Kind: cloud.TargetSerial, ID: h.device.ID}) {
		t.Errorf("target %+v", recs[0].Target)
	}

	dbc := "/panel/devices/" + h.device.ID + "/channels/canfd-1/dbc"
	if r := c.upload(dbc, nil, upload{Field: "dbc", Name: "press.dbc", Content: []byte(testDBC)}); r.status != http.StatusSeeOther {
		t.Fatalf("DBC import: %d", r.status)
	}
	recs = audit(cloud.AuditFilter{Action: "channel."})
	if len(recs) != 1 || recs[0].Action != cloud.ActionPointsImported || recs[0].Target.ID != h.device.ID+"/canfd-1" ||
		!strings.Contains(string(recs[0].Details), `"file":"press.dbc"`) || !strings.Contains(string(recs[0].Details), `"points":2`) {
		t.Fatalf("DBC import records %+v", recs)
	}
	byMember(t, recs[0])

	if r := c.post("/panel/alerts/acknowledge", url.Values{"id": {h.alerts[0].ID, h.alerts[1].ID}}); r.status != http.StatusSeeOther {
		t.Fatalf("bulk acknowledge: %d", r.status)
	}
	recs = audit(cloud.AuditFilter{Action: cloud.ActionAlertAcknowledged})
	if len(recs) != 2 {
		t.Fatalf("%d records of a bulk acknowledge of 2 alerts: %+v", len(recs), recs)
	}
	for _, r := range recs {
		byMember(t, r)
		if r.Target.ID != h.alerts[0].ID && r.Target.ID != h.alerts[1].ID {
			t.Errorf("target %+v", r.Target)
		}
	}
}

package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestAuditChannelPut: a PUT of a channel configuration with an API key is
// one audit record of the key (its id and name) from the client's
// address, naming the channel, its kind and what changed; a refused PUT
// and a read have none, and the other organization sees nothing.
func TestAuditChannelPut(t *testing.T) {
	t.Parallel()
	stores.Run(t, testAuditChannelPut)
}

func testAuditChannelPut(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	ctx := context.Background()
	k, full, err := e.s.Store.CreateKey(ctx, e.orgA.ID, "line config", cloud.AllScopes, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	d := e.device(e.orgA.ID, "IG-500")
	path := "/api/v1/public/devices/" + d.ID + "/serial/channels/rs485-1"
	bad := rs485Body()
	bad["baudRate"] = 14400
	e.req(http.MethodPut, path, full, bad).want(t, http.StatusBadRequest, cloud.EINVALID)
	e.get("/devices/"+d.ID+"/serial/channels/rs485-1", full).want(t, http.StatusOK, "")
	audit := func(orgID string) []cloud.AuditRecord {
		p, err := e.s.Store.Audit().ListAudit(ctx, orgID, cloud.AuditFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Records
	}
	if got := audit(e.orgA.ID); len(got) != 0 {
		t.Fatalf("a refused PUT and a read were recorded: %+v", got)
	}
	before := time.Now().Add(-time.Second)
	e.req(http.MethodPut, path, full, rs485Body()).want(t, http.StatusOK, "")
	recs := audit(e.orgA.ID)
	if len(recs) != 1 {
		t.Fatalf("%d records of one PUT, want 1: %+v", len(recs), recs)
	}
	r := recs[0]
	if r.Action != cloud.ActionChannelConfigured || r.Actor.Kind != cloud.ActorAPIKey || r.Actor.ID != k.ID || r.Actor.Name != "line config" ||
		r.IP != "127.0.0.1" || r.Target != (cloud.AuditTarget{Kind: cloud.TargetChannel, ID: d.ID + "/rs485-1"}) || r.At.Before(before) || r.At.After(time.Now()) {
		t.Errorf("record %+v", r)
	}
	var det struct {
		Kind    string   `json:"kind"`
		Changed []string `json:"changed"`
	}
	if err := json.Unmarshal(r.Details, &det); err != nil || det.Kind != "rs485" || len(det.Changed) == 0 {
		t.Errorf("details %s (%v)", r.Details, err)
	}
	if got := audit(e.orgB.ID); len(got) != 0 {
		t.Errorf("the other organization sees %+v", got)
	}
}

package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestAuditPatchDevice: PATCH /devices/{id} with a key is one
// device.updated record by that key (its id and name) from the client's
// address, with each field changed from and to and never the key; a GET
// and a refused PATCH write none, and the other organization sees none.
func TestAuditPatchDevice(t *testing.T) {
	t.Parallel()
	stores.Run(t, testAuditPatchDevice)
}

func testAuditPatchDevice(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	path := "/api/v1/public/devices/" + d.ID
	from := e.now()
	e.req(http.MethodPatch, path, e.keyA, `{"name":"Press line 1","tags":["line-1"]}`).want(t, http.StatusOK, "")
	e.get("/devices/"+d.ID, e.keyA).want(t, http.StatusOK, "")
	e.req(http.MethodPatch, path, e.keyA, `{"name":""}`).want(t, http.StatusBadRequest, cloud.EINVALID)
	e.req(http.MethodPatch, path, e.keyB, `{"name":"not yours"}`).want(t, http.StatusNotFound, cloud.ENOTFOUND)

	page, err := e.s.Store.Audit().ListAudit(context.Background(), e.orgA.ID, cloud.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 1 {
		t.Fatalf("records: %+v, want the one PATCH", page.Records)
	}
	r := page.Records[0]
	keyID, _, _ := apikey.Parse(e.keyA)
	if r.Action != cloud.ActionDeviceUpdated || r.Target != (cloud.AuditTarget{Kind: cloud.TargetDevice, ID: d.ID}) ||
		r.Actor.Kind != cloud.ActorAPIKey || r.Actor.ID != keyID || r.Actor.Name != "test key" || r.IP != "127.0.0.1" {
		t.Errorf("record %+v, want device.updated of %s by key %s from 127.0.0.1", r, d.ID, keyID)
	}
	if r.At.Before(from.Truncate(time.Millisecond)) || r.At.After(e.now()) {
		t.Errorf("at %v, not within the request", r.At)
	}
	if want := `{"name":{"from":"` + d.Name + `","to":"Press line 1"},"tags":{"from":[],"to":["line-1"]}}`; string(r.Details) != want {
		t.Errorf("details %s, want %s", r.Details, want)
	}
	if strings.Contains(string(r.Details), "svc_sk_") {
		t.Errorf("details hold a key: %s", r.Details)
	}
	if page, _ := e.s.Store.Audit().ListAudit(context.Background(), e.orgB.ID, cloud.AuditFilter{}); len(page.Records) != 0 {
		t.Errorf("the other organization holds %+v", page.Records)
	}
}

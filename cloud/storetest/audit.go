package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
)

// Actors the audit cases act as, one per door.
var (
	auditUser = cloud.Actor{Kind: cloud.ActorUser, ID: "usr-audit", Name: "ana@example.com", IP: "192.0.2.7"}
	auditKey  = cloud.Actor{Kind: cloud.ActorAPIKey, ID: "key-audit", Name: "ci deploys", IP: "2001:db8::1"}
	auditCLI  = cloud.Actor{Kind: cloud.ActorCLI, ID: "root", Name: "root@relay-1"}
)

// acting is e whose changes are a's (the context a door gives them).
func (e *env) acting(a cloud.Actor) *env {
	c := *e
	c.ctx = cloud.WithActor(e.ctx, a)
	return &c
}

// auditOf reads every record of the organization f selects, newest first,
// page by page.
func (e *env) auditOf(orgID string, f cloud.AuditFilter) []cloud.AuditRecord {
	e.t.Helper()
	var out []cloud.AuditRecord
	for {
		p, err := e.Store.Audit().ListAudit(e.ctx, orgID, f)
		if err != nil {
			e.t.Fatalf("ListAudit(%s, %+v): %v", orgID, f, err)
		}
		out = append(out, p.Records...)
		if p.Next == "" {
			return out
		}
		f.Cursor = p.Next
	}
}

// wantAudit checks that the organization holds exactly one record of
// action about target, made by a at the store's clock, and returns it
// with its details decoded.
func (e *env) wantAudit(orgID, action string, a cloud.Actor, target cloud.AuditTarget) (cloud.AuditRecord, map[string]any) {
	e.t.Helper()
	recs := e.auditOf(orgID, cloud.AuditFilter{Action: action, TargetKind: target.Kind, TargetID: target.ID})
	if len(recs) != 1 {
		e.t.Fatalf("audit records of %s on %+v: %d, want 1 (%+v)", action, target, len(recs), recs)
	}
	r := recs[0]
	if r.Actor.Kind != a.Kind || r.Actor.ID != a.ID || r.Actor.Name != a.Name || r.IP != a.IP {
		e.t.Errorf("%s: actor %+v ip %q, want %+v ip %q", action, r.Actor, r.IP, a, a.IP)
	}
	if !r.At.Equal(e.clock.Now().Truncate(time.Millisecond)) {
		e.t.Errorf("%s: at %v, want the store's clock %v", action, r.At, e.clock.Now())
	}
	var d map[string]any
	if err := json.Unmarshal(r.Details, &d); err != nil {
		e.t.Errorf("%s: details %q are no JSON object: %v", action, r.Details, err)
	}
	return r, d
}

// testAuditLog: a record is written only for an actor, with the actor, the
// target, the address, the time to the millisecond and the details; an
// organization sees only its own; pages follow each other newest first,
// filters select by time, actor, action (also a kind's prefix) and target;
// a bad cursor is refused; the sweep deletes only the old.
func testAuditLog(t *testing.T, open Opener) {
	e := newEnv(t, open)
	acme, other := e.org("acme"), e.org("other")
	target := cloud.AuditTarget{Kind: cloud.TargetKey, ID: "k1"}
	if err := e.Store.Audit().RecordAudit(e.ctx, acme.ID, cloud.ActionKeyCreated, target, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.auditOf(acme.ID, cloud.AuditFilter{}); len(got) != 0 {
		t.Fatalf("a change without an actor was recorded: %+v", got)
	}
	e.clock.Add(1500 * time.Microsecond)
	if err := e.acting(auditUser).Store.Audit().RecordAudit(e.acting(auditUser).ctx, acme.ID, cloud.ActionKeyCreated, target,
		map[string]any{"name": "ci", "scopes": []string{"devices:read"}}); err != nil {
		t.Fatal(err)
	}
	_, d := e.wantAudit(acme.ID, cloud.ActionKeyCreated, auditUser, target)
	if d["name"] != "ci" {
		t.Errorf("details %v, want the name", d)
	}
	if got := e.auditOf(other.ID, cloud.AuditFilter{}); len(got) != 0 {
		t.Fatalf("another organization reads acme's records: %+v", got)
	}
	start := e.clock.Now()
	for i, a := range []cloud.Actor{auditKey, auditCLI, auditKey, auditUser, auditKey} {
		e.clock.Add(time.Second)
		ea := e.acting(a)
		action := cloud.ActionDeviceAdded
		if i%2 == 1 {
			action = cloud.ActionDeviceRevoked
		}
		if err := ea.Store.Audit().RecordAudit(ea.ctx, acme.ID, action, cloud.AuditTarget{Kind: cloud.TargetDevice, ID: "d" + string(rune('0'+i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	all := e.auditOf(acme.ID, cloud.AuditFilter{Limit: 2})
	if len(all) != 6 {
		t.Fatalf("pages of 2 hold %d records, want 6", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].At.After(all[i-1].At) {
			t.Fatalf("record %d is newer than %d: not newest first", i, i-1)
		}
	}
	if all[0].Target.ID != "d4" || all[5].Action != cloud.ActionKeyCreated {
		t.Errorf("newest %+v, oldest %+v", all[0], all[5])
	}
	for _, c := range []struct {
		f    cloud.AuditFilter
		want int
	}{
		{cloud.AuditFilter{ActorKind: cloud.ActorAPIKey}, 3},
		{cloud.AuditFilter{ActorKind: cloud.ActorCLI, ActorID: "root"}, 1},
		{cloud.AuditFilter{Action: "device."}, 5},
		{cloud.AuditFilter{Action: cloud.ActionDeviceRevoked}, 2},
		{cloud.AuditFilter{Action: "dev"}, 0},
		{cloud.AuditFilter{TargetKind: cloud.TargetDevice, TargetID: "d3"}, 1},
		{cloud.AuditFilter{Since: start.Add(2 * time.Second)}, 4},
		{cloud.AuditFilter{Since: start.Add(2 * time.Second), Until: start.Add(4 * time.Second)}, 2},
	} {
		if got := e.auditOf(acme.ID, c.f); len(got) != c.want {
			t.Errorf("filter %+v: %d records, want %d", c.f, len(got), c.want)
		}
	}
	for _, bad := range []string{"x", "12.", "-1.abc", "12.not an id"} {
		if _, err := e.Store.Audit().ListAudit(e.ctx, acme.ID, cloud.AuditFilter{Cursor: bad}); cloud.ErrorCode(err) != cloud.ECURSOR {
			t.Errorf("cursor %q: %v, want %s", bad, err, cloud.ECURSOR)
		}
	}
	n, err := e.Store.Audit().SweepAudit(e.ctx, start.Add(2500*time.Millisecond))
	if err != nil || n != 3 {
		t.Fatalf("SweepAudit: %d, %v; want the 3 records before the cut", n, err)
	}
	if got := e.auditOf(acme.ID, cloud.AuditFilter{}); len(got) != 3 {
		t.Fatalf("after the sweep %d records, want 3", len(got))
	}
}

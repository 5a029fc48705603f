package api_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
)

func TestListAlerts(t *testing.T) {
	t.Parallel()
	stores.Run(t, testListAlerts)
}

func testListAlerts(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d1 := e.device(e.orgA.ID, "IG-500")
	d2 := e.device(e.orgA.ID, "IG-500")
	base := time.Now().Add(-time.Hour)
	a1 := e.alert(d1.ID, "high_cpu", resource.AlertActive, base)
	a2 := e.alert(d2.ID, "high_cpu", resource.AlertActive, base.Add(time.Minute))
	a3 := e.alert(d1.ID, "device_offline", resource.AlertAcknowledged, base.Add(2*time.Minute))
	a4 := e.alert(d1.ID, "disk_full", resource.AlertResolved, base.Add(3*time.Minute))

	ids := func(r resp) []string {
		var l resource.List[resource.Alert]
		r.decode(t, &l)
		var out []string
		for _, a := range l.Data {
			out = append(out, a.ID)
		}
		return out
	}
	// Default: ACTIVE only, newest first.
	r := e.get("/alerts", e.keyA)
	r.want(t, http.StatusOK, "")
	if got := ids(r); len(got) != 2 || got[0] != a2.ID || got[1] != a1.ID {
		t.Fatalf("default list %v, want [%s %s]", got, a2.ID, a1.ID)
	}
	if !strings.Contains(string(r.body), `"payload":{"value":97.5}`) {
		t.Fatalf("payload missing: %s", r.body)
	}
	if got := ids(e.get("/alerts?state=ACKNOWLEDGED", e.keyA)); len(got) != 1 || got[0] != a3.ID {
		t.Fatalf("ACKNOWLEDGED: %v", got)
	}
	if got := ids(e.get("/alerts?state=RESOLVED", e.keyA)); len(got) != 1 || got[0] != a4.ID {
		t.Fatalf("RESOLVED: %v", got)
	}
	if got := ids(e.get("/alerts?deviceId="+d2.ID, e.keyA)); len(got) != 1 || got[0] != a2.ID {
		t.Fatalf("deviceId filter: %v", got)
	}
	sev := string(a1.Severity)
	if got := ids(e.get("/alerts?severity="+sev, e.keyA)); len(got) != 2 {
		t.Fatalf("severity=%s: %v", sev, got)
	}
	// Pagination with limit=1.
	r = e.get("/alerts?limit=1", e.keyA)
	var l resource.List[resource.Alert]
	r.decode(t, &l)
	if len(l.Data) != 1 || !l.Pagination.HasMore {
		t.Fatalf("limit=1: %s", r.body)
	}
	if got := ids(e.get("/alerts?limit=1&cursor="+*l.Pagination.NextCursor, e.keyA)); len(got) != 1 || got[0] != a1.ID {
		t.Fatalf("second page %v", got)
	}
	// Org B sees none of them.
	if got := ids(e.get("/alerts?state=ACKNOWLEDGED", e.keyB)); len(got) != 0 {
		t.Fatalf("org B sees %v", got)
	}
	e.get("/alerts?cursor="+a1.ID, e.keyB).want(t, http.StatusBadRequest, cloud.ECURSOR)
}

// TestAlertStateTable walks the spec's state table cell by cell over HTTP.
func TestAlertStateTable(t *testing.T) {
	t.Parallel()
	stores.Run(t, testAlertStateTable)
}

func testAlertStateTable(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	act := func(id, action string) resp {
		return e.req(http.MethodPost, "/api/v1/public/alerts/"+id+"/"+action, e.keyA, nil)
	}
	decode := func(r resp) resource.Alert {
		var one resource.One[resource.Alert]
		r.decode(t, &one)
		return one.Data
	}
	rules := []string{"high_cpu", "high_mem", "disk_full", "high_temp", "device_offline", "vpn_down"}
	n := 0
	fresh := func(state resource.AlertState) resource.Alert {
		d := e.device(e.orgA.ID, "IG-500")
		n++
		return e.alert(d.ID, rules[n%len(rules)], state, time.Now().Add(-time.Minute))
	}

	// Each action on an ACTIVE alert moves it to its state and sets its
	// timestamp (resolve skips ACKNOWLEDGED: no acknowledgedAt); the same
	// action again answers the unchanged row (the first timestamp kept).
	for _, c := range []struct {
		action       string
		state        resource.AlertState
		stamp, other func(resource.Alert) *resource.Time
	}{
		{"acknowledge", resource.AlertAcknowledged, acknowledgedAt, resolvedAt},
		{"resolve", resource.AlertResolved, resolvedAt, acknowledgedAt},
	} {
		t.Run("ACTIVE "+c.action+" -> "+string(c.state), func(t *testing.T) {
			a := fresh(resource.AlertActive)
			r := act(a.ID, c.action)
			r.want(t, http.StatusOK, "")
			got := decode(r)
			if got.State != c.state || c.stamp(got) == nil || c.other(got) != nil {
				t.Fatalf("%s", r.body)
			}
		})
		t.Run(string(c.state)+" "+c.action+" -> unchanged row", func(t *testing.T) {
			a := fresh(resource.AlertActive)
			first := decode(act(a.ID, c.action))
			time.Sleep(5 * time.Millisecond)
			r := act(a.ID, c.action)
			r.want(t, http.StatusOK, "")
			again := decode(r)
			if again.State != c.state || !c.stamp(again).Equal(c.stamp(first).Time) {
				t.Fatalf("idempotent %s changed the row: %v then %v", c.action, c.stamp(first), c.stamp(again))
			}
		})
	}
	t.Run("RESOLVED acknowledge -> 409 alert_already_resolved", func(t *testing.T) {
		a := fresh(resource.AlertActive)
		res := decode(act(a.ID, "resolve"))
		act(a.ID, "acknowledge").want(t, http.StatusConflict, cloud.ERESOLVED)
		// unchanged
		var l resource.List[resource.Alert]
		e.get("/alerts?state=RESOLVED&deviceId="+a.DeviceID, e.keyA).decode(t, &l)
		if len(l.Data) != 1 || l.Data[0].AcknowledgedAt != nil || !l.Data[0].ResolvedAt.Equal(res.ResolvedAt.Time) {
			t.Fatalf("resolved alert changed: %+v", l.Data)
		}
	})
	t.Run("ACKNOWLEDGED resolve -> RESOLVED, acknowledgedAt kept", func(t *testing.T) {
		a := fresh(resource.AlertActive)
		ack := decode(act(a.ID, "acknowledge"))
		time.Sleep(5 * time.Millisecond)
		got := decode(act(a.ID, "resolve"))
		if got.State != resource.AlertResolved || got.ResolvedAt == nil || got.AcknowledgedAt == nil || !got.AcknowledgedAt.Equal(ack.AcknowledgedAt.Time) {
			t.Fatalf("%+v", got)
		}
	})
	t.Run("unknown alert -> 404", func(t *testing.T) {
		act("nosuchalert0000000000000", "acknowledge").want(t, http.StatusNotFound, cloud.ENOTFOUND)
		act("nosuchalert0000000000000", "resolve").want(t, http.StatusNotFound, cloud.ENOTFOUND)
	})
}

func acknowledgedAt(a resource.Alert) *resource.Time { return a.AcknowledgedAt }
func resolvedAt(a resource.Alert) *resource.Time     { return a.ResolvedAt }

// TestConcurrentAckResolve fires 50 concurrent acknowledge and resolve calls
// at one alert: every call answers 200 or 409 alert_already_resolved, the
// alert ends RESOLVED with one resolvedAt, and every 200 resolve returns
// that same resolvedAt.
func TestConcurrentAckResolve(t *testing.T) {
	t.Parallel()
	stores.Run(t, testConcurrentAckResolve)
}

func testConcurrentAckResolve(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	a := e.alert(d.ID, "high_cpu", resource.AlertActive, time.Now().Add(-time.Minute))
	type result struct {
		action string
		r      resp
	}
	results := make(chan result, 50)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 50; i++ {
		action := "acknowledge"
		if i%2 == 1 {
			action = "resolve"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results <- result{action, e.req(http.MethodPost, "/api/v1/public/alerts/"+a.ID+"/"+action, e.keyA, nil)}
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	var resolvedAt *resource.Time
	var ackAt *resource.Time
	for res := range results {
		switch {
		case res.r.status == http.StatusOK:
			var one resource.One[resource.Alert]
			res.r.decode(t, &one)
			if res.action == "resolve" {
				if one.Data.State != resource.AlertResolved || one.Data.ResolvedAt == nil {
					t.Fatalf("resolve answered %s", res.r.body)
				}
				if resolvedAt == nil {
					resolvedAt = one.Data.ResolvedAt
				} else if !resolvedAt.Equal(one.Data.ResolvedAt.Time) {
					t.Fatalf("two resolvedAt values: %v and %v", resolvedAt, one.Data.ResolvedAt)
				}
			} else {
				if one.Data.State != resource.AlertAcknowledged || one.Data.AcknowledgedAt == nil {
					t.Fatalf("acknowledge answered %s", res.r.body)
				}
				if ackAt == nil {
					ackAt = one.Data.AcknowledgedAt
				} else if !ackAt.Equal(one.Data.AcknowledgedAt.Time) {
					t.Fatalf("two acknowledgedAt values")
				}
			}
		case res.r.status == http.StatusConflict && res.action == "acknowledge" && res.r.errCode() == cloud.ERESOLVED:
		default:
			t.Fatalf("%s answered %d %s", res.action, res.r.status, res.r.body)
		}
	}
	var l resource.List[resource.Alert]
	e.get("/alerts?state=RESOLVED&deviceId="+d.ID, e.keyA).decode(t, &l)
	if len(l.Data) != 1 || l.Data[0].ResolvedAt == nil || !l.Data[0].ResolvedAt.Equal(resolvedAt.Time) {
		t.Fatalf("final alert: %+v", l.Data)
	}
	if ackAt != nil && (l.Data[0].AcknowledgedAt == nil || !l.Data[0].AcknowledgedAt.Equal(ackAt.Time)) {
		t.Fatalf("acknowledgedAt lost: %+v", l.Data[0])
	}
}

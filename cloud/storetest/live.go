package storetest

import (
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// The panel's live updates read cloud.LiveState from the store and compare
// reads: each change a panel shows must move it, on a second handle on the
// store too (another relay, the admin CLI), and another organization's
// devices never appear in it.
func testLiveState(t *testing.T, open Opener) {
	e, e2, a := newTwoRelays(t, open)
	o := a.OrgID
	b := e.device(o, "IG-500")
	foreign := e.device(e.org("other").ID, "IG-500")
	read := func(watched ...string) cloud.LiveState {
		t.Helper()
		st, err := e.Panel.LiveState(e.ctx, o, watched)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := read(a.ID, foreign.ID)
	if len(st.Devices) != 2 || st.Devices[a.ID].Status != resource.StatusProvisioning || !st.Devices[a.ID].LastSeen.IsZero() || len(st.OpenAlerts) != 0 {
		t.Fatalf("a new organization's state: %+v", st)
	}
	if _, ok := st.Devices[foreign.ID]; ok {
		t.Error("another organization's device is in the state")
	}
	if _, ok := st.Watched[foreign.ID]; ok {
		t.Error("another organization's device is watched")
	}
	if w, ok := st.Watched[a.ID]; !ok || w.Channels != 0 || w.NewestEvent != "" {
		t.Errorf("a silent device watched: %+v, %v", w, ok)
	}

	// A heartbeat through the second handle moves status and last seen.
	e.clock.Add(time.Second)
	session := e2.online(a, time.Minute)
	at := e.clock.Now().Add(time.Second)
	e2.report(a, session, at, protocol.ChannelState{ID: "gpio-1", Available: true, Live: "1"})
	st = read(a.ID)
	if d := st.Devices[a.ID]; d.Status != resource.StatusOnline || !d.LastSeen.Equal(at.Truncate(time.Millisecond)) {
		t.Errorf("after a heartbeat: %+v, want ONLINE at %v", d, at)
	}
	if st.Devices[b.ID].Status != resource.StatusProvisioning {
		t.Errorf("the other device moved: %+v", st.Devices[b.ID])
	}
	h1 := st.Watched[a.ID].Channels
	if h1 == 0 {
		t.Error("reported channels left no fingerprint")
	}

	// Channel values: a new live value changes the fingerprint, the same
	// report again does not.
	e2.report(a, session, at.Add(time.Second), protocol.ChannelState{ID: "gpio-1", Available: true, Live: "0"})
	h2 := read(a.ID).Watched[a.ID].Channels
	e2.report(a, session, at.Add(2*time.Second), protocol.ChannelState{ID: "gpio-1", Available: true, Live: "0"})
	if h3 := read(a.ID).Watched[a.ID].Channels; h2 == h1 || h3 != h2 {
		t.Errorf("channel fingerprints %x, %x, %x: want the second to differ and the third to equal it", h1, h2, h3)
	}
	if read().Watched[a.ID] != (cloud.LiveWatched{}) {
		t.Error("an unwatched device has watched state")
	}

	// Events: the newest is named.
	e2.clock.Add(10 * time.Second)
	ev := e2.event(a, "custom.thing", resource.SeverityInfo)
	if got := read(a.ID).Watched[a.ID].NewestEvent; got != ev.ID {
		t.Errorf("newest event %q, want %q", got, ev.ID)
	}

	// Alerts: open, acknowledged, resolved.
	al := e2.alert(b, alert.RuleHighCPU, resource.AlertActive)
	if got := read().OpenAlerts; len(got) != 1 || got[al.ID] != (cloud.LiveAlert{DeviceID: b.ID, State: resource.AlertActive, Severity: al.Severity}) {
		t.Errorf("open alerts %+v", got)
	}
	if _, err := e2.Store.Alerts().Acknowledge(e2.ctx, o, al.ID); err != nil {
		t.Fatal(err)
	}
	if got := read().OpenAlerts[al.ID].State; got != resource.AlertAcknowledged {
		t.Errorf("acknowledged alert's state %s", got)
	}
	if _, err := e2.Store.Alerts().Resolve(e2.ctx, o, al.ID); err != nil {
		t.Fatal(err)
	}
	if got := read().OpenAlerts; len(got) != 0 {
		t.Errorf("a resolved alert is open: %+v", got)
	}
	if foreignAlerts, err := e.Panel.LiveState(e.ctx, foreign.OrgID, nil); err != nil || len(foreignAlerts.OpenAlerts) != 0 || len(foreignAlerts.Devices) != 1 {
		t.Errorf("the other organization's state %+v, %v", foreignAlerts, err)
	}

	// Bounded.
	if _, err := e.Panel.LiveState(e.ctx, o, make([]string, cloud.MaxLiveWatched+1)); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("too many watched: %v", err)
	}
}

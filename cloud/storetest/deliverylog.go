package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/ids"
)

// testDeliveryLog: Settings → Webhooks' delivery log in pages of the
// newest first, older and newer by cursor, filtered by state, event and
// device (alone and together), never another organization's; a filter out
// of bounds is EINVALID and a broken cursor ECURSOR.
func testDeliveryLog(t *testing.T, open Opener) {
	e := newEnv(t, open)
	p := e.Panel
	o, other := e.org("acme"), e.org("other")
	devs := []string{ids.New(), ids.New()}
	events := []string{webhook.EventAlertOpened, webhook.EventAlertResolved, webhook.EventSignal}
	// 130 deliveries of o: device i%2, event i%3, and every fifth one failed,
	// every seventh delivered, the rest pending; 5 of other.
	var all []string // o's ids, oldest first
	var ds []*webhook.Delivery
	var atts []webhook.Attempt
	at := e.clock.Now()
	state := func(i int) cloud.DeliveryState {
		switch {
		case i%5 == 0:
			return cloud.DeliveryFailed
		case i%7 == 0:
			return cloud.DeliveryDelivered
		}
		return cloud.DeliveryPending
	}
	for i := range 130 {
		d := delivery(fmt.Sprintf("dlv%03d", i), o.ID, devs[i%2], at.Add(time.Duration(i)*time.Second))
		d.Event = events[i%3]
		ds, all = append(ds, d), append(all, d.ID)
		if st := state(i); st != cloud.DeliveryPending {
			atts = append(atts, webhook.Attempt{DeliveryID: d.ID, Number: 1, At: d.CreatedAt, StatusCode: map[cloud.DeliveryState]int{cloud.DeliveryFailed: 410, cloud.DeliveryDelivered: 200}[st], State: st})
		}
	}
	for i := range 5 {
		ds = append(ds, delivery(fmt.Sprintf("oth%d", i), other.ID, devs[0], at))
	}
	if err := e.Outbox.WriteOutbox(e.ctx, ds, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Outbox.WriteOutbox(e.ctx, nil, atts); err != nil {
		t.Fatal(err)
	}
	idsOf := func(pg cloud.DeliveryLogPage) []string {
		var out []string
		for _, d := range pg.Deliveries {
			out = append(out, d.ID)
		}
		return out
	}
	newest := func(want func(i int) bool, n int) []string { // the n newest of o's that want holds for, newest first
		var out []string
		for i := len(all) - 1; i >= 0 && len(out) < n; i-- {
			if want(i) {
				out = append(out, all[i])
			}
		}
		return out
	}
	page := func(f cloud.DeliveryFilter) cloud.DeliveryLogPage {
		t.Helper()
		pg, err := p.DeliveryLog(e.ctx, o.ID, f)
		if err != nil {
			t.Fatalf("DeliveryLog(%+v): %v", f, err)
		}
		return pg
	}

	// Unfiltered: 50, 50, 30; back again by Newer.
	first := page(cloud.DeliveryFilter{})
	if got, want := idsOf(first), newest(func(int) bool { return true }, 50); !slices.Equal(got, want) || first.Newer != 0 || first.Older == 0 {
		t.Fatalf("newest page: %v (newer %d, older %d), want %v", got, first.Newer, first.Older, want)
	}
	if first.Deliveries[0].State != string(state(129)) || first.Deliveries[0].Event != events[129%3] || first.Deliveries[0].DeviceID != devs[1] {
		t.Errorf("newest delivery: %+v", first.Deliveries[0])
	}
	second := page(cloud.DeliveryFilter{Before: first.Older})
	third := page(cloud.DeliveryFilter{Before: second.Older})
	if got := append(append(idsOf(first), idsOf(second)...), idsOf(third)...); !slices.Equal(got, newest(func(int) bool { return true }, 200)) {
		t.Errorf("three pages: %v", got)
	}
	if len(third.Deliveries) != 30 || third.Older != 0 || third.Newer == 0 || second.Newer == 0 {
		t.Errorf("last page: %d deliveries, older %d newer %d; second's newer %d", len(third.Deliveries), third.Older, third.Newer, second.Newer)
	}
	if back := page(cloud.DeliveryFilter{After: third.Newer}); !slices.Equal(idsOf(back), idsOf(second)) || back.Older != second.Older || back.Newer != second.Newer {
		t.Errorf("newer than the last page: %v (older %d newer %d), want the second page", idsOf(back), back.Older, back.Newer)
	}
	if back := page(cloud.DeliveryFilter{After: second.Newer}); !slices.Equal(idsOf(back), idsOf(first)) || back.Newer != 0 {
		t.Errorf("newer than the second page: %v (newer %d), want the first", idsOf(back), back.Newer)
	}

	// Filters, alone and together, paged alike.
	for _, c := range []struct {
		f    cloud.DeliveryFilter
		want func(i int) bool
	}{
		{cloud.DeliveryFilter{State: cloud.DeliveryFailed}, func(i int) bool { return state(i) == cloud.DeliveryFailed }},
		{cloud.DeliveryFilter{Event: webhook.EventAlertResolved}, func(i int) bool { return i%3 == 1 }},
		{cloud.DeliveryFilter{DeviceID: devs[0]}, func(i int) bool { return i%2 == 0 }},
		{cloud.DeliveryFilter{DeviceID: devs[1], State: cloud.DeliveryPending, Event: webhook.EventSignal, Limit: 5}, func(i int) bool {
			return i%2 == 1 && state(i) == cloud.DeliveryPending && i%3 == 2
		}},
	} {
		var got []string
		f := c.f
		for n := 0; ; n++ {
			pg := page(f)
			got = append(got, idsOf(pg)...)
			if pg.Older == 0 || n > 20 {
				break
			}
			f.Before = pg.Older
		}
		if want := newest(c.want, 200); !slices.Equal(got, want) {
			t.Errorf("filter %+v: %v, want %v", c.f, got, want)
		}
	}
	if pg := page(cloud.DeliveryFilter{Event: "alert.reminder"}); len(pg.Deliveries) != 0 || pg.Older != 0 {
		t.Errorf("an event with no delivery: %v", idsOf(pg))
	}
	if pg, _ := p.DeliveryLog(e.ctx, other.ID, cloud.DeliveryFilter{}); len(pg.Deliveries) != 5 {
		t.Errorf("the other organization's log: %v", idsOf(pg))
	}

	// Bounds.
	for _, c := range []struct {
		f    cloud.DeliveryFilter
		code string
	}{
		{cloud.DeliveryFilter{State: "lost"}, cloud.EINVALID},
		{cloud.DeliveryFilter{Event: "Alert Opened"}, cloud.EINVALID},
		{cloud.DeliveryFilter{Event: "a." + string(make([]byte, 70))}, cloud.EINVALID},
		{cloud.DeliveryFilter{DeviceID: "not an id"}, cloud.EINVALID},
		{cloud.DeliveryFilter{Limit: cloud.MaxDeliveryPage + 1}, cloud.EINVALID},
		{cloud.DeliveryFilter{Before: 5, After: 3}, cloud.ECURSOR},
		{cloud.DeliveryFilter{Before: -1}, cloud.ECURSOR},
	} {
		if _, err := p.DeliveryLog(e.ctx, o.ID, c.f); cloud.ErrorCode(err) != c.code {
			t.Errorf("DeliveryLog(%+v): %v, want %s", c.f, err, c.code)
		}
	}
}

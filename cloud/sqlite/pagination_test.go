package sqlite_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/resource"
)

// tickClock advances one millisecond every third call, so that many rows
// share a created_at and the id tie-break is exercised.
type tickClock struct {
	base time.Time
	n    atomic.Int64
}

func (c *tickClock) Now() time.Time {
	return c.base.Add(time.Duration(c.n.Add(1)/3) * time.Millisecond)
}

// walk fetches every page of a list with limit and returns the ids in order.
func walk(t *testing.T, limit int, page func(cursor string) (ids []string, p resource.Pagination, err error)) []string {
	t.Helper()
	var all []string
	cursor := ""
	for i := 0; ; i++ {
		ids, p, err := page(cursor)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if len(ids) > limit {
			t.Fatalf("page %d has %d items, limit %d", i, len(ids), limit)
		}
		all = append(all, ids...)
		if !p.HasMore {
			if p.NextCursor != nil {
				t.Fatalf("page %d: hasMore false with nextCursor %q", i, *p.NextCursor)
			}
			return all
		}
		if p.NextCursor == nil || *p.NextCursor != ids[len(ids)-1] {
			t.Fatalf("page %d: nextCursor %v is not the last item's id", i, p.NextCursor)
		}
		cursor = *p.NextCursor
	}
}

// exactlyOnce checks that every id of want occurs exactly once in got.
func exactlyOnce(t *testing.T, got, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("pre-existing item %s seen %d times", id, seen[id])
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("item %s seen %d times", id, n)
		}
	}
}

// during runs insert in a loop until the returned stop is called.
func during(t *testing.T, insert func(i int) error) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if err := insert(i); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func TestDevicePaginationUnderInserts(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	clock := &tickClock{base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	db.Now = clock.Now
	org := MustOrg(t, db, "acme")
	other := MustOrg(t, db, "other")
	var want []string
	for i := 0; i < 157; i++ {
		d, _, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: org.ID, Name: "d", SerialNumber: fmt.Sprintf("A%04d", i), Model: "IG-500"})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, d.ID)
		MustDevice(t, db, other.ID, "IG-100")
	}
	svc := sqlite.NewDeviceService(db)
	stop := during(t, func(i int) error {
		_, _, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: org.ID, Name: "new", SerialNumber: fmt.Sprintf("N%05d", i), Model: "IG-100"})
		return err
	})
	var listed []resource.Device
	got := walk(t, 10, func(cursor string) ([]string, resource.Pagination, error) {
		l, err := svc.ListDevices(ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 10, Cursor: cursor}})
		var ids []string
		for _, d := range l.Data {
			ids = append(ids, d.ID)
		}
		listed = append(listed, l.Data...)
		return ids, l.Pagination, err
	})
	stop()
	exactlyOnce(t, got, want)
	// Oldest first: created_at, then id.
	for i := 1; i < len(listed); i++ {
		a, b := listed[i-1], listed[i]
		if b.CreatedAt.Before(a.CreatedAt.Time) || b.CreatedAt.Equal(a.CreatedAt.Time) && b.ID < a.ID {
			t.Fatalf("device %d (%s %v) listed after %s %v: not oldest first", i, b.ID, b.CreatedAt, a.ID, a.CreatedAt)
		}
	}
	// Only the organization's devices.
	all, _ := svc.ListDevices(ctx, other.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 100}})
	for _, d := range all.Data {
		for _, id := range got {
			if d.ID == id {
				t.Fatalf("device %s of another organization listed", id)
			}
		}
	}
}

func TestDeviceStatusFilter(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	clock := &tickClock{base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	db.Now = func() time.Time { return clock.Now().Add(time.Duration(clock.n.Load()) * time.Millisecond) } // strictly increasing
	org := MustOrg(t, db, "acme")
	svc := sqlite.NewDeviceService(db)
	var online []string
	for i := 0; i < 9; i++ {
		d := MustDevice(t, db, org.ID, "IG-500")
		if i%3 == 0 {
			if _, err := db.SetDeviceStatus(ctx, d.ID, resource.StatusOnline, time.Now()); err != nil {
				t.Fatal(err)
			}
			online = append(online, d.ID)
		}
	}
	l, err := svc.ListDevices(ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 2}, Status: resource.StatusOnline})
	if err != nil || len(l.Data) != 2 || !l.Pagination.HasMore || l.Data[0].ID != online[0] || l.Data[0].LastSeen == nil {
		t.Fatalf("page 1 = %+v, %v", l, err)
	}
	l, err = svc.ListDevices(ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 2, Cursor: *l.Pagination.NextCursor}, Status: resource.StatusOnline})
	if err != nil || len(l.Data) != 1 || l.Pagination.HasMore || l.Data[0].ID != online[2] {
		t.Fatalf("page 2 = %+v, %v", l, err)
	}
	// Exactly limit items left: hasMore must be false, not an empty extra page.
	l, err = svc.ListDevices(ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 3}, Status: resource.StatusOnline})
	if err != nil || len(l.Data) != 3 || l.Pagination.HasMore {
		t.Fatalf("exact page = %+v, %v", l, err)
	}
}

func TestEventPaginationUnderInserts(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	clock := &tickClock{base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	db.Now = clock.Now
	org := MustOrg(t, db, "acme")
	d := MustDevice(t, db, org.ID, "IG-500")
	d2 := MustDevice(t, db, org.ID, "IG-500")
	var want []string
	for i := 0; i < 233; i++ {
		sev := resource.SeverityInfo
		if i%4 == 0 {
			sev = resource.SeverityError
		}
		e, err := db.InsertEvent(ctx, d.ID, resource.Event{Type: "heartbeat", Severity: sev, Message: "hb"})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, e.ID)
		if _, err := db.InsertEvent(ctx, d2.ID, resource.Event{Type: "heartbeat", Message: "hb"}); err != nil {
			t.Fatal(err)
		}
	}
	svc := sqlite.NewDeviceService(db)
	stop := during(t, func(i int) error {
		_, err := db.InsertEvent(ctx, d.ID, resource.Event{Type: "heartbeat", Message: "new"})
		return err
	})
	var prev resource.Event
	got := walk(t, 20, func(cursor string) ([]string, resource.Pagination, error) {
		l, err := svc.Events(ctx, org.ID, d.ID, cloud.EventFilter{Page: cloud.Page{Limit: 20, Cursor: cursor}})
		var ids []string
		for _, e := range l.Data {
			if prev.ID != "" && (e.CreatedAt.After(prev.CreatedAt.Time) || e.CreatedAt.Equal(prev.CreatedAt.Time) && e.ID > prev.ID) {
				t.Errorf("event %s (%v) after %s (%v): not newest first", e.ID, e.CreatedAt, prev.ID, prev.CreatedAt)
			}
			prev = e
			ids = append(ids, e.ID)
		}
		return ids, l.Pagination, err
	})
	stop()
	exactlyOnce(t, got, want)

	// Filters.
	var errs int
	filtered := walk(t, 7, func(cursor string) ([]string, resource.Pagination, error) {
		l, err := svc.Events(ctx, org.ID, d.ID, cloud.EventFilter{Page: cloud.Page{Limit: 7, Cursor: cursor}, Severity: resource.SeverityError, Type: "heartbeat"})
		var ids []string
		for _, e := range l.Data {
			if e.Severity != resource.SeverityError {
				t.Errorf("severity filter let %s through", e.Severity)
			}
			errs++
			ids = append(ids, e.ID)
		}
		return ids, l.Pagination, err
	})
	if len(filtered) != 59 {
		t.Errorf("ERROR events = %d, want 59", len(filtered))
	}
	if l, err := svc.Events(ctx, org.ID, d.ID, cloud.EventFilter{Type: "usb.attached"}); err != nil || len(l.Data) != 0 || l.Data == nil {
		t.Errorf("type filter with no match = %+v, %v", l, err)
	}
}

func TestAlertPaginationUnderInserts(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	clock := &tickClock{base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	db.Now = clock.Now
	org := MustOrg(t, db, "acme")
	rules := []string{"high_cpu", "high_mem", "disk_full", "high_temp", "device_offline", "vpn_down"}
	var want []string
	for i := 0; i < 20; i++ {
		d := MustDevice(t, db, org.ID, "IG-500")
		for _, r := range rules {
			a, err := db.InsertAlert(ctx, sqlite.NewAlert{DeviceID: d.ID, RuleName: r, Message: r})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, a.ID)
		}
	}
	svc := sqlite.NewAlertService(db)
	stop := during(t, func(i int) error {
		d, _, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: org.ID, Name: "n", SerialNumber: fmt.Sprintf("N%05d", i), Model: "IG-500"})
		if err != nil {
			return err
		}
		_, err = db.InsertAlert(ctx, sqlite.NewAlert{DeviceID: d.ID, RuleName: "high_cpu", Message: "new"})
		return err
	})
	got := walk(t, 25, func(cursor string) ([]string, resource.Pagination, error) {
		l, err := svc.ListAlerts(ctx, org.ID, cloud.AlertFilter{Page: cloud.Page{Limit: 25, Cursor: cursor}, State: resource.AlertActive})
		var ids []string
		for _, a := range l.Data {
			ids = append(ids, a.ID)
		}
		return ids, l.Pagination, err
	})
	stop()
	exactlyOnce(t, got, want)
}

func TestInvalidCursors(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	other := MustOrg(t, db, "other")
	d := MustDevice(t, db, org.ID, "IG-500")
	d2 := MustDevice(t, db, org.ID, "IG-500")
	od := MustDevice(t, db, other.ID, "IG-500")
	ev2, _ := db.InsertEvent(ctx, d2.ID, resource.Event{Type: "heartbeat"})
	oev, _ := db.InsertEvent(ctx, od.ID, resource.Event{Type: "heartbeat"})
	oa, err := db.InsertAlert(ctx, sqlite.NewAlert{DeviceID: od.ID, RuleName: "high_cpu"})
	if err != nil {
		t.Fatal(err)
	}
	devs := sqlite.NewDeviceService(db)
	alerts := sqlite.NewAlertService(db)
	for _, tc := range []struct {
		name string
		call func(cursor string) error
		bad  []string
	}{
		{"devices", func(c string) error {
			_, err := devs.ListDevices(ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Cursor: c}})
			return err
		}, []string{"garbage!", "zzzzzzzzzzzzzzzzzzzzzzzz", od.ID, ev2.ID}},
		{"events", func(c string) error {
			_, err := devs.Events(ctx, org.ID, d.ID, cloud.EventFilter{Page: cloud.Page{Cursor: c}})
			return err
		}, []string{"garbage!", ev2.ID, oev.ID, d.ID}},
		{"alerts", func(c string) error {
			_, err := alerts.ListAlerts(ctx, org.ID, cloud.AlertFilter{Page: cloud.Page{Cursor: c}, State: resource.AlertActive})
			return err
		}, []string{"garbage!", oa.ID, d.ID, "' OR 1=1 --"}},
	} {
		for _, c := range tc.bad {
			if err := tc.call(c); cloud.ErrorCode(err) != cloud.ECURSOR {
				t.Errorf("%s with cursor %q: err = %v, want invalid_cursor", tc.name, c, err)
			}
		}
	}
	// A device of the organization is a valid devices cursor even when it
	// does not match the status filter (its status may have changed).
	if _, err := devs.ListDevices(ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Cursor: d.ID}, Status: resource.StatusOnline}); err != nil {
		t.Errorf("own device as cursor with a status filter: %v", err)
	}
}

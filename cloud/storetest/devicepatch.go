package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

func ptr[T any](v T) *T { return &v }

// testPatchDevice: PATCH /devices/{id} changes each field, null clears the
// notes, a bad field changes nothing and is named, another organization's
// device is not found.
func testPatchDevice(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org, other := e.org("acme"), e.org("other")
	d := e.device(org.ID, "IG-500")
	svc := e.Store.Devices()
	if got := e.deviceRow(org.ID, d.ID); got.Tags == nil || len(got.Tags) != 0 || got.Notes != nil {
		t.Fatalf("new device: tags %#v notes %v", got.Tags, got.Notes)
	}
	patch := func(p cloud.DevicePatch) resource.DeviceDetail {
		t.Helper()
		dd, err := svc.PatchDevice(e.ctx, org.ID, d.ID, p)
		if err != nil {
			t.Fatalf("PatchDevice(%+v): %v", p, err)
		}
		if again := e.deviceRow(org.ID, d.ID); again.Name != dd.Name || again.Location != dd.Location || !slices.Equal(again.Tags, dd.Tags) {
			t.Fatalf("patch returned %+v, device reads %+v", dd, again)
		}
		return dd
	}
	if dd := patch(cloud.DevicePatch{Name: ptr("  press 3  ")}); dd.Name != "press 3" || dd.SerialNumber != d.SerialNumber {
		t.Errorf("name = %q", dd.Name)
	}
	if dd := patch(cloud.DevicePatch{Location: ptr("Hall B")}); dd.Location != "Hall B" || dd.Name != "press 3" {
		t.Errorf("location = %q, name %q", dd.Location, dd.Name)
	}
	if dd := patch(cloud.DevicePatch{Notes: ptr("line one\nline two")}); dd.Notes == nil || *dd.Notes != "line one\nline two" {
		t.Errorf("notes = %v", dd.Notes)
	}
	if dd := patch(cloud.DevicePatch{Tags: &[]string{"site:north", "line-3", "site:north"}}); !slices.Equal(dd.Tags, []string{"line-3", "site:north"}) || dd.Notes == nil {
		t.Errorf("tags = %q", dd.Tags)
	}
	if dd := patch(cloud.DevicePatch{ClearNotes: true}); dd.Notes != nil || len(dd.Tags) != 2 {
		t.Errorf("cleared notes = %v, tags %q", dd.Notes, dd.Tags)
	}
	if dd := patch(cloud.DevicePatch{Tags: &[]string{}, Location: ptr("")}); dd.Tags == nil || len(dd.Tags) != 0 || dd.Location != "" {
		t.Errorf("cleared tags = %#v, location %q", dd.Tags, dd.Location)
	}
	before := patch(cloud.DevicePatch{Name: ptr("press 3"), Notes: ptr("keep"), Tags: &[]string{"keep"}})
	for _, tc := range []struct {
		p     cloud.DevicePatch
		field string
	}{
		{cloud.DevicePatch{Name: ptr(" "), Tags: &[]string{"new"}}, "name"},
		{cloud.DevicePatch{Name: ptr(strings.Repeat("n", cloud.MaxNameLength+1))}, "name"},
		{cloud.DevicePatch{Name: ptr("ok"), Location: ptr("bad\x00loc")}, "location"},
		{cloud.DevicePatch{Name: ptr("ok"), Notes: ptr(strings.Repeat("é", cloud.MaxNotesLength+1))}, "notes"},
		{cloud.DevicePatch{Name: ptr("ok"), Tags: &[]string{"fine", "Bad"}}, "tags[1]"},
		{cloud.DevicePatch{Notes: ptr("x"), Tags: &[]string{strings.Repeat("a", 33)}}, "tags[0]"},
		{cloud.DevicePatch{Name: ptr("ok"), Tags: ptr(slices.Repeat([]string{"a"}, cloud.MaxDeviceTags+1))}, "tags"},
	} {
		_, err := svc.PatchDevice(e.ctx, org.ID, d.ID, tc.p)
		if cloud.ErrorCode(err) != cloud.EINVALID || !strings.HasPrefix(cloud.ErrorMessage(err), tc.field) {
			t.Errorf("PatchDevice(%+v) = %v, want EINVALID naming %s", tc.p, err, tc.field)
		}
		if after := e.deviceRow(org.ID, d.ID); after.Name != before.Name || *after.Notes != *before.Notes || !slices.Equal(after.Tags, before.Tags) {
			t.Errorf("a refused patch changed the device: %+v", after)
		}
	}
	// Exactly MaxNotesLength characters (more bytes) is fine.
	if dd := patch(cloud.DevicePatch{Notes: ptr(strings.Repeat("é", cloud.MaxNotesLength))}); len([]rune(*dd.Notes)) != cloud.MaxNotesLength {
		t.Errorf("notes of %d characters", len([]rune(*dd.Notes)))
	}
	for _, id := range []string{d.ID, "nosuchdevice"} {
		if _, err := svc.PatchDevice(e.ctx, other.ID, id, cloud.DevicePatch{Name: ptr("stolen")}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
			t.Errorf("PatchDevice(%s) from another organization = %v, want not_found", id, err)
		}
		if _, err := svc.PatchDevice(e.ctx, other.ID, id, cloud.DevicePatch{}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
			t.Errorf("empty PatchDevice(%s) from another organization = %v, want not_found", id, err)
		}
	}
	if got := e.deviceRow(org.ID, d.ID); got.Name != "press 3" {
		t.Errorf("another organization renamed the device: %q", got.Name)
	}
}

// testDeviceTagFilter: GET /devices?tag= lists the devices holding every
// tag, keyset-paginated, only the organization's.
func testDeviceTagFilter(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org, other := e.org("acme"), e.org("other")
	svc := e.Store.Devices()
	var north, northLine3 []string
	for i := range 10 {
		e.clock.Add(time.Millisecond)
		d := e.device(org.ID, "IG-500")
		tags := []string{}
		if i%2 == 0 {
			tags = append(tags, "site:north")
			north = append(north, d.ID)
			if i%4 == 0 {
				tags = append(tags, "line-3")
				northLine3 = append(northLine3, d.ID)
			}
		} else {
			tags = append(tags, "line-3", "site:northwest")
		}
		if _, err := svc.PatchDevice(e.ctx, org.ID, d.ID, cloud.DevicePatch{Tags: &tags}); err != nil {
			t.Fatal(err)
		}
	}
	theirs := e.device(other.ID, "IG-500")
	if _, err := svc.PatchDevice(e.ctx, other.ID, theirs.ID, cloud.DevicePatch{Tags: &[]string{"line-3", "site:north"}}); err != nil {
		t.Fatal(err)
	}
	list := func(orgID, tags string, limit int) []string {
		t.Helper()
		var got []string
		cursor := ""
		for range 20 {
			l, err := svc.ListDevices(e.ctx, orgID, cloud.DeviceFilter{Tags: tags, Page: cloud.Page{Limit: limit, Cursor: cursor}})
			if err != nil {
				t.Fatalf("tags %q: %v", tags, err)
			}
			if len(l.Data) > limit {
				t.Fatalf("page of %d > %d", len(l.Data), limit)
			}
			for _, d := range l.Data {
				if tags != "" && !strings.Contains(","+strings.Join(d.Tags, ",")+",", ","+strings.Split(tags, ",")[0]+",") {
					t.Errorf("device %s tags %q listed for %q", d.ID, d.Tags, tags)
				}
				got = append(got, d.ID)
			}
			if !l.Pagination.HasMore {
				return got
			}
			cursor = *l.Pagination.NextCursor
		}
		t.Fatal("pagination does not end")
		return nil
	}
	if got := list(org.ID, "site:north", 2); !slices.Equal(got, north) {
		t.Errorf("site:north = %v, want %v", got, north)
	}
	if got := list(org.ID, "line-3,site:north", 2); !slices.Equal(got, northLine3) {
		t.Errorf("line-3 and site:north = %v, want %v", got, northLine3)
	}
	if got := list(org.ID, "line-3,site:north", 3); !slices.Equal(got, northLine3) {
		t.Errorf("exact page: line-3 and site:north = %v, want %v", got, northLine3)
	}
	if got := list(org.ID, "site", 5); len(got) != 0 {
		t.Errorf("a prefix of a tag matched %v", got)
	}
	if got := list(org.ID, "", 100); len(got) != 10 {
		t.Errorf("no tag filter lists %d", len(got))
	}
	if got := list(other.ID, "site:north", 5); !slices.Equal(got, []string{theirs.ID}) {
		t.Errorf("other organization's site:north = %v", got)
	}
}

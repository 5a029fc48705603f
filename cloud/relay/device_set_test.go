package relay

import (
	"slices"
	"strings"
	"testing"

	"github.com/fleet/fleet/shared/resource"
)

// TestDeviceSet: `device set` changes the fields given and only them,
// prints the device, clears tags and notes with "", refuses bad values
// naming the field with nothing changed, on each store.
func TestDeviceSet(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testDeviceSet(t, db) })
	}
}

func testDeviceSet(t *testing.T, db string) {
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var dev struct{ ID string }
	mustJSON(t, &dev, "device", "add", "--db", db, "--org", org.ID, "--name", "press", "--serial", "S1", "--model", "IG-500", "--location", "hall A")

	var d resource.DeviceDetail
	mustJSON(t, &d, "device", "set", "--db", db, "--id", dev.ID, "--name", "press 3", "--notes", "oiled", "--tags", "site:north, line-3")
	if d.ID != dev.ID || d.Name != "press 3" || d.Location != "hall A" || d.Notes == nil || *d.Notes != "oiled" || !slices.Equal(d.Tags, []string{"line-3", "site:north"}) {
		t.Fatalf("device set printed %+v", d)
	}
	var list []resource.Device
	mustJSON(t, &list, "device", "list", "--db", db, "--org", org.ID)
	if len(list) != 1 || list[0].Name != "press 3" || !slices.Equal(list[0].Tags, []string{"line-3", "site:north"}) {
		t.Fatalf("device list after set: %+v", list)
	}
	mustJSON(t, &d, "device", "set", "--db", db, "--id", dev.ID, "--tags", "", "--notes", "", "--location", "hall B")
	if d.Name != "press 3" || d.Location != "hall B" || d.Notes != nil || d.Tags == nil || len(d.Tags) != 0 {
		t.Fatalf("clearing printed %+v", d)
	}
	out, _, code := cli(t, "device", "set", "--db", db, "--id", dev.ID, "--location", "hall C")
	if code != 0 || !strings.Contains(out, dev.ID) || !strings.Contains(out, "hall C") {
		t.Fatalf("human output (exit %d): %q", code, out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--id", dev.ID}, "at least one"},
		{[]string{"--name", "x"}, "--id"},
		{[]string{"--id", dev.ID, "--name", " ", "--tags", "new"}, "name"},
		{[]string{"--id", dev.ID, "--name", "ok", "--tags", "fine,Not-OK"}, "tags[1]"},
		{[]string{"--id", dev.ID, "--notes", strings.Repeat("n", 2001)}, "notes"},
		{[]string{"--id", "nosuchdevice", "--name", "x"}, "not found"},
	} {
		_, errOut, code := cli(t, append([]string{"device", "set", "--db", db}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("device set %q: exit %d, %q; want an error naming %s", c.args, code, errOut, c.want)
		}
	}
	mustJSON(t, &list, "device", "list", "--db", db, "--org", org.ID)
	if list[0].Name != "press 3" || list[0].Location != "hall C" || len(list[0].Tags) != 0 {
		t.Fatalf("a refused set changed the device: %+v", list[0])
	}
}

package relay

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

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
	if out, _, code := cli(t, "device", "list", "--db", db, "--org", org.ID); code != 0 || !strings.Contains(out, "TAGS") || !strings.Contains(out, "line-3,site:north") {
		t.Fatalf("device list shows no tags (exit %d): %q", code, out)
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

// TestDeviceSetSerialSwitch: `device set --serial-enabled false` turns the
// serial I/O switch off while a relay serves the database: the agent
// connected to it is sent a configuration with enabled false (the admin
// CLI is another process: SQLite's data version, PostgreSQL's
// notification), GET /serial shows it, and true turns it back on. A model
// without serial I/O and a value other than true or false are refused with
// nothing changed, on each store.
func TestDeviceSetSerialSwitch(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testDeviceSetSerialSwitch(t, db) })
	}
}

func testDeviceSetSerialSwitch(t *testing.T, db string) {
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var k struct{ Key string }
	mustJSON(t, &k, "key", "create", "--db", db, "--org", org.ID, "--name", "ops", "--scopes", "devices:read")
	var dev, small struct{ ID, Token string }
	mustJSON(t, &dev, "device", "add", "--db", db, "--org", org.ID, "--name", "press", "--serial", "S1", "--model", "IG-500")
	mustJSON(t, &small, "device", "add", "--db", db, "--org", org.ID, "--name", "meter", "--serial", "S2", "--model", "IG-100")
	m := startMain(t, db)
	a := connectAgent(t, m.Addr(), dev.Token, time.Minute)
	serialEnabled := func() bool {
		t.Helper()
		code, body := get(t, "http://"+m.Addr()+"/api/v1/public/devices/"+dev.ID+"/serial", k.Key)
		var st resource.One[resource.SerialState]
		if err := json.Unmarshal(body, &st); code != 200 || err != nil {
			t.Fatalf("GET /serial: %d %s", code, body)
		}
		return st.Data.Enabled
	}

	var out struct {
		resource.DeviceDetail
		SerialEnabled *bool `json:"serialEnabled"`
	}
	mustJSON(t, &out, "device", "set", "--db", db, "--id", dev.ID, "--serial-enabled", "false")
	if out.ID != dev.ID || out.Name != "press" || out.SerialEnabled == nil || *out.SerialEnabled {
		t.Fatalf("device set --serial-enabled false printed %+v", out)
	}
	off := a.config(1, 10*time.Second)
	if off.Enabled {
		t.Fatalf("the agent was sent %+v, want enabled false", off)
	}
	if serialEnabled() {
		t.Fatal("GET /serial shows the switch on")
	}

	human, _, code := cli(t, "device", "set", "--db", db, "--id", dev.ID, "--serial-enabled", "true", "--location", "hall B")
	if code != 0 || !strings.Contains(human, "serial:   enabled") || !strings.Contains(human, "hall B") {
		t.Fatalf("device set --serial-enabled true (exit %d): %q", code, human)
	}
	if cfg := a.config(off.Version+1, 10*time.Second); !cfg.Enabled {
		t.Fatalf("the agent was sent %+v, want enabled true", cfg)
	}
	if !serialEnabled() {
		t.Fatal("GET /serial shows the switch off")
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--id", dev.ID, "--serial-enabled", "no"}, "true or false"},
		{[]string{"--id", dev.ID, "--serial-enabled", ""}, "true or false"},
		{[]string{"--id", small.ID, "--serial-enabled", "false", "--name", "renamed"}, "serial.io"},
		{[]string{"--id", dev.ID, "--serial-enabled", "false", "--tags", "Bad Tag"}, "tags"},
	} {
		_, errOut, code := cli(t, append([]string{"device", "set", "--db", db}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("device set %q: exit %d, %q; want an error naming %s", c.args, code, errOut, c.want)
		}
	}
	if !serialEnabled() {
		t.Fatal("a refused device set turned the switch off")
	}
	var list []resource.Device
	mustJSON(t, &list, "device", "list", "--db", db, "--org", org.ID)
	for _, d := range list {
		if d.Name == "renamed" || len(d.Tags) != 0 {
			t.Fatalf("a refused device set changed a device: %+v", d)
		}
	}
}

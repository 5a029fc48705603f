package relay

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// TestChannelImportDBC imports the demo's DBC file into a device's canfd-1
// on the database of a running relay, on each store: the API shows the
// points, a connected agent receives them (at once on PostgreSQL, where
// the import notifies the relays; at its next hello on SQLite), and every
// bad input is refused with nothing changed.
func TestChannelImportDBC(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testChannelImportDBC(t, name, db) })
	}
}

func testChannelImportDBC(t *testing.T, dialect, db string) {
	m := startMain(t, db)
	base := "http://" + m.Addr() + "/api/v1/public"
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var key struct{ Key string }
	mustJSON(t, &key, "key", "create", "--db", db, "--org", org.ID, "--name", "ci", "--scopes", "devices:read,devices:write")
	var dev, small struct{ ID, Token string }
	mustJSON(t, &dev, "device", "add", "--db", db, "--org", org.ID, "--name", "press", "--serial", "S1", "--model", "IG-500")
	mustJSON(t, &small, "device", "add", "--db", db, "--org", org.ID, "--name", "gate", "--serial", "S2", "--model", "IG-100")
	demo := filepath.Join("..", "..", "deploy", "demo", "demo.dbc")

	channel := func() serialcfg.CANFD {
		t.Helper()
		code, body := get(t, base+"/devices/"+dev.ID+"/serial/channels/canfd-1", key.Key)
		var ch struct{ Data resource.Channel }
		if err := json.Unmarshal(body, &ch); code != 200 || err != nil || ch.Data.Config.CANFD == nil {
			t.Fatalf("GET canfd-1: %d %s", code, body)
		}
		return *ch.Data.Config.CANFD
	}
	before := channel()

	var agent *simAgent
	if dialect == "postgres" {
		agent = connectAgent(t, m.Addr(), dev.Token, time.Minute)
	}

	var out struct {
		DeviceID, ChannelID string
		Imported            []serialcfg.CANPoint
		Skipped             []string
		ChannelPoints       int
	}
	mustJSON(t, &out, "channel", "import-dbc", "--db", db, "--device", dev.ID, "--channel", "canfd-1", "--file", demo)
	var names []string
	for _, p := range out.Imported {
		names = append(names, p.Name)
	}
	if out.DeviceID != dev.ID || out.ChannelID != "canfd-1" || strings.Join(names, ",") != "engine_speed,coolant_temp,vehicle_speed" || out.ChannelPoints != 3 {
		t.Fatalf("import-dbc printed %+v", out)
	}
	got := channel()
	if len(got.Points) != 3 || got.Points[0].Name != "engine_speed" || got.Points[0].Scale != 0.25 || got.Points[1].ByteOrder != "big" || !got.Points[1].Signed ||
		got.Points[1].Offset != -40 || got.NominalBitrate != before.NominalBitrate || got.Tx != before.Tx {
		t.Errorf("canfd-1 after the import: %+v", got)
	}

	// The agent gets the new configuration with its points.
	if agent == nil {
		agent = connectAgent(t, m.Addr(), dev.Token, time.Minute)
	}
	cfg := agent.config(1, 10*time.Second)
	var pushed []string
	for _, c := range cfg.Channels {
		if c.ID == "canfd-1" && c.Config.CANFD != nil {
			for _, p := range c.Config.CANFD.Points {
				pushed = append(pushed, p.Name)
			}
		}
	}
	if strings.Join(pushed, ",") != "engine_speed,coolant_temp,vehicle_speed" {
		t.Errorf("the agent received canfd-1 points %v (config %+v)", pushed, cfg)
	}

	// Importing one message again replaces its points; the others stay.
	mustJSON(t, &out, "channel", "import-dbc", "--db", db, "--device", dev.ID, "--channel", "canfd-1", "--file", demo, "--messages", "EngineData", "--org", org.ID)
	if len(out.Imported) != 2 || out.ChannelPoints != 3 || len(channel().Points) != 3 {
		t.Errorf("second import: %+v", out)
	}
	human, errOut, code := cli(t, "channel", "import-dbc", "--db", db, "--device", dev.ID, "--channel", "canfd-1", "--file", demo, "--messages", "VehicleData")
	if code != 0 || !strings.Contains(human, "canfd-1.vehicle_speed") || !strings.Contains(human, "0x18FEF100") || !strings.Contains(human, "Imported 1 points") {
		t.Errorf("import-dbc (text): %d %s %s", code, human, errOut)
	}

	bad := filepath.Join(t.TempDir(), "bad.dbc")
	src, err := os.ReadFile(demo)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	broken := -1
	for i, l := range lines {
		if strings.Contains(l, "SG_ CoolantTemp") {
			lines[i], broken = strings.Replace(l, "@0-", "@7-", 1), i+1
		}
	}
	os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o600)
	after := channel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--device", "nosuchdevice", "--channel", "canfd-1", "--file", demo}, 1, `device "nosuchdevice" not found`},
		{[]string{"--device", dev.ID, "--channel", "rs485-1", "--file", demo}, 1, "channel rs485-1 is a rs485 channel"},
		{[]string{"--device", dev.ID, "--channel", "canfd-9", "--file", demo}, 1, `channel "canfd-9" not found`},
		{[]string{"--device", small.ID, "--channel", "canfd-1", "--file", demo}, 1, "does not have the capability serial.io"},
		{[]string{"--device", dev.ID, "--channel", "canfd-1", "--file", bad}, 1, "bad.dbc:" + itoa(broken) + ": invalid value"},
		{[]string{"--device", dev.ID, "--channel", "canfd-1", "--file", demo, "--messages", "Gearbox"}, 1, "demo.dbc: no message named Gearbox"},
		{[]string{"--device", dev.ID, "--channel", "canfd-1", "--file", demo + ".missing"}, 1, "no such file"},
		{[]string{"--device", dev.ID, "--channel", "canfd-1"}, 2, "--file is required"},
	} {
		_, errOut, code := cli(t, append([]string{"channel", "import-dbc", "--db", db}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d mentioning %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	if now := channel(); len(now.Points) != len(after.Points) {
		t.Errorf("a refused import changed canfd-1: %d points, was %d", len(now.Points), len(after.Points))
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

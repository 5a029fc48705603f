package agentlink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

func TestHeartbeatPointsStoredAndChangesObserved(t *testing.T) {
	forCodecs(t, testHeartbeatPointsStoredAndChangesObserved)
}

// The points an agent's heartbeats report are stored with their channel;
// the Observers hear of the points whose value or quality changed, with
// the unit and type of the desired configuration (read once by the
// connection, and again when it changes), not of a point only read again.
func testHeartbeatPointsStoredAndChangesObserved(t *testing.T, e *env) {
	ctx := context.Background()
	id, tok := e.addDevice("IG-500")
	cfg := serialcfg.Config{Kind: "rs485", RS485: &serialcfg.RS485{Kind: "rs485", BaudRate: 9600, DataBits: 8, Parity: "none", StopBits: 1,
		Mode: "modbus_rtu_master", SlaveID: 1, Points: []serialcfg.RS485Point{
			{Name: "temp", Function: "holding", Register: 0, Type: "f32", Unit: "°C"},
			{Name: "pump", Function: "coil", Register: 1, Type: "bool"},
		}}}
	if _, err := e.serial.PutChannel(ctx, e.org.ID, id, "rs485-1", cfg); err != nil {
		t.Fatal(err)
	}
	h := hello()
	h.AppliedVersion = 1 // the agent runs the desired configuration: none is sent
	a, _ := e.connect(tok, h)
	now := time.Now()
	r1, r2, r3 := resource.T(now.Add(-3*time.Second)), resource.T(now.Add(-2*time.Second)), resource.T(now.Add(-time.Second))
	beat := func(temp, pump float64, at resource.Time) {
		a.heartbeat(protocol.Heartbeat{AppliedVersion: 1, Channels: []protocol.ChannelState{
			{ID: "rs485-1", Available: true, Live: "16812 0", Points: []protocol.PointState{
				{Name: "temp", Value: temp, Quality: "good", At: at}, {Name: "pump", Value: pump, Quality: "good", At: at}}},
			{ID: "gpio-1", Available: true, Live: "1", Points: []protocol.PointState{{Name: "level", Value: 1, Quality: "good", At: at}}},
		}})
	}
	beat(21.5, 1, r1)
	beat(21.5, 1, r2) // read again, unchanged
	beat(22, 1, r3)
	observed := func(n int) []string {
		t.Helper()
		var out []string
		eventually(t, 5*time.Second, func() string {
			e.obs.mu.Lock()
			defer e.obs.mu.Unlock()
			hbs := e.obs.heartbeats[id]
			if len(hbs) < n {
				return fmt.Sprintf("%d heartbeats observed, want %d", len(hbs), n)
			}
			out = nil
			for _, hb := range hbs {
				b, _ := json.Marshal(hb.ChangedPoints)
				out = append(out, string(b))
			}
			return ""
		})
		return out
	}
	at := func(t resource.Time) string { return `"` + resource.FormatTime(t.Time) + `"` }
	got := observed(3)
	want := []string{
		`[{"id":"rs485-1.temp","value":21.5,"unit":"°C","quality":"good","at":` + at(r1) + `},{"id":"rs485-1.pump","value":true,"unit":"","quality":"good","at":` + at(r1) + `},` +
			`{"id":"gpio-1.level","value":true,"unit":"","quality":"good","at":` + at(r1) + `}]`,
		`null`,
		`[{"id":"rs485-1.temp","value":22,"unit":"°C","quality":"good","at":` + at(r3) + `}]`,
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("heartbeat %d: changed points\n%s\nwant\n%s", i+1, got[i], want[i])
		}
	}

	// A new desired configuration reaches the agent, and its units the
	// changed points.
	cfg.RS485.Points[0].Unit = "K"
	if _, err := e.serial.PutChannel(ctx, e.org.ID, id, "rs485-1", cfg); err != nil {
		t.Fatal(err)
	}
	if m := a.recv(); m.Type != protocol.TypeConfig {
		t.Fatalf("want the new configuration, got %+v", m)
	}
	beat(295.5, 0, resource.T(now))
	got = observed(4)
	if w := `[{"id":"rs485-1.temp","value":295.5,"unit":"K","quality":"good","at":` + at(resource.T(now)) + `},` +
		`{"id":"rs485-1.pump","value":false,"unit":"","quality":"good","at":` + at(resource.T(now)) + `}]`; got[3] != w {
		t.Errorf("after the configuration changed: changed points\n%s\nwant\n%s", got[3], w)
	}

	tel, err := e.serial.Telemetry(ctx, e.org.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(tel.Channels[1].Points)
	if w := `[{"id":"rs485-1.temp","value":295.5,"unit":"K","quality":"good","at":` + at(resource.T(now)) + `},` +
		`{"id":"rs485-1.pump","value":false,"unit":"","quality":"good","at":` + at(resource.T(now)) + `}]`; string(b) != w {
		t.Errorf("telemetry points\n%s\nwant\n%s", b, w)
	}
}

package e2e_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/libmodbus"
)

// TestLibmodbusSlaveEndToEnd is issue 26's end-to-end test against the
// reference implementation: a slave built on libmodbus (test/rig/libmodbus)
// serves, on one end of a pty pair, values set with libmodbus's setters
// (floats in all four byte orders, i32, u32, i64, i16, u16, a bit of a
// register, coils, a discrete input) and prints what libmodbus's getters
// decode; mbpoll reads its raw registers first. Then the real fleet-agent
// runs with --hw linux and rs485-1 bound to the pty's other end, the points
// are configured through the public API (PUT the channel), and GET
// /devices/{id}/points must show every value exactly as libmodbus decodes
// it, quality good, while a point past the slave's registers (libmodbus
// answers exception 2) is bad with the Modbus cause.
func TestLibmodbusSlaveEndToEnd(t *testing.T) {
	slave := libmodbus.Start(t, 7)
	// mbpoll before the agent: one master on the line at a time.
	slave.CheckRegisters(t)
	if t.Failed() {
		t.FailNow()
	}

	f := newFleet(t, 1, bins.agent)
	f.startAgent(0, "--hw", "linux", "--port", "rs485-1="+slave.Path, "--recheck-interval", "200ms")
	f.waitStatus(0, "ONLINE", 20*time.Second)
	dev := f.devices[0]

	const beyond = "beyond"
	var points []map[string]any
	for _, p := range slave.Points {
		pt := map[string]any{"name": p.Def.Name, "function": p.Def.Function, "register": p.Def.Register, "type": p.Def.Type, "intervalMs": 500}
		if p.Def.Order != "" {
			pt["order"] = p.Def.Order
		}
		if p.Def.Bit != nil {
			pt["bit"] = *p.Def.Bit
		}
		points = append(points, pt)
	}
	first, ok := slave.Unavailable["holding"]
	if !ok {
		t.Fatal("the libmodbus slave did not say where its holding registers end")
	}
	points = append(points, map[string]any{"name": beyond, "function": "holding", "register": first, "type": "u16", "intervalMs": 500})
	rs485 := map[string]any{"kind": "rs485", "baudRate": 115200, "dataBits": 8, "parity": "even", "stopBits": 1,
		"mode": "modbus_rtu_master", "slaveId": slave.ID, "points": points}
	if code := f.api.Do("PUT", "/devices/"+dev.ID+"/serial/channels/rs485-1", rs485, nil); code != 200 {
		t.Fatalf("PUT rs485-1 with %d points: %d", len(points), code)
	}

	// want is what libmodbus's getters decode, as the API shows it: a
	// number, or a JSON boolean for type bool.
	want := map[string]any{}
	for _, p := range slave.Points {
		var v any = p.Value
		if p.Def.Type == "bool" {
			v = p.Value == 1
		}
		want["rs485-1."+p.Def.Name] = v
	}
	var got map[string]resource.Point
	fleetproc.Eventually(t, 30*time.Second, func() string {
		var list resource.List[resource.Point]
		if code := f.api.Do("GET", "/devices/"+dev.ID+"/points", nil, &list); code != 200 {
			return fmt.Sprintf("GET points: %d", code)
		}
		got = map[string]resource.Point{}
		for _, p := range list.Data {
			got[p.ID] = p
		}
		for id := range want {
			if p := got[id]; p.Quality != "good" || p.Value == nil {
				return fmt.Sprintf("%s: quality %q, value %v, error %q", id, p.Quality, p.Value, p.Error)
			}
		}
		if p := got["rs485-1."+beyond]; p.Quality != "bad" {
			return fmt.Sprintf("%s: quality %q, error %q", p.ID, p.Quality, p.Error)
		}
		return ""
	})
	for _, p := range slave.Points {
		id := "rs485-1." + p.Def.Name
		if g := got[id]; g.Value != want[id] || g.Type != p.Def.Type || g.Error != "" {
			t.Errorf("%s (%s %s, registers %04X): the API shows %v (%T, type %q, error %q), libmodbus's getter decodes %v",
				id, p.Def.Type, p.Def.Order, p.Words, g.Value, g.Value, g.Type, g.Error, want[id])
		}
	}
	if b := got["rs485-1."+beyond]; b.Value != nil || !strings.Contains(b.Error, "exception 2: illegal data address") {
		t.Errorf("%s past the slave's registers: value %v, error %q, want no value and Modbus exception 2 (illegal data address)",
			b.ID, b.Value, b.Error)
	}
	if !t.Failed() {
		t.Logf("%d points read through fleet-agent and fleet-relay as libmodbus decodes them; %s: %s", len(want), beyond, got["rs485-1."+beyond].Error)
	}
	f.relay.Stop(t, 30*time.Second)
}

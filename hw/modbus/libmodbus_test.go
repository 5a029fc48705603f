package modbus_test

import (
	"testing"

	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/libmodbus"
)

// TestLibmodbusReference checks the byte orders against the reference
// implementations, not against ourselves: a slave built on libmodbus
// (test/rig/libmodbus's slave.c, compiled with gcc) serves values set
// with libmodbus's setters and prints what libmodbus's getters
// (modbus_get_float_abcd and its siblings, MODBUS_GET_INT32_FROM_INT16,
// MODBUS_GET_INT64_FROM_INT16) read from its registers; mbpoll reads the
// raw registers back (and a float with its own decoder); then our Port
// reads the same points, and every value must be the getters'.
func TestLibmodbusReference(t *testing.T) {
	slave := libmodbus.Start(t, 7)

	// mbpoll reads the raw registers the setters left.
	slave.CheckRegisters(t)
	// mbpoll's own float decoder, big-endian word order (-B): ABCD.
	if got := slave.Mbpoll(t, "4:float", 0, 2, "-B")[0]; got != "123456" {
		t.Errorf("mbpoll -t 4:float -B read %q at register 0, want 123456", got)
	}

	cfg := rs485(func(c *serialcfg.RS485) {
		c.Parity, c.SlaveID = "even", 7
		for _, r := range slave.Points {
			c.Points = append(c.Points, r.Def)
		}
	})
	p := openWith(t, slave.Path, cfg, fast)
	rs := readings(t, p, "every point read from the libmodbus slave", allRead)
	for i, r := range slave.Points {
		if rs[i].Err != "" || rs[i].Value != r.Value {
			t.Errorf("%s (%s %s, registers %04X): we read %v %q, libmodbus's getter %v",
				r.Def.Name, r.Def.Type, r.Def.Order, r.Words, rs[i].Value, rs[i].Err, r.Value)
		}
	}
}

package modbustest_test

import (
	"testing"
	"time"

	"github.com/fleet/fleet/hw/modbus/modbustest"
)

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		in    string
		slave int
		f     modbustest.Fault
		bad   bool
	}{
		{in: "no-reply", f: modbustest.Fault{NoReply: true}},
		{in: "7:bad-crc", slave: 7, f: modbustest.Fault{BadCRC: true}},
		{in: "2:exception=2", slave: 2, f: modbustest.Fault{Exception: 2}},
		{in: "delay=300ms", f: modbustest.Fault{Delay: 300 * time.Millisecond}},
		{in: "1:split=2ms", slave: 1, f: modbustest.Fault{SplitGap: 2 * time.Millisecond}},
		{in: "exception", bad: true},
		{in: "300:no-reply", bad: true},
		{in: "delay=soon", bad: true},
		{in: "melt", bad: true},
	} {
		slave, f, err := modbustest.ParseFault(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%q accepted", tc.in)
			}
			continue
		}
		if err != nil || slave != tc.slave || f != tc.f {
			t.Errorf("%q = %d %+v %v, want %d %+v", tc.in, slave, f, err, tc.slave, tc.f)
		}
	}
}

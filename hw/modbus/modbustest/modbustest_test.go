package modbustest_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fleet/fleet/hw/modbus"
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

func TestServeOverConn(t *testing.T) {
	sim := modbustest.New(modbustest.Options{IDs: []int{9}})
	sim.SetHolding(9, 2, 0xBEEF)
	host, guest := net.Pipe()
	defer guest.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Serve(ctx, modbustest.ConnLine{C: host}) }()

	req := modbus.AppendCRC([]byte{9, 3, 0, 2, 0, 1})
	if _, err := guest.Write(req); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 7)
	guest.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(guest, reply); err != nil {
		t.Fatal(err)
	}
	want := modbus.AppendCRC([]byte{9, 3, 2, 0xBE, 0xEF})
	if !bytes.Equal(reply, want) {
		t.Fatalf("reply % x, want % x", reply, want)
	}
	// A request with a broken CRC is counted and not answered.
	bad := append([]byte(nil), req...)
	bad[len(bad)-1] ^= 1
	guest.Write(bad)
	time.Sleep(50 * time.Millisecond)
	if st := sim.Stats(); st.BadFrames != 1 || st.Requests != 1 || st.Replies != 1 {
		t.Fatalf("stats %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

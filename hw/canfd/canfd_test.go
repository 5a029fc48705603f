package canfd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/hw/canfd"
	"github.com/fleet/fleet/hw/canfd/canfdtest"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/testwait"
)

func cfg(mut func(c *serialcfg.CANFD)) serialcfg.Config {
	c := &serialcfg.CANFD{Kind: serialcfg.KindCANFD, NominalBitrate: 500000, DataBitrate: 2000000, SamplePoint: 0.875}
	if mut != nil {
		mut(c)
	}
	return serialcfg.Config{Kind: serialcfg.KindCANFD, CANFD: c}
}

type rig struct {
	bus  *canfdtest.Bus
	link *canfdtest.Link
	peer *canfdtest.Endpoint
	port *canfd.Port
}

func newRig(t *testing.T, c serialcfg.Config) *rig {
	t.Helper()
	return newRigRefused(t, "can0", nil, c)
}

// newRigRefused is newRig on the interface named device, whose link
// refuses every setting with refusal (nil: none refused) from the start.
func newRigRefused(t *testing.T, device string, refusal error, c serialcfg.Config) *rig {
	t.Helper()
	r := &rig{bus: canfdtest.NewBus(), link: &canfdtest.Link{}}
	r.link.Refuse(refusal)
	r.peer = r.bus.Open()
	t.Cleanup(func() { r.peer.Close() })
	p, err := canfd.New(context.Background(), canfd.Options{Name: "canfd-1", Device: device, Open: r.bus.Opener(), Link: r.link}, c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.port = p
	t.Cleanup(func() { p.Close() })
	return r
}

// waitTelemetry polls until cond holds or fails after 3 s.
func waitTelemetry(t *testing.T, p *canfd.Port, what string, cond func(serialcfg.Telemetry) bool) serialcfg.Telemetry {
	t.Helper()
	return testwait.Value(t, what, 3*time.Second, 5*time.Millisecond, p.Telemetry, cond)
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

func TestFrameMarshalRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		f    canfd.Frame
		size int
	}{
		{"fd 64 bytes brs extended", canfd.Frame{ID: 0x18DAF110, Extended: true, FD: true, BRS: true, Data: payload(64)}, canfd.FDMTU},
		{"fd 12 bytes esi standard", canfd.Frame{ID: 0x123, FD: true, ESI: true, Data: payload(12)}, canfd.FDMTU},
		{"fd empty", canfd.Frame{ID: 0x7FF, FD: true, Data: []byte{}}, canfd.FDMTU},
		{"classic 8 bytes", canfd.Frame{ID: 0x100, Data: payload(8)}, canfd.ClassicMTU},
		{"classic rtr", canfd.Frame{ID: 0x100, RTR: true, Data: []byte{}}, canfd.ClassicMTU},
		{"error frame", canfd.Frame{Err: true, ID: canfd.ErrClassBusOff, Data: make([]byte, 8)}, canfd.ClassicMTU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.f.Marshal()
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if len(b) != tt.size {
				t.Fatalf("size %d, want %d", len(b), tt.size)
			}
			got, err := canfd.Unmarshal(b)
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if got.ID != tt.f.ID || got.Extended != tt.f.Extended || got.FD != tt.f.FD || got.BRS != tt.f.BRS ||
				got.ESI != tt.f.ESI || got.RTR != tt.f.RTR || got.Err != tt.f.Err || !bytes.Equal(got.Data, tt.f.Data) {
				t.Fatalf("round trip: got %+v, want %+v", got, tt.f)
			}
		})
	}
}

func TestFrameMarshalWireLayout(t *testing.T) {
	b, err := canfd.Frame{ID: 0x1ABCDEF0, Extended: true, FD: true, BRS: true, Data: []byte{0xDE, 0xAD}}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// can_id little-endian with CAN_EFF_FLAG, len, flags FDF|BRS.
	want := []byte{0xF0, 0xDE, 0xBC, 0x9A, 2, 0x05, 0, 0, 0xDE, 0xAD}
	if !bytes.Equal(b[:10], want) {
		t.Fatalf("header % X, want % X", b[:10], want)
	}
}

func TestFrameMarshalRejects(t *testing.T) {
	tests := []struct {
		name string
		f    canfd.Frame
	}{
		{"fd length 9", canfd.Frame{ID: 1, FD: true, Data: payload(9)}},
		{"classic 12 bytes", canfd.Frame{ID: 1, Data: payload(12)}},
		{"standard id too big", canfd.Frame{ID: 0x800, FD: true}},
		{"extended id too big", canfd.Frame{ID: 0x20000000, Extended: true, FD: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.f.Marshal(); err == nil {
				t.Fatal("Marshal accepted an invalid frame")
			}
		})
	}
	if _, err := canfd.Unmarshal(make([]byte, 20)); !errors.Is(err, canfd.ErrShortFrame) {
		t.Fatalf("Unmarshal(20 bytes) = %v, want ErrShortFrame", err)
	}
}

func TestFrameString(t *testing.T) {
	tests := []struct {
		f    canfd.Frame
		want string
	}{
		{canfd.Frame{ID: 0x123, FD: true, Data: []byte{0xde, 0xad, 0xbe, 0xef}}, "123#DEADBEEF"},
		{canfd.Frame{ID: 0x18, Data: []byte{}}, "018#"},
		{canfd.Frame{ID: 0x1ABCDEF0, Extended: true, Data: []byte{1}}, "1ABCDEF0#01"},
		{canfd.Frame{ID: 0x10, Extended: true, Data: []byte{1}}, "00000010#01"},
	}
	for _, tt := range tests {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestErrorText(t *testing.T) {
	ctrl := func(bits byte) []byte { return []byte{0, bits, 0, 0, 0, 0, 0, 0} }
	tests := []struct {
		name  string
		class uint32
		data  []byte
		want  string
	}{
		{"bus-off", canfd.ErrClassBusOff, nil, "bus-off"},
		{"bus-off wins over controller", canfd.ErrClassBusOff | canfd.ErrClassController, ctrl(canfd.CtrlTxPassive), "bus-off"},
		{"restarted clears", canfd.ErrClassRestarted, nil, ""},
		{"tx passive", canfd.ErrClassController, ctrl(canfd.CtrlTxPassive), "error-passive"},
		{"rx warning", canfd.ErrClassController, ctrl(canfd.CtrlRxWarning), "error-warning"},
		{"back to active", canfd.ErrClassController, ctrl(canfd.CtrlActive), ""},
		{"no ack", canfd.ErrClassNoAck, nil, "no ack (no other node on the bus?)"},
		{"protocol", canfd.ErrClassProtocol | canfd.ErrClassBusError, nil, "bus error (protocol violation)"},
		{"lost arbitration only", canfd.ErrClassLostArb, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := canfd.ErrorText(canfd.Frame{Err: true, ID: tt.class, Data: tt.data})
			if !ok || got != tt.want {
				t.Fatalf("ErrorText = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
	if _, ok := canfd.ErrorText(canfd.Frame{ID: 0x40}); ok {
		t.Fatal("a data frame with id 0x40 was taken for an error frame")
	}
}

func TestPeriodicTx(t *testing.T) {
	data := strings.Repeat("A5", 64)
	r := newRig(t, cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x18DAF110", DataHex: data}
	}))
	start := time.Now()
	for i := 0; i < 3; i++ {
		f, err := r.peer.RecvTimeout(2 * time.Second)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.ID != 0x18DAF110 || !f.Extended || !f.FD || !f.BRS || len(f.Data) != 64 || f.Data[63] != 0xA5 {
			t.Fatalf("frame %d = %+v", i, f)
		}
	}
	// Three frames at 100 ms: the first at once, two more after >= 200 ms.
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("3 frames within %v: not paced by intervalMs", el)
	}
	if tm := r.port.Telemetry(); !tm.TxOn || tm.Error != "" {
		t.Fatalf("telemetry %+v, want txOn and no error", tm)
	}
}

func TestSingleTx(t *testing.T) {
	r := newRig(t, cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 0, CanID: "123", DataHex: "01 02 03"}
	}))
	f, err := r.peer.RecvTimeout(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if f.String() != "123#010203" {
		t.Fatalf("frame %s, want 123#010203", f)
	}
	waitTelemetry(t, r.port, "txOn false after the single send", func(tm serialcfg.Telemetry) bool { return !tm.TxOn })
	if f, err := r.peer.RecvTimeout(300 * time.Millisecond); err == nil {
		t.Fatalf("a second frame %s after a single send", f)
	}
	if got := r.port.Stats().Sent; got != 1 {
		t.Fatalf("sent %d frames, want 1", got)
	}
}

func TestLiveFromReceivedFrames(t *testing.T) {
	r := newRig(t, cfg(nil))
	tests := []struct {
		f    canfd.Frame
		want string
	}{
		{canfd.Frame{ID: 0x321, FD: true, BRS: true, Data: payload(64)}, "321#" + fmt.Sprintf("%X", payload(64))},
		{canfd.Frame{ID: 0x1FFFFFFF, Extended: true, FD: true, Data: []byte{0xCA, 0xFE}}, "1FFFFFFF#CAFE"},
		{canfd.Frame{ID: 0x7, Data: []byte{0x01}}, "007#01"},
	}
	for _, tt := range tests {
		if err := r.peer.Send(tt.f); err != nil {
			t.Fatal(err)
		}
		waitTelemetry(t, r.port, "live "+tt.want, func(tm serialcfg.Telemetry) bool { return tm.Live == tt.want })
	}
	if tm := r.port.Telemetry(); tm.TxOn || tm.Error != "" {
		t.Fatalf("telemetry %+v: want no tx and no error", tm)
	}
}

func TestErrorFramesReported(t *testing.T) {
	r := newRig(t, cfg(nil))
	r.bus.InjectBusOff()
	waitTelemetry(t, r.port, "bus-off", func(tm serialcfg.Telemetry) bool { return tm.Error == "bus-off" })
	r.bus.InjectRestarted()
	waitTelemetry(t, r.port, "cleared by restart", func(tm serialcfg.Telemetry) bool { return tm.Error == "" })

	r.bus.InjectError(canfd.ErrClassController, []byte{0, canfd.CtrlRxPassive})
	waitTelemetry(t, r.port, "error-passive", func(tm serialcfg.Telemetry) bool { return tm.Error == "error-passive" })
	// A data frame proves the controller is back on the bus.
	if err := r.peer.Send(canfd.Frame{ID: 0x55, FD: true, Data: []byte{9}}); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, r.port, "cleared by a frame", func(tm serialcfg.Telemetry) bool { return tm.Error == "" && tm.Live == "055#09" })
}

func TestSendFailureReportedAndCleared(t *testing.T) {
	r := newRig(t, cfg(nil))
	r.bus.FailSends(errors.New("no buffer space available"))
	c := cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x10", DataHex: "AA"}
	})
	if err := r.port.Apply(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, r.port, "send error", func(tm serialcfg.Telemetry) bool {
		return tm.Error == "send failed: no buffer space available"
	})
	r.bus.FailSends(nil)
	waitTelemetry(t, r.port, "send error cleared", func(tm serialcfg.Telemetry) bool { return tm.Error == "" && tm.TxOn })
	if _, err := r.peer.RecvTimeout(2 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestReconfigureLive(t *testing.T) {
	r := newRig(t, cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x100", DataHex: "01"}
	}))
	if _, err := r.peer.RecvTimeout(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Same bit timing, new frame: no relink, the new frame goes out.
	if err := r.port.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x200", DataHex: "02 02"}
	})); err != nil {
		t.Fatal(err)
	}
	if err := waitFrame(r.peer, "200#0202"); err != nil {
		t.Fatal(err)
	}
	if n := len(r.link.Applied()); n != 1 {
		t.Fatalf("link configured %d times, want 1 (tx change needs no relink)", n)
	}

	// New bitrates: the link is reconfigured, the socket reopened.
	if err := r.port.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) {
		c.NominalBitrate, c.DataBitrate, c.SamplePoint = 1000000, 8000000, 0.8
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x300", DataHex: "03"}
	})); err != nil {
		t.Fatal(err)
	}
	applied := r.link.Applied()
	want := canfd.Settings{NominalBitrate: 1000000, DataBitrate: 8000000, SamplePoint: 0.8}
	if len(applied) != 2 || applied[1] != want {
		t.Fatalf("link settings %+v, want second %+v", applied, want)
	}
	if n := r.bus.Endpoints(); n != 2 {
		t.Fatalf("%d endpoints open, want 2 (old socket closed)", n)
	}
	if err := waitFrame(r.peer, "300#03"); err != nil {
		t.Fatal(err)
	}

	// Disable tx: frames stop.
	if err := r.port.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) {
		c.NominalBitrate, c.DataBitrate, c.SamplePoint = 1000000, 8000000, 0.8
	})); err != nil {
		t.Fatal(err)
	}
	if tm := r.port.Telemetry(); tm.TxOn {
		t.Fatalf("txOn after tx disabled")
	}
	drain(r.peer)
	if f, err := r.peer.RecvTimeout(300 * time.Millisecond); err == nil {
		t.Fatalf("frame %s after tx disabled", f)
	}
}

func TestRefusedSettingsKeepPreviousConfig(t *testing.T) {
	r := newRig(t, cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x100", DataHex: "01"}
	}))
	r.link.Refuse(errors.New("invalid argument"))
	err := r.port.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) {
		c.NominalBitrate = 10000
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x200", DataHex: "02"}
	}))
	if err == nil || !strings.Contains(err.Error(), "invalid argument") {
		t.Fatalf("Apply = %v, want the refusal", err)
	}
	drain(r.peer)
	if err := waitFrame(r.peer, "100#01"); err != nil {
		t.Fatalf("previous tx did not keep running: %v", err)
	}
}

// A refused Apply does not repeat the previous configuration's single
// send when it puts that configuration back.
func TestRefusedSettingsDoNotRepeatASingleSend(t *testing.T) {
	r := newRig(t, cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 0, CanID: "0x100", DataHex: "01"}
	}))
	if err := waitFrame(r.peer, "100#01"); err != nil {
		t.Fatal(err)
	}
	r.link.Refuse(errors.New("numerical argument out of domain"))
	if err := r.port.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) { c.NominalBitrate = 10000 })); err == nil {
		t.Fatal("Apply passed a refused bitrate")
	}
	if f, err := r.peer.RecvTimeout(300 * time.Millisecond); err == nil {
		t.Fatalf("the refused Apply sent %s again", f)
	}
}

func TestVirtualInterfaceRefusalIsNoted(t *testing.T) {
	refusal := fmt.Errorf("set bitrate on vcan0 (vcan): %w", canfd.ErrBitTimingUnsupported)
	r := newRigRefused(t, "vcan0", refusal, cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 0, CanID: "0x42", DataHex: "42"}
	}))
	if err := waitFrame(r.peer, "042#42"); err != nil {
		t.Fatal(err)
	}
	tm := waitTelemetry(t, r.port, "note", func(tm serialcfg.Telemetry) bool { return tm.Error != "" })
	if tm.Error != "bitrate not applied: vcan0 has no bit timing (virtual interface)" {
		t.Fatalf("error %q", tm.Error)
	}
	// A bus error outranks the note, and the note returns after it clears.
	r.bus.InjectBusOff()
	waitTelemetry(t, r.port, "bus-off", func(tm serialcfg.Telemetry) bool { return tm.Error == "bus-off" })
	r.bus.InjectRestarted()
	waitTelemetry(t, r.port, "note again", func(tm serialcfg.Telemetry) bool { return strings.HasPrefix(tm.Error, "bitrate not applied") })
}

func TestListenOnly(t *testing.T) {
	r := newRig(t, cfg(func(c *serialcfg.CANFD) { c.ListenOnly = true }))
	if got := r.link.Applied(); len(got) != 1 || !got[0].ListenOnly {
		t.Fatalf("link settings %+v, want listen-only", got)
	}
	if err := r.peer.Send(canfd.Frame{ID: 0x5, FD: true, Data: []byte{1, 2}}); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, r.port, "live while listening", func(tm serialcfg.Telemetry) bool { return tm.Live == "005#0102" })
	// tx together with listen-only is invalid and refused.
	err := r.port.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) {
		c.ListenOnly = true
		c.Tx = serialcfg.CANFDTx{Enabled: true, CanID: "1", DataHex: "01"}
	}))
	if err == nil {
		t.Fatal("Apply accepted tx with listenOnly")
	}
	if r.port.Stats().Sent != 0 {
		t.Fatal("a listen-only port sent a frame")
	}
}

func TestApplyRejectsOtherKinds(t *testing.T) {
	r := newRig(t, cfg(nil))
	err := r.port.Apply(context.Background(), serialcfg.Config{Kind: serialcfg.KindGPIO, GPIO: &serialcfg.GPIO{Kind: "gpio", Direction: "in", Pull: "up"}})
	if err == nil {
		t.Fatal("Apply accepted a gpio config")
	}
	bad := cfg(func(c *serialcfg.CANFD) { c.DataBitrate = 3000000 })
	if err := r.port.Apply(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "dataBitrate") {
		t.Fatalf("Apply(invalid) = %v, want a dataBitrate error", err)
	}
}

func TestClose(t *testing.T) {
	r := newRig(t, cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x100", DataHex: "01"}
	}))
	if err := r.port.Close(); err != nil {
		t.Fatal(err)
	}
	if n := r.bus.Endpoints(); n != 1 {
		t.Fatalf("%d endpoints after Close, want 1", n)
	}
	if tm := r.port.Telemetry(); tm.Error != "port closed" || tm.TxOn {
		t.Fatalf("telemetry after Close %+v", tm)
	}
	if err := r.port.Apply(context.Background(), cfg(nil)); !errors.Is(err, canfd.ErrClosed) {
		t.Fatalf("Apply after Close = %v, want ErrClosed", err)
	}
}

// waitFrame reads frames until one formats as want.
func waitFrame(e *canfdtest.Endpoint, want string) error {
	deadline := time.Now().Add(3 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		f, err := e.RecvTimeout(time.Until(deadline))
		if err != nil {
			return fmt.Errorf("waiting for %s (last %s): %w", want, last, err)
		}
		if last = f.String(); last == want {
			return nil
		}
	}
	return fmt.Errorf("no frame %s (last %s)", want, last)
}

func drain(e *canfdtest.Endpoint) {
	for e.Pending() > 0 {
		_, _ = e.RecvTimeout(time.Millisecond)
	}
}

func TestInterfaceGoneAndBack(t *testing.T) {
	r := newRig(t, cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x100", DataHex: "01"}
	}))
	if err := waitFrame(r.peer, "100#01"); err != nil {
		t.Fatal(err)
	}
	r.bus.Unplug()
	waitTelemetry(t, r.port, "gone", func(tm serialcfg.Telemetry) bool { return strings.HasPrefix(tm.Error, "interface can0 went away") })
	// Retries fail while it is away.
	time.Sleep(500 * time.Millisecond)
	if tm := r.port.Telemetry(); !strings.HasPrefix(tm.Error, "interface can0 went away") {
		t.Fatalf("telemetry %+v while unplugged", tm)
	}
	r.bus.Plug()
	peer := r.bus.Open() // the old peer went with the interface
	defer peer.Close()
	waitTelemetry(t, r.port, "recovered", func(tm serialcfg.Telemetry) bool { return tm.Error == "" && tm.TxOn })
	if err := waitFrame(peer, "100#01"); err != nil {
		t.Fatalf("tx after recovery: %v", err)
	}
	if applied := r.link.Applied(); len(applied) < 2 || applied[len(applied)-1] != applied[0] {
		t.Fatalf("link settings %+v: want the same settings applied again after the interface came back", applied)
	}
	if err := peer.Send(canfd.Frame{ID: 0x9, FD: true, Data: []byte{9}}); err != nil {
		t.Fatal(err)
	}
	waitTelemetry(t, r.port, "live after recovery", func(tm serialcfg.Telemetry) bool { return tm.Live == "009#09" })
}

func TestCloseWhileInterfaceGone(t *testing.T) {
	r := newRig(t, cfg(nil))
	r.bus.Unplug()
	waitTelemetry(t, r.port, "gone", func(tm serialcfg.Telemetry) bool { return strings.HasPrefix(tm.Error, "interface can0 went away") })
	done := make(chan error, 1)
	go func() { done <- r.port.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close hung while the interface was gone")
	}
	r.bus.Plug()
	time.Sleep(recoverWait)
	if n := r.bus.Endpoints(); n != 1 {
		t.Fatalf("%d endpoints after Close, want only the peer (no reopen after Close)", n)
	}
}

// recoverWait outlasts the first recovery attempt.
const recoverWait = 600 * time.Millisecond

func TestApplyWhileInterfaceGone(t *testing.T) {
	r := newRig(t, cfg(nil))
	r.bus.Unplug()
	waitTelemetry(t, r.port, "gone", func(tm serialcfg.Telemetry) bool { return strings.HasPrefix(tm.Error, "interface can0 went away") })
	// New bit timing cannot reach a missing interface: refused.
	r.link.Refuse(errors.New("link can0: Link not found"))
	if err := r.port.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) { c.NominalBitrate = 250000 })); err == nil {
		t.Fatal("Apply with new bit timing succeeded with the interface gone")
	}
	r.link.Refuse(nil)
	r.bus.Plug()
	// The recovery reopens with the configuration that was running.
	waitTelemetry(t, r.port, "recovered", func(tm serialcfg.Telemetry) bool { return tm.Error == "" })
	if got := r.link.Applied(); got[len(got)-1].NominalBitrate != 500000 {
		t.Fatalf("recovered with %+v, want the running 500000", got[len(got)-1])
	}
	if err := r.port.Apply(context.Background(), cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, IntervalMs: 100, CanID: "0x100", DataHex: "01"}
	})); err != nil {
		t.Fatalf("Apply after recovery: %v", err)
	}
	peer := r.bus.Open()
	defer peer.Close()
	if err := waitFrame(peer, "100#01"); err != nil {
		t.Fatal(err)
	}
}

func TestLinkNotPermittedIsNoted(t *testing.T) {
	refusal := fmt.Errorf("link can0: %w: operation not permitted", canfd.ErrNotPermitted)
	r := newRigRefused(t, "can0", refusal, cfg(func(c *serialcfg.CANFD) {
		c.Tx = serialcfg.CANFDTx{Enabled: true, CanID: "0x1", DataHex: "01"}
	}))
	if err := waitFrame(r.peer, "001#01"); err != nil {
		t.Fatal(err)
	}
	if tm := r.port.Telemetry(); !strings.Contains(tm.Error, "no permission to configure can0") {
		t.Fatalf("error %q", tm.Error)
	}
}

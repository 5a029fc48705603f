package canfdtest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fleet/fleet/hw/canfd"
	"github.com/fleet/fleet/hw/canfd/canfdtest"
)

// open attaches an endpoint to bus for the rest of the test.
func open(t *testing.T, bus *canfdtest.Bus) *canfdtest.Endpoint {
	t.Helper()
	e := bus.Open()
	t.Cleanup(func() { e.Close() })
	return e
}

func TestDeliveryToOthersOnly(t *testing.T) {
	bus := canfdtest.NewBus()
	a, b, c := open(t, bus), open(t, bus), open(t, bus)
	if err := a.Send(canfd.Frame{ID: 0x123, FD: true, BRS: true, Data: []byte{1, 2}}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*canfdtest.Endpoint{b, c} {
		f, err := e.RecvTimeout(time.Second)
		if err != nil || f.String() != "123#0102" || !f.BRS {
			t.Fatalf("got %v, %v", f, err)
		}
	}
	if a.Pending() != 0 {
		t.Fatal("the sender received its own frame")
	}
}

func TestSendChecksFrames(t *testing.T) {
	bus := canfdtest.NewBus()
	a := open(t, bus)
	if err := a.Send(canfd.Frame{ID: 1, FD: true, Data: make([]byte, 9)}); err == nil {
		t.Fatal("9-byte FD frame accepted")
	}
	if err := a.Send(canfd.Frame{ID: 0x800, Data: []byte{1}}); err == nil {
		t.Fatal("standard id 0x800 accepted")
	}
}

func TestQueueOverflowDrops(t *testing.T) {
	bus := canfdtest.NewBus()
	a, b := open(t, bus), open(t, bus)
	for i := 0; i < canfdtest.QueueLen+10; i++ {
		if err := a.Send(canfd.Frame{ID: 1, Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if b.Pending() != canfdtest.QueueLen || b.Dropped() != 10 {
		t.Fatalf("pending %d dropped %d", b.Pending(), b.Dropped())
	}
}

func TestCloseUnblocksRecv(t *testing.T) {
	bus := canfdtest.NewBus()
	a := bus.Open()
	done := make(chan error, 1)
	go func() { _, err := a.Recv(); done <- err }()
	time.Sleep(10 * time.Millisecond)
	a.Close()
	select {
	case err := <-done:
		if !errors.Is(err, canfd.ErrClosed) {
			t.Fatalf("Recv after Close = %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Recv still blocked after Close")
	}
	if bus.Endpoints() != 0 {
		t.Fatal("endpoint still attached")
	}
}

func TestUnplug(t *testing.T) {
	bus := canfdtest.NewBus()
	a := open(t, bus)
	bus.Unplug()
	if _, err := a.Recv(); !errors.Is(err, canfd.ErrDeviceGone) {
		t.Fatalf("Recv after Unplug = %v", err)
	}
	if _, err := bus.Opener()(); !errors.Is(err, canfdtest.ErrUnplugged) {
		t.Fatalf("Open while unplugged = %v", err)
	}
	bus.Plug()
	b, err := bus.Opener()()
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}

func TestInjectedErrorReachesEveryEndpoint(t *testing.T) {
	bus := canfdtest.NewBus()
	a, b := open(t, bus), open(t, bus)
	bus.InjectBusOff()
	for _, e := range []*canfdtest.Endpoint{a, b} {
		f, err := e.RecvTimeout(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if text, ok := canfd.ErrorText(f); !ok || text != "bus-off" {
			t.Fatalf("error frame %+v reads %q", f, text)
		}
	}
}

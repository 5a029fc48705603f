package linux_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/linux"
	"github.com/fleet/fleet/hw/uart"
	"github.com/fleet/fleet/test/rig/ptytest"
)

// TestRealUARTOnPTY opens uart-1 with the real driver on a pseudo-terminal
// and sees a line written on the other side in live.
func TestRealUARTOnPTY(t *testing.T) {
	master, path := ptytest.Open(t)
	b := &linux.Backend{}
	ch := channel(t, "uart-1")
	if !b.Present(ch, path) {
		t.Fatalf("pty %s not present", path)
	}
	p, err := b.Open(context.Background(), ch, path, ch.DefaultConfig())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer p.Close()
	if _, ok := p.(*uart.Port); !ok {
		t.Fatalf("port is %T, want *uart.Port", p)
	}
	if _, err := master.Write([]byte("temp=21.5\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for p.Telemetry().Live != "temp=21.5" {
		if time.Now().After(deadline) {
			t.Fatalf("live %q, want temp=21.5", p.Telemetry().Live)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRealDriversMissingDevices runs the real canfd and gpio paths on
// devices this machine does not have.
func TestRealDriversMissingDevices(t *testing.T) {
	b := &linux.Backend{}
	for _, tt := range []struct{ ch, device string }{
		{"canfd-1", "nosuchcan7"},
		{"gpio-1", "gpiochip97:5"},
		{"rs485-1", "/dev/ttyNOSUCH9"},
	} {
		ch := channel(t, tt.ch)
		if b.Present(ch, tt.device) {
			t.Fatalf("%s present", tt.device)
		}
		if _, err := b.Open(context.Background(), ch, tt.device, ch.DefaultConfig()); !errors.Is(err, hw.ErrDeviceMissing) {
			t.Errorf("Open %s = %v, want ErrDeviceMissing", tt.device, err)
		}
	}
	// The loopback interface exists: Present only asks whether the
	// interface is there.
	if !b.Present(channel(t, "canfd-1"), "lo") {
		t.Fatal("interface lo not present")
	}
}

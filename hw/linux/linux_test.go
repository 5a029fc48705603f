package linux_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/hw/linux"
	"github.com/fleet/fleet/shared/serialcfg"
)

func channel(t *testing.T, id string) catalog.Channel {
	t.Helper()
	ch, ok := catalog.MustLookup("IG-500").Channel(id)
	if !ok {
		t.Fatalf("IG-500 has no %s", id)
	}
	return ch
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func fakeInterfaces(names ...string) func(string) (*net.Interface, error) {
	return func(name string) (*net.Interface, error) {
		for _, n := range names {
			if n == name {
				return &net.Interface{Name: name, Flags: net.FlagUp}, nil
			}
		}
		return nil, fmt.Errorf("route ip+net: no such network interface")
	}
}

func TestPresent(t *testing.T) {
	dir := t.TempDir()
	tty := filepath.Join(dir, "ttyS2")
	touch(t, tty)
	gpioDir := filepath.Join(dir, "dev")
	if err := os.Mkdir(gpioDir, 0o700); err != nil {
		t.Fatal(err)
	}
	touch(t, filepath.Join(gpioDir, "gpiochip0"))
	b := &linux.Backend{GPIODir: gpioDir, InterfaceByName: fakeInterfaces("can0")}

	tests := []struct {
		ch     string
		device string
		want   bool
	}{
		{"rs485-1", tty, true},
		{"rs485-1", filepath.Join(dir, "ttyUSB9"), false},
		{"uart-1", tty, true},
		{"uart-1", dir, false}, // a directory is not a tty
		{"canfd-1", "can0", true},
		{"canfd-1", "can1", false},
		{"gpio-1", "gpiochip0:5", true},
		{"gpio-1", "gpiochip1:5", false},
		{"gpio-1", "gpiochip0", false},
		{"gpio-1", "../gpiochip0:5", false},
	}
	for _, tt := range tests {
		t.Run(tt.ch+" "+filepath.Base(tt.device), func(t *testing.T) {
			if got := b.Present(channel(t, tt.ch), tt.device); got != tt.want {
				t.Fatalf("Present(%s, %s) = %v, want %v", tt.ch, tt.device, got, tt.want)
			}
		})
	}
}

type fakePort struct{ group, device string }

func (p *fakePort) Apply(context.Context, serialcfg.Config) error { return nil }
func (p *fakePort) Telemetry() serialcfg.Telemetry                { return serialcfg.Telemetry{Live: p.group} }
func (p *fakePort) Close() error                                  { return nil }

func recordingDrivers(calls *[]string) map[string]linux.OpenFunc {
	m := map[string]linux.OpenFunc{}
	for _, g := range serialcfg.Kinds {
		m[g] = func(ctx context.Context, ch catalog.Channel, device string, cfg serialcfg.Config, log *slog.Logger) (hw.Port, error) {
			*calls = append(*calls, g+" "+ch.ID+" "+device)
			return &fakePort{group: g, device: device}, nil
		}
	}
	return m
}

func TestOpenDispatchesByGroup(t *testing.T) {
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "ttyS1"))
	touch(t, filepath.Join(dir, "ttyS2"))
	touch(t, filepath.Join(dir, "gpiochip0"))
	var calls []string
	b := &linux.Backend{GPIODir: dir, InterfaceByName: fakeInterfaces("can0"), Drivers: recordingDrivers(&calls)}
	model := catalog.MustLookup("IG-500")
	devices := map[string]string{
		"uart-1": filepath.Join(dir, "ttyS1"), "rs485-1": filepath.Join(dir, "ttyS2"),
		"canfd-1": "can0", "gpio-1": "gpiochip0:5",
	}
	for _, id := range []string{"uart-1", "rs485-1", "canfd-1", "gpio-1"} {
		ch, _ := model.Channel(id)
		p, err := b.Open(context.Background(), ch, devices[id], ch.DefaultConfig())
		if err != nil {
			t.Fatalf("Open %s: %v", id, err)
		}
		if got := p.Telemetry().Live; got != ch.Group {
			t.Fatalf("%s opened by the %s driver", id, got)
		}
	}
	want := []string{
		"uart uart-1 " + devices["uart-1"], "rs485 rs485-1 " + devices["rs485-1"],
		"canfd canfd-1 can0", "gpio gpio-1 gpiochip0:5",
	}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("calls %q, want %q", calls, want)
	}
}

func TestOpenMissingDevice(t *testing.T) {
	dir := t.TempDir()
	var calls []string
	b := &linux.Backend{GPIODir: dir, InterfaceByName: fakeInterfaces(), Drivers: recordingDrivers(&calls)}
	for _, tt := range []struct{ ch, device string }{
		{"rs485-2", filepath.Join(dir, "ttyS3")},
		{"canfd-1", "can0"},
		{"gpio-4", "gpiochip0:19"},
	} {
		ch := channel(t, tt.ch)
		_, err := b.Open(context.Background(), ch, tt.device, ch.DefaultConfig())
		if !errors.Is(err, hw.ErrDeviceMissing) {
			t.Errorf("Open %s on missing %s = %v, want ErrDeviceMissing", tt.ch, tt.device, err)
		}
	}
	if len(calls) != 0 {
		t.Fatalf("drivers called for missing devices: %q", calls)
	}
}

func TestOpenDeviceVanishing(t *testing.T) {
	dir := t.TempDir()
	tty := filepath.Join(dir, "ttyUSB0")
	touch(t, tty)
	b := &linux.Backend{Drivers: map[string]linux.OpenFunc{
		serialcfg.KindRS485: func(ctx context.Context, ch catalog.Channel, device string, cfg serialcfg.Config, log *slog.Logger) (hw.Port, error) {
			os.Remove(device) // unplugged between the check and the open
			return nil, &fs.PathError{Op: "open", Path: device, Err: fs.ErrNotExist}
		},
	}}
	ch := channel(t, "rs485-1")
	if _, err := b.Open(context.Background(), ch, tty, ch.DefaultConfig()); !errors.Is(err, hw.ErrDeviceMissing) {
		t.Fatalf("Open = %v, want ErrDeviceMissing", err)
	}
}

func TestOpenOtherDriverErrorsPassThrough(t *testing.T) {
	dir := t.TempDir()
	tty := filepath.Join(dir, "ttyS1")
	touch(t, tty)
	boom := errors.New("permission denied")
	b := &linux.Backend{Drivers: map[string]linux.OpenFunc{
		serialcfg.KindUART: func(context.Context, catalog.Channel, string, serialcfg.Config, *slog.Logger) (hw.Port, error) {
			return nil, boom
		},
	}}
	ch := channel(t, "uart-1")
	_, err := b.Open(context.Background(), ch, tty, ch.DefaultConfig())
	if !errors.Is(err, boom) || errors.Is(err, hw.ErrDeviceMissing) {
		t.Fatalf("Open = %v, want the driver's error, not ErrDeviceMissing", err)
	}
}

func TestOpenKindMismatch(t *testing.T) {
	var calls []string
	b := &linux.Backend{InterfaceByName: fakeInterfaces("can0"), Drivers: recordingDrivers(&calls)}
	ch := channel(t, "canfd-1")
	if _, err := b.Open(context.Background(), ch, "can0", channel(t, "gpio-1").DefaultConfig()); err == nil {
		t.Fatal("Open accepted a gpio config on a canfd channel")
	}
	if len(calls) != 0 {
		t.Fatalf("driver called: %q", calls)
	}
}

package iomgr

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/hw/gpio/gpiosim"
	"github.com/fleet/fleet/hw/linux"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/kerneltest"
)

// TestKernelAgentChannels runs the agent's channel manager on the Linux
// backend in the qemu rig's guest, as fleet-agent --hw linux on an IG-500
// does: its gpio-1 (gpiochip0:5) is a gpio-sim chip that appears after the
// agent started and is picked up without a restart; its canfd-1 is a CTU
// CAN FD controller, and a bitrate that controller cannot make shows as
// the channel's error until a good one applies.
func TestKernelAgentChannels(t *testing.T) {
	kerneltest.Require(t)
	fd := strings.Fields(kerneltest.Env(t, "FLEET_CAN_FD")) // the rig names the CAN-FD controllers
	m := mustManager(t, Options{Backend: &linux.Backend{}, Devices: map[string]string{
		// ttyS1 carries the rig's Modbus line: keep the serial channels off it.
		"uart-1": "/dev/fleet-none-1", "rs485-1": "/dev/fleet-none-2", "rs485-2": "/dev/fleet-none-3",
		"canfd-1": fd[0],
	}})
	if s := state(t, m, "gpio-1"); s.Available {
		t.Fatalf("gpio-1 available before any GPIO chip exists: %+v", s)
	}

	// The chip appears: the guest has no other, so it is gpiochip0.
	chip, err := gpiosim.New("iomgr", 20, map[int]string{5: "DIO1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close() // release the lines before the chip goes
		chip.Remove()
	})
	if chip.Name != "gpiochip0" {
		t.Fatalf("the simulator's chip is %s; the IG-500's gpio-1 is on gpiochip0", chip.Name)
	}
	// Pulled down before the agent opens the line: the channel's own
	// pull-up (the catalog default) is what the line then reads.
	if err := chip.SetPull(5, false); err != nil {
		t.Fatal(err)
	}
	m.Recheck(context.Background())
	if s := state(t, m, "gpio-1"); !s.Available || s.Error != "" {
		t.Fatalf("gpio-1 after its chip appeared: %+v", s)
	}
	// Then an external pull-down.
	waitState(t, m, "gpio-1", func(s protocol.ChannelState) bool { return s.Live == "1" }, "gpio-1 live 1 (pull-up)")
	if err := chip.SetPull(5, false); err != nil {
		t.Fatal(err)
	}
	waitState(t, m, "gpio-1", func(s protocol.ChannelState) bool { return s.Live == "0" }, "gpio-1 live 0 (pulled down)")

	canCfg := func(version int64, nominal, data int) protocol.Config {
		return protocol.Config{Version: version, Enabled: true, Channels: []protocol.ChannelConfig{{ID: "canfd-1", Config: serialcfg.Config{
			Kind: serialcfg.KindCANFD, CANFD: &serialcfg.CANFD{Kind: serialcfg.KindCANFD, NominalBitrate: nominal, DataBitrate: data, SamplePoint: 0.875}}}}}
	}
	if s := state(t, m, "canfd-1"); !s.Available || s.Error != "" {
		t.Fatalf("canfd-1 on %s: %+v", fd[0], s)
	}
	err = m.Apply(context.Background(), canCfg(2, 20000, 1000000))
	s := state(t, m, "canfd-1")
	if err == nil || !strings.Contains(s.Error, "cannot make bitrate 20000") {
		t.Fatalf("a 20 kbit/s bitrate on a 100 MHz CTU CAN FD core: Apply %v, channel %+v; want the refusal as the channel's error", err, s)
	}
	t.Logf("canfd-1 error: %s", s.Error)
	if err := m.Apply(context.Background(), canCfg(3, 250000, 4000000)); err != nil {
		t.Fatal(err)
	}
	if s := state(t, m, "canfd-1"); s.Error != "" {
		t.Fatalf("canfd-1 after a good bitrate: %+v", s)
	}
}

func waitState(t *testing.T, m *Manager, id string, ok func(protocol.ChannelState) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok(state(t, m, id)) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s: %+v", what, state(t, m, id))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package guesttest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/hw/modbus"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/kerneltest"
)

// uartCounters reads the 8250 driver's transmit and receive byte counts of
// port n from /proc/tty/driver/serial, and checks the port is a 16550A.
func uartCounters(t *testing.T, n int) (tx, rx int) {
	t.Helper()
	data, err := os.ReadFile("/proc/tty/driver/serial")
	if err != nil {
		t.Fatalf("8250 driver state: %v", err)
	}
	re := regexp.MustCompile(`(?m)^` + strconv.Itoa(n) + `: uart:(\S+) .*\btx:(\d+) rx:(\d+)`)
	m := re.FindStringSubmatch(string(data))
	if m == nil {
		t.Fatalf("ttyS%d not in /proc/tty/driver/serial:\n%s", n, data)
	}
	if m[1] != "16550A" {
		t.Fatalf("ttyS%d is a %s, want qemu's 16550A", n, m[1])
	}
	tx, _ = strconv.Atoi(m[2])
	rx, _ = strconv.Atoi(m[3])
	return tx, rx
}

func envInt(t *testing.T, key string) int {
	t.Helper()
	v, err := strconv.Atoi(kerneltest.Env(t, key))
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return v
}

// TestKernelModbusOverUART runs the agent's Modbus RTU master on the
// guest's ttyS1, qemu's emulated 16550 driven by the kernel's 8250
// driver, wired to the slave simulator on the host. It polls registers the
// host set, writes a register (function 6) and reads it back; the host
// checks after the run that its simulator holds the written value. The
// register numbers and values are the host's random choice for this run.
func TestKernelModbusOverUART(t *testing.T) {
	kerneltest.Require(t)
	dev := kerneltest.Env(t, "FLEET_MODBUS_DEVICE")
	baud := envInt(t, "FLEET_MODBUS_BAUD")
	slave := envInt(t, "FLEET_MODBUS_SLAVE")
	pollReg := envInt(t, "FLEET_MODBUS_POLL_REGISTER")
	pollValues := kerneltest.Env(t, "FLEET_MODBUS_POLL_VALUES")
	writeReg := envInt(t, "FLEET_MODBUS_WRITE_REGISTER")
	writeBefore := envInt(t, "FLEET_MODBUS_WRITE_BEFORE")
	writeValue := envInt(t, "FLEET_MODBUS_WRITE_VALUE")
	portN, err := strconv.Atoi(strings.TrimPrefix(dev, "/dev/ttyS"))
	if err != nil {
		t.Fatalf("FLEET_MODBUS_DEVICE %q is not a /dev/ttyS<n>", dev)
	}
	tx0, rx0 := uartCounters(t, portN)

	cfg := func(poll serialcfg.ModbusPoll, tx serialcfg.RS485Tx) serialcfg.Config {
		return serialcfg.Config{Kind: "rs485", RS485: &serialcfg.RS485{
			Kind: "rs485", BaudRate: baud, DataBits: 8, Parity: "even", StopBits: 1,
			Mode: "modbus_rtu_master", SlaveID: slave, Tx: tx, Poll: &poll,
		}}
	}
	poll := func(reg, count int) serialcfg.ModbusPoll {
		return serialcfg.ModbusPoll{Enabled: true, IntervalMs: 200, Register: reg, Count: count, Function: "holding"}
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := modbus.Open(ctx, dev, cfg(poll(pollReg, len(strings.Fields(pollValues))), serialcfg.RS485Tx{}), log)
	if err != nil {
		t.Fatalf("open the Modbus master on %s: %v", dev, err)
	}
	defer p.Close()

	// waitLive waits for live to read want; TCG is slow, so allow 20 s.
	waitLive := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			tel := p.Telemetry()
			if tel.Live == want && tel.Error == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: telemetry %+v, want live %q and no error", what, tel, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// 1. Poll the registers the host set in its simulator.
	waitLive("poll", pollValues)

	// 2. The register to write holds the host's initial value...
	if err := p.Apply(ctx, cfg(poll(writeReg, 1), serialcfg.RS485Tx{})); err != nil {
		t.Fatalf("apply: %v", err)
	}
	waitLive("register before the write", strconv.Itoa(writeBefore))

	// 3. ...until the master writes it once (function 6), after which
	// polling it reads the new value back from the slave.
	tx := serialcfg.RS485Tx{Enabled: true, IntervalMs: 0, Register: writeReg, Value: writeValue}
	if err := p.Apply(ctx, cfg(poll(writeReg, 1), tx)); err != nil {
		t.Fatalf("apply tx: %v", err)
	}
	waitLive("register after the write", strconv.Itoa(writeValue))
	deadline := time.Now().Add(2 * time.Second)
	for {
		// A read-back of the old value would put it in live again.
		time.Sleep(500 * time.Millisecond)
		if tel := p.Telemetry(); tel.Live != strconv.Itoa(writeValue) {
			t.Fatalf("after the write: telemetry %+v, want live %d", tel, writeValue)
		}
		if time.Now().After(deadline) {
			break
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("close: %v", err)
	}

	// The bytes went through the kernel's 8250 driver.
	tx1, rx1 := uartCounters(t, portN)
	if tx1 <= tx0 || rx1 <= rx0 {
		t.Errorf("ttyS%d counters tx %d->%d rx %d->%d: the 8250 driver carried nothing", portN, tx0, tx1, rx0, rx1)
	}
	fmt.Printf("ttyS%d through the 8250 driver: %d bytes sent, %d received\n", portN, tx1-tx0, rx1-rx0)
}

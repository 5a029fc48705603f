package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet/fleet/hw/modbus"
	"github.com/fleet/fleet/shared/serialcfg"
)

// TestSimulatorProcess runs the built command as the qemu rig does (a real
// process serving a pty under a stable name) and polls it with the master.
func TestSimulatorProcess(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "modbus-sim")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	link := filepath.Join(dir, "ttyRS485")
	cmd := exec.Command(bin, "--pty-link", link, "--ids", "3,4", "--fault", "4:exception=2")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := os.Stat(link); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("simulator did not create its pty link")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cfg := serialcfg.Config{Kind: "rs485", RS485: &serialcfg.RS485{Kind: "rs485", BaudRate: 9600, DataBits: 8,
		Parity: "even", StopBits: 1, Mode: "modbus_rtu_master", SlaveID: 3}}
	p, err := modbus.OpenWith(context.Background(), link, cfg, nil, modbus.Options{ResponseTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	if regs, err := p.ReadRegisters(ctx, 3, false, 5, 2); err != nil || len(regs) != 2 || regs[0] != 305 || regs[1] != 306 {
		t.Fatalf("slave 3: %v %v, want [305 306]", regs, err)
	}
	if _, err := p.ReadRegisters(ctx, 4, false, 0, 1); modbus.Cause(err, 4) != "illegal data address" {
		t.Fatalf("slave 4 with an injected exception: %v", err)
	}
	if _, err := p.ReadRegisters(ctx, 5, true, 0, 1); modbus.Cause(err, 5) != "modbus timeout (slave 5)" {
		t.Fatalf("slave 5 is not served: %v", err)
	}
	if err := p.WriteRegister(ctx, 3, 9, 4321); err != nil {
		t.Fatal(err)
	}
	if regs, err := p.ReadRegisters(ctx, 3, false, 9, 1); err != nil || regs[0] != 4321 {
		t.Fatalf("read back %v %v", regs, err)
	}
}

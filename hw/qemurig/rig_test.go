package qemurig

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// moduleRoot returns the directory of go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// TestQEMURig boots the Debian kernel under qemu with every package's
// TestKernel* tests and fails when any of them fails in the guest. It runs
// with FLEET_QEMU=1 (make test-kernel sets it, and make test runs that), so
// that a plain go test ./... does not boot qemu a second time.
func TestQEMURig(t *testing.T) {
	if os.Getenv("FLEET_QEMU") != "1" {
		t.Skip("boots qemu only with FLEET_QEMU=1: run make test-kernel")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(tWriter{t}, nil))
	var console strings.Builder
	cfg := Config{
		Root:    moduleRoot(t),
		Require: []string{"github.com/fleet/fleet/hw/qemurig/guesttest"},
		Log:     log,
		Console: &console,
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := rep.Outcome
	t.Logf("guest: %s; %s", o.BootLine, o.DoneLine)
	for _, r := range o.Results {
		t.Logf("guest result %s: %s", r.Package, r.Detail)
	}
	t.Logf("timings: tools %s, kernel %s, build %s, pack %s (initramfs %d KiB), qemu %s",
		rep.Timings.Tools.Round(time.Millisecond), rep.Timings.Kernel.Round(time.Millisecond),
		rep.Timings.Build.Round(time.Millisecond), rep.Timings.Pack.Round(time.Millisecond),
		rep.InitramfsBytes>>10, rep.Timings.Boot.Round(time.Millisecond))
	if testing.Verbose() {
		t.Logf("guest console:\n%s", console.String())
	}
}

// tWriter sends log lines to t.Log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

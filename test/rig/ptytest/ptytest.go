// Package ptytest gives tests serial devices they hold both ends of:
// pseudo-terminal pairs (hw/serialport.OpenPTY) closed when the test ends,
// and optionally a device (a Modbus slave simulator, an echo) played on
// the far end meanwhile.
package ptytest

import (
	"context"
	"os"
	"testing"

	"github.com/fleet/fleet/hw/serialport"
)

// Open opens a pty pair: ctl is the end the test plays the device on, path
// the device the code under test opens. The pair is closed when the test
// ends, after the cleanups registered later (the code under test's ports).
func Open(tb testing.TB) (ctl *os.File, path string) {
	tb.Helper()
	ctl, path, err := serialport.OpenPTY()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ctl.Close() })
	return ctl, path
}

// Serve is Open with serve playing the device on ctl in its own goroutine
// until the test ends: then its context is cancelled and, once serve has
// returned, the pair closed. It returns the device's path.
func Serve(tb testing.TB, serve func(ctx context.Context, ctl *os.File)) string {
	tb.Helper()
	ctl, path := Open(tb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); serve(ctx, ctl) }()
	tb.Cleanup(func() { cancel(); <-done })
	return path
}

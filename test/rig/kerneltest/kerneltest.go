// Package kerneltest is what the TestKernel* tests share. They run on a
// real Linux kernel inside the qemu rig's guest (make test-kernel, which
// sets FLEET_KERNEL_TEST=1): elsewhere they skip, and inside the guest a
// piece the rig should have set up fails them instead.
package kerneltest

import (
	"os"
	"testing"
)

// Require skips tb outside the rig's guest.
func Require(tb testing.TB) {
	tb.Helper()
	if os.Getenv("FLEET_KERNEL_TEST") != "1" {
		tb.Skip("needs the qemu rig: make test-kernel")
	}
}

// Env returns the environment variable key, which the rig sets in the
// guest, and fails tb when it is empty.
func Env(tb testing.TB, key string) string {
	tb.Helper()
	v := os.Getenv(key)
	if v == "" {
		tb.Fatalf("%s is not set: the rig passes it to the guest", key)
	}
	return v
}

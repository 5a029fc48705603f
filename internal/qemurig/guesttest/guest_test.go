package guesttest

import (
	"os"
	"testing"
)

// inGuest skips the test outside the rig's guest.
func inGuest(t *testing.T) {
	t.Helper()
	if os.Getenv("FLEET_KERNEL_TEST") != "1" {
		t.Skip("kernel test: runs in the qemu rig (make test-kernel), FLEET_KERNEL_TEST=1")
	}
}

// mustEnv returns an environment variable the rig sets, failing when it
// is missing.
func mustEnv(t *testing.T, key string) string {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		t.Fatalf("%s is not set: the rig passes it to the guest", key)
	}
	return v
}

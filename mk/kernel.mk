# Kernel paths (SocketCAN CAN-FD on real controller drivers, GPIO on
# gpio-sim, netlink, 16550 UARTs, WireGuard) on a real Debian kernel under
# qemu: see docs/kernel-rig.md. Installs qemu-system-x86, busybox-static
# and the module build tools when missing (as root), caches the extracted
# kernel and the modules it builds from Debian's kernel source in
# .cache/qemurig/, builds static test binaries of every package with
# TestKernel* tests, boots them and fails when any fails in the guest.
# `make test` runs it among the end-to-end suites (test-e2e, Makefile).

.PHONY: test-kernel

test-kernel: ## every package's TestKernel* tests on a real Debian kernel under qemu (docs/kernel-rig.md)
	FLEET_QEMU=1 $(GO) test -count=1 -timeout 10m -run '^TestQEMURig$$' -v ./test/rig/qemurig/

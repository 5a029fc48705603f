// Package qemurig runs the agent's kernel code paths (SocketCAN CAN-FD on
// real CAN controller drivers, GPIO on the kernel's GPIO simulator,
// netlink, 16550 UARTs through the 8250 driver, WireGuard) on a real
// Debian kernel booted under qemu with TCG.
//
// The rig fetches Debian's linux-image-amd64 with apt-get download, keeps
// only vmlinuz and the modules the tests need (resolved with their
// dependencies from each module's own modinfo), and builds the modules
// that kernel does not ship (gpio-sim, ctucanfd) out of tree from Debian's
// headers and kernel source of the same version (BuildSourceModules). It
// builds static test binaries of the packages holding TestKernel* tests,
// packs them with busybox and the modules into a gzip'd newc initramfs,
// and boots it with qemu's CTU CAN FD and Kvaser CAN cards. The guest's
// init loads the modules, runs every test binary with FLEET_KERNEL_TEST=1
// and prints one result marker per binary on the console, which the host
// parses. The guest's second UART (ttyS1) is wired through a qemu socket
// chardev to a Modbus slave simulator running on the host.
//
// Nothing here runs unless asked: the host-side test in this package boots
// qemu only with FLEET_QEMU=1, which make test-kernel sets.
package qemurig

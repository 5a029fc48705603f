// Package guesttest holds the qemu rig's own kernel tests: TestKernel*
// tests that run inside the rig's guest (FLEET_KERNEL_TEST=1) on a real
// Debian kernel, covering what the drivers' own kernel tests do not reach
// from the outside: the rig's wiring (modules, vcan with the CAN-FD MTU,
// the 16550 UART to the host's Modbus simulator, WireGuard through
// wgctrl). Outside the guest they skip; inside it a missing piece fails.
package guesttest

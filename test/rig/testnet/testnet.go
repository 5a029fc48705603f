// Package testnet picks loopback ports for the servers tests start.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePort returns a loopback TCP port nobody listens on, below the
// kernel's ephemeral range: a server restarted on the same port finds it
// still free (a port from the ephemeral range could meanwhile become the
// source port of some outgoing connection).
func FreePort(tb testing.TB) int {
	tb.Helper()
	port, err := Port()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

// Port is FreePort for a program that is not a test (a benchmark).
func Port() (int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 12000 {
				low = n
			}
		}
	}
	for range 100 {
		port := 10000 + rand.IntN(low-10000)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port below %d", low)
}

// FreeAddr is "127.0.0.1:<FreePort>".
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(tb))
}

// Addr is FreeAddr for a program that is not a test.
func Addr() (string, error) {
	port, err := Port()
	return fmt.Sprintf("127.0.0.1:%d", port), err
}

// Package redistest runs a throwaway redis-server for tests: Debian's
// redis-server (installed when missing), on its own loopback port, with
// its files in a temporary directory, no persistence, stopped when the
// test ends. Stop and Start again keep the port, so a test can take Redis
// away and bring it back.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/debpkg"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/testnet"
)

// Server is one redis-server process.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	proc *fleetproc.Proc
}

// Start starts a redis-server on a free loopback port. It is stopped when
// the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{tb: tb, bin: debpkg.Need(tb, "redis-server", "redis-server"), dir: tb.TempDir()}
	for attempt := 0; ; attempt++ {
		s.port = testnet.FreePort(tb)
		err := s.start()
		if err == nil {
			break
		}
		if attempt == 4 {
			tb.Fatalf("redis-server: %v", err)
		}
	}
	tb.Cleanup(s.Stop)
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the redis:// URL of database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Restart starts the server again on the same port after Stop.
func (s *Server) Restart() {
	s.tb.Helper()
	if err := s.start(); err != nil {
		s.tb.Fatalf("redis-server restart: %v", err)
	}
}

func (s *Server) start() error {
	log := filepath.Join(s.dir, "redis.log") // redis logs to its stdout
	proc, err := fleetproc.Run("redis-server", log, nil, s.bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", "", "--protected-mode", "yes")
	if err != nil {
		return err
	}
	s.proc = proc
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if proc.Exited() {
			b, _ := os.ReadFile(log)
			return fmt.Errorf("exited: %s", tail(b))
		}
		if ping(s.Addr()) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	proc.Kill()
	return fmt.Errorf("no PONG on %s within 10s", s.Addr())
}

// Stop stops the server (SIGTERM, then SIGKILL after 5s) and waits.
func (s *Server) Stop() {
	if s.proc != nil {
		s.proc.Shutdown(5 * time.Second)
	}
}

// ping sends PING in the inline protocol and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

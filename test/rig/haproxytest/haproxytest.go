// Package haproxytest runs Debian's haproxy (installed when missing) for
// tests, on a configuration file the project ships (deploy/haproxy): the
// file is used as it is, except for the addresses a test must choose. Each
// `bind` line listens on a free loopback port instead, the servers of the
// backend become the test's relays (keeping the first server line's
// options), the stats socket moves to a temporary directory, logs go to a
// file there, and a global maxconn above what this machine's open-file
// limit allows (haproxy needs two descriptors per connection) is lowered
// to fit.
package haproxytest

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/debpkg"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/testnet"
)

// Proxy is one haproxy process.
type Proxy struct {
	// Addr is the address of the (first) frontend's bind.
	Addr string
	// Config is the configuration haproxy runs (the rewritten file).
	Config string
	// Log is haproxy's log file.
	Log string

	socket string
	proc   *fleetproc.Proc
}

// Start runs haproxy on cfgPath with the backend's servers replaced by
// servers (host:port each, named relay1, relay2, ...). It returns once the
// frontend accepts connections and stops haproxy when the test ends.
func Start(tb testing.TB, cfgPath string, servers []string) *Proxy {
	tb.Helper()
	p, err := Run(cfgPath, servers, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Stop)
	return p
}

// Run is Start for a program that is not a test (a benchmark): its files
// go to dir, and the caller stops it.
func Run(cfgPath string, servers []string, dir string) (*Proxy, error) {
	bin, err := debpkg.Find("haproxy", "haproxy")
	if err != nil {
		return nil, err
	}
	src, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	addr, err := testnet.Addr()
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: addr, socket: filepath.Join(dir, "admin.sock"), Log: filepath.Join(dir, "haproxy.log")}
	cfg, err := rewrite(string(src), p.Addr, p.socket, servers)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", cfgPath, err)
	}
	p.Config = filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(p.Config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(bin, "-c", "-f", p.Config).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("haproxy -c: %v\n%s\n%s", err, out, cfg)
	}
	if p.proc, err = fleetproc.Run("haproxy", p.Log, nil, bin, "-db", "-f", p.Config); err != nil {
		return nil, err
	}
	// Ready: the frontend listens and the stats socket (when configured)
	// answers: haproxy makes them one after the other, and States reads
	// the socket at once.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err == nil {
			c.Close()
			if !strings.Contains(cfg, "stats socket "+p.socket) {
				return p, nil
			}
			if c, err = net.DialTimeout("unix", p.socket, time.Second); err == nil {
				c.Close()
				return p, nil
			}
		}
		if p.proc.Exited() {
			b, _ := os.ReadFile(p.Log)
			return nil, fmt.Errorf("haproxy exited: %s", b)
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("haproxy not listening on %s", p.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is haproxy's process id.
func (p *Proxy) Pid() int { return p.proc.Pid() }

// rewrite adapts a shipped configuration to a test: see the package doc.
func rewrite(cfg, bind, socket string, servers []string) (string, error) {
	var out []string
	var section string
	binds, serverOpts, replaced := 0, "", false
	for _, line := range strings.Split(cfg, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
			section = f[0]
		}
		switch {
		case len(f) >= 2 && f[0] == "bind" && section == "frontend":
			if binds++; binds > 1 {
				continue // one frontend address in tests
			}
			line = "    bind " + bind
		case len(f) == 2 && f[0] == "maxconn" && section == "global":
			if n, err := strconv.Atoi(f[1]); err == nil && n > maxConnFit() {
				line = fmt.Sprintf("    maxconn %d", maxConnFit())
			}
		case len(f) >= 2 && f[0] == "stats" && f[1] == "socket":
			line = "    stats socket " + socket + " mode 600 level admin"
		case len(f) >= 3 && f[0] == "server" && section == "backend":
			if replaced {
				continue
			}
			replaced = true
			serverOpts = strings.Join(f[3:], " ")
			for i, s := range servers {
				out = append(out, strings.TrimRight(fmt.Sprintf("    server relay%d %s %s", i+1, s, serverOpts), " "))
			}
			continue
		}
		out = append(out, line)
	}
	if binds == 0 || !replaced {
		return "", fmt.Errorf("no frontend bind or no backend server line to replace")
	}
	return strings.Join(out, "\n"), nil
}

// maxConnFit is the largest maxconn this process's file limit holds.
func maxConnFit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1000
	}
	return int(lim.Max-200) / 2
}

// Stop stops haproxy (SIGTERM; SIGKILL after 5s).
func (p *Proxy) Stop() { p.proc.Shutdown(5 * time.Second) }

// States returns each backend server's status as the stats socket reports
// it ("UP", "DOWN", "UP 1/2", "MAINT", ...), by server name.
func (p *Proxy) States(tb testing.TB) map[string]string {
	tb.Helper()
	st, err := p.Status()
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// Status is States for a program that is not a test.
func (p *Proxy) Status() (map[string]string, error) {
	rows, err := p.command("show stat")
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(rows, "# ")))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil || len(recs) < 1 {
		return nil, fmt.Errorf("show stat: %v: %q", err, rows)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	out := map[string]string{}
	for _, rec := range recs[1:] {
		if len(rec) <= col["status"] {
			continue
		}
		name := rec[col["svname"]]
		if name == "FRONTEND" || name == "BACKEND" {
			continue
		}
		out[name] = rec[col["status"]]
	}
	return out, nil
}

// command sends one command to the stats socket and returns the answer.
func (p *Proxy) command(cmd string) (string, error) {
	c, err := net.DialTimeout("unix", p.socket, 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("stats socket: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(cmd + "\n")); err != nil {
		return "", err
	}
	var b strings.Builder
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String(), nil
}

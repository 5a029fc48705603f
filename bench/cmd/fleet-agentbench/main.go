// Command fleet-agentbench measures fleet-agent's footprint at its defaults: it
// runs the real binary (--hw sim, IG-500, default heartbeat and metrics
// interval) against a relay for a fixed period and reads the process's RSS
// from /proc/PID/status and its CPU time from /proc/PID/stat. The relay is
// the real bin/fleet-relay when its agent endpoint answers, otherwise an
// in-process websocket sink speaking shared/protocol (the output says
// which). A warning is printed when the agent's link went down.
// `make bench-agent` runs it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/logbuf"
)

func main() {
	agentBin := flag.String("agent", "bin/fleet-agent", "fleet-agent binary")
	relayBin := flag.String("relay", "bin/fleet-relay", "fleet-relay binary (a sink is used when it cannot serve agents)")
	period := flag.Duration("period", 60*time.Second, "measurement period")
	warmup := flag.Duration("warmup", 5*time.Second, "time before the first reading")
	flag.Parse()
	if err := run(*agentBin, *relayBin, *period, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-agentbench:", err)
		os.Exit(1)
	}
}

func run(agentBin, relayBin string, period, warmup time.Duration) error {
	dir, err := os.MkdirTemp("", "agentbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	url, token, kind, stopRelay, err := realRelay(ctx, relayBin, dir)
	if err != nil {
		fmt.Printf("agent bench: real relay unavailable (%v); using the in-process websocket sink\n", err)
		url, token, stopRelay, err = sink()
		if err != nil {
			return err
		}
		kind = "in-process websocket sink"
	}
	defer stopRelay()

	cmd := exec.Command(agentBin, "--relay", url, "--token", token, "--hw", "sim", "--model", "IG-500",
		"--state-dir", filepath.Join(dir, "agent"), "--log-level", "warn")
	agentLog := &logbuf.Buffer{} // the agent's stderr while it runs
	cmd.Stderr = agentLog
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid

	time.Sleep(warmup)
	cpu0, err := cpuTicks(pid)
	if err != nil {
		return err
	}
	t0 := time.Now()
	var peak int64
	for time.Since(t0) < period {
		time.Sleep(time.Second)
		rss, _, err := rssKiB(pid)
		if err != nil {
			return err
		}
		peak = max(peak, rss)
	}
	cpu1, err := cpuTicks(pid)
	if err != nil {
		return err
	}
	elapsed := time.Since(t0)
	rss, hwm, err := rssKiB(pid)
	if err != nil {
		return err
	}
	if n := strings.Count(agentLog.String(), "relay link down"); n > 0 {
		fmt.Printf("agent bench: WARNING: the agent lost or never got its relay link (%d times); figures are for a disconnected agent\n%s", n, agentLog.String())
	}
	const hz = 100 // USER_HZ on Linux
	cpuPct := 100 * float64(cpu1-cpu0) / hz / elapsed.Seconds()

	fmt.Printf("agent bench: fleet-agent --hw sim, IG-500, defaults (heartbeat 30s, metrics 5m), %v against the %s\n", period, kind)
	fmt.Printf("  agent RSS         %6.2f MiB (peak sampled %.2f MiB, VmHWM %.2f MiB)   target < 15 MiB   %s\n",
		mib(rss), mib(peak), mib(hwm), verdict(mib(max(peak, rss)) < 15))
	fmt.Printf("  agent CPU         %6.3f %% of a core over %v               target < 0.5 %%    %s\n",
		cpuPct, elapsed.Round(time.Second), verdict(cpuPct < 0.5))
	notes := fmt.Sprintf("--hw sim, IG-500, defaults (heartbeat 30s, metrics 5m), %v against the %s", period, kind)
	if n := strings.Count(agentLog.String(), "relay link down"); n > 0 {
		notes += fmt.Sprintf("; the relay link went down %d times", n)
	}
	return benchreport.Record(
		benchreport.Row{Area: "agent", Figure: "fleet-agent RSS at defaults (largest sampled)", Unit: "MiB", Measured: mib(max(peak, rss)),
			Target: &benchreport.Target{Op: benchreport.Below, Value: 15}, Notes: fmt.Sprintf("%s; VmHWM %.2f MiB", notes, mib(hwm))},
		benchreport.Row{Area: "agent", Figure: "fleet-agent CPU at defaults", Unit: "% of a core", Measured: cpuPct,
			Target: &benchreport.Target{Op: benchreport.Below, Value: 0.5}, Notes: notes})
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

func verdict(ok bool) string {
	if ok {
		return "OK"
	}
	return "OVER TARGET"
}

// rssKiB reads VmRSS and VmHWM from /proc/PID/status.
func rssKiB(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("agent exited? %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm, nil
}

// cpuTicks returns utime+stime from /proc/PID/stat.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("agent exited? %w", err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("short stat")
	}
	// Fields after the command: state(0) ... utime(11) stime(12).
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, nil
}

// realRelay starts bin/fleet-relay with one organization and device and
// checks that its agent endpoint exists.
func realRelay(ctx context.Context, bin, dir string) (url, token, kind string, stop func(), err error) {
	if _, err := os.Stat(bin); err != nil {
		return "", "", "", nil, err
	}
	db := filepath.Join(dir, "relay.db")
	var org struct{ ID string }
	if err := runJSON(&org, bin, "org", "create", "--db", db, "--name", "bench", "--json"); err != nil {
		return "", "", "", nil, err
	}
	var dev struct{ Token string }
	if err := runJSON(&dev, bin, "device", "add", "--db", db, "--org", org.ID, "--name", "bench-gw", "--serial", "BENCH-1", "--model", "IG-500", "--json"); err != nil {
		return "", "", "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", "", nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.CommandContext(ctx, bin, "serve", "--db", db, "--listen", addr, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", "", "", nil, err
	}
	stop = func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }
	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Any answer means it listens (the API answers 401 without a key).
		resp, err := http.Get(base + "/api/v1/public/devices")
		if err == nil {
			resp.Body.Close()
			return base, dev.Token, "real fleet-relay (SQLite)", stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", "", "", nil, fmt.Errorf("relay did not start: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func runJSON(v any, bin string, args ...string) error {
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		return fmt.Errorf("%s %s: %w", bin, strings.Join(args[:2], " "), err)
	}
	return json.Unmarshal(bytes.TrimSpace(out), v)
}

// sink is a minimal relay: Welcome, Ack for every batch, nothing stored.
func sink() (url, token string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{protocol.Subprotocol}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(protocol.MaxMessageBytes)
		for {
			_, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			var m protocol.Message
			if json.Unmarshal(b, &m) != nil {
				return
			}
			var reply any
			switch m.Type {
			case protocol.TypeHello:
				reply = protocol.Message{Type: protocol.TypeWelcome, Welcome: &protocol.Welcome{DeviceID: "bench"}}
			case protocol.TypeRecords:
				reply = protocol.Message{Type: protocol.TypeAck, Ack: &protocol.Ack{Seq: m.Records.Items[len(m.Records.Items)-1].Seq}}
			}
			if reply != nil {
				out, _ := json.Marshal(reply)
				if c.Write(r.Context(), websocket.MessageText, out) != nil {
					return
				}
			}
		}
	})}
	go srv.Serve(l)
	return "http://" + l.Addr().String(), "bench-token", func() { srv.Close() }, nil
}

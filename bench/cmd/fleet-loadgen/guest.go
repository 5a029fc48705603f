package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/test/rig/qemurig"
)

// rowMarker starts each report row the guest prints on its console.
const rowMarker = "FLEET-ROW "

// runGuest measures the capacity figures (agents connected to one relay at
// once, the relay's RSS holding them) when this host cannot: the relay
// needs one descriptor per agent, and a sandbox whose hard RLIMIT_NOFILE
// is at or below the target, without CAP_SYS_RESOURCE to raise it, caps
// the host's run. It boots the qemu rig's Debian kernel (under TCG, or KVM
// when asked) with a static build of this load generator, raises
// the limit there as root, runs `fleet-loadgen bench --connect-only` (relay
// process and agents over the guest's loopback) and records the rows the
// guest prints.
func runGuest(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("guest", flag.ContinueOnError)
	binary := fs.String("binary", "", "static linux/amd64 build of fleet-loadgen to run in the guest (make bench-agentlink builds one)")
	agents := fs.Int("agents", targetAgents, "agents to connect in the guest")
	memory := fs.String("memory", "6G", "guest memory (qemu -m)")
	cpus := fs.Int("cpus", 2, "guest CPUs")
	root := fs.String("root", ".", "module root; the rig's kernel cache is ROOT/.cache/qemurig")
	always := fs.Bool("always", false, "run even when this host's RLIMIT_NOFILE holds every agent (its own run then records the capacity rows)")
	timeout := fs.Duration("timeout", 10*time.Minute, "bound on the whole guest run")
	verbose := fs.Bool("v", false, "print the guest's console as it arrives")
	kvm := fs.Bool("kvm", false, "use KVM where /dev/kvm is usable (TCG otherwise); off by default: nested KVM in a VM may hang at boot")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" {
		return errors.New("guest: --binary is required")
	}
	if *agents <= 0 {
		return errors.New("guest: --agents must be positive")
	}
	limit, err := raiseNoFile()
	if err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE: %w", err)
	}
	if !*always && uint64(*agents)+fdReserve <= limit {
		fmt.Printf("guest: not needed: RLIMIT_NOFILE (%d) holds %d agents on this host, whose run recorded the capacity figures\n", limit, *agents)
		return nil
	}
	nofile := *agents + 4096
	cfg := qemurig.Config{
		Root:    *root,
		Memory:  *memory,
		CPUs:    *cpus,
		KVM:     *kvm,
		Timeout: *timeout,
		NoTests: true,
		Files:   []qemurig.GuestFile{{Path: "bin/fleet-loadgen", Host: *binary}},
		Command: guestScript(nofile, *agents),
		Log:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if *verbose {
		cfg.Console = os.Stdout
	}
	fmt.Printf("guest: this host's RLIMIT_NOFILE is %d; measuring %d agents in a qemu guest (%s, %d CPUs) with the limit at %d\n", limit, *agents, *memory, *cpus, nofile)
	rep, runErr := qemurig.Run(ctx, cfg)
	var console string
	if rep != nil && rep.Outcome != nil {
		console = rep.Outcome.Console
		if !*verbose {
			printGuestOutput(console)
		}
	}
	if runErr != nil {
		return fmt.Errorf("guest: %w", runErr)
	}
	rows, err := parseGuestRows(console)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("measured in a qemu guest (%s, %s %s, %d CPUs, %s) with RLIMIT_NOFILE at %d: this host's hard limit is %d",
		strings.ToUpper(rep.Accel), rep.Kernel.Package, rep.Kernel.Version, *cpus, *memory, nofile, limit)
	if rep.NoKVM != "" {
		where += "; no KVM (" + rep.NoKVM + ")"
	}
	for i := range rows {
		rows[i].Notes += "; " + where
	}
	fmt.Printf("guest: %s; booted and measured in %s\n", where, rep.Timings.Boot.Round(100*time.Millisecond))
	return benchreport.Record(rows...)
}

// guestScript is the shell script the guest runs: raise the limit, run the
// capacity measurement with its rows going to a file, print the rows.
func guestScript(nofile, agents int) string {
	return fmt.Sprintf(`set -e
ulimit -Hn %d
ulimit -Sn %d
echo "guest: RLIMIT_NOFILE $(ulimit -n), $(nproc) CPUs, $(awk '/MemTotal/ {print $2}' /proc/meminfo) kB of memory"
%s=/tmp/rows.jsonl /bin/fleet-loadgen bench --connect-only --agents %d --dial-concurrency 64 --connect-timeout 3m
while read -r row; do echo "%s$row"; done < /tmp/rows.jsonl
`, nofile, nofile, benchreport.EnvResults, agents, rowMarker)
}

// parseGuestRows reads the report rows the guest printed.
func parseGuestRows(console string) ([]benchreport.Row, error) {
	var rows []benchreport.Row
	for _, line := range strings.Split(console, "\n") {
		line = strings.TrimSpace(line)
		js, ok := strings.CutPrefix(line, rowMarker)
		if !ok {
			continue
		}
		var r benchreport.Row
		if err := json.Unmarshal([]byte(js), &r); err != nil {
			return nil, fmt.Errorf("guest: bad report row %q: %w", js, err)
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("guest: bad report row %q: %w", js, err)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, errors.New("guest: the guest printed no report rows")
	}
	return rows, nil
}

// printGuestOutput prints what the command printed in the guest (between
// its run and result markers), without the kernel's boot messages.
func printGuestOutput(console string) {
	in := false
	for _, line := range strings.Split(console, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, qemurig.MarkerRun+" "+qemurig.CommandResult):
			in = true
		case strings.HasPrefix(t, qemurig.MarkerResult+" "+qemurig.CommandResult):
			fmt.Println("  " + t)
			in = false
		case in && !strings.HasPrefix(t, rowMarker):
			fmt.Println("  | " + t)
		}
	}
}

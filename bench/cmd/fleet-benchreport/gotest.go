package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/test/rig/logbuf"
)

// goTest is `fleet-benchreport gotest --set NAME -- go test ...`.
func goTest(ctx context.Context, args []string) error {
	sets := metricSets()
	var names []string
	for n := range sets {
		names = append(names, n)
	}
	slices.Sort(names)
	fs := flag.NewFlagSet("gotest", flag.ContinueOnError)
	set := fs.String("set", "", "metric set: "+strings.Join(names, ", "))
	if err := fs.Parse(args); err != nil {
		return err
	}
	metrics, ok := sets[*set]
	if !ok {
		return fmt.Errorf("gotest: unknown metric set %q (known: %s)", *set, strings.Join(names, ", "))
	}
	if fs.NArg() == 0 {
		return errors.New("gotest: no command after --")
	}
	var out bytes.Buffer
	tail := &logbuf.Buffer{Max: 16 << 10}
	cmd := exec.CommandContext(ctx, fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdout = io.MultiWriter(os.Stdout, &out, tail)
	cmd.Stderr = io.MultiWriter(os.Stderr, tail)
	runErr := cmd.Run()
	rows, err := benchreport.FromGoTest(&out, metrics)
	if err != nil {
		return err
	}
	failed := runErr != nil
	for i := range rows {
		if rows[i].Error == "" {
			continue
		}
		failed = true
		if runErr != nil {
			rows[i].Error += ": " + lastLines(tail.String(), 3)
		}
		fmt.Fprintln(os.Stderr, "fleet-benchreport:", rows[i].Figure+":", rows[i].Error)
	}
	if err := benchreport.Record(rows...); err != nil {
		return err
	}
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "fleet-benchreport: go test:", runErr)
	}
	if failed {
		return errFailed
	}
	return nil
}

// agentSize is `fleet-benchreport agent-size [--limit BYTES] NAME=FILE...`:
// the static agent binaries' sizes beside the 15 MiB target of DESIGN.md.
func agentSize(args []string) error {
	fs := flag.NewFlagSet("agent-size", flag.ContinueOnError)
	limit := fs.Int64("limit", 15<<20, "target: each binary under this many bytes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("agent-size: no NAME=FILE")
	}
	limitMiB := float64(*limit) / (1 << 20)
	var rows []benchreport.Row
	for _, a := range fs.Args() {
		name, file, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("agent-size: %q is not NAME=FILE", a)
		}
		st, err := os.Stat(file)
		if err != nil {
			return fmt.Errorf("agent-size: %w", err)
		}
		row := benchreport.Row{Area: "agent", Figure: "static binary size, " + name, Unit: "MiB",
			Measured: float64(st.Size()) / (1 << 20), Target: &benchreport.Target{Op: benchreport.Below, Value: limitMiB},
			Notes: "CGO_ENABLED=0, -trimpath -ldflags='-s -w'"}
		res, err := row.Evaluate()
		if err != nil {
			return err
		}
		verdict := "OK"
		if res != benchreport.Pass {
			verdict = "OVER TARGET"
		}
		fmt.Printf("agent binary %-15s %6.2f MiB   target < %g MiB   %s\n", name, row.Measured, limitMiB, verdict)
		rows = append(rows, row)
	}
	return benchreport.Record(rows...)
}

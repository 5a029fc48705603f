package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/test/rig/logbuf"
)

// runAll is `fleet-benchreport run`: every target in turn, then the report.
func runAll(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	makeCmd := fs.String("make", "make", "make command (the Makefile passes $(MAKE))")
	md := fs.String("md", "bench/results.md", "Markdown report to write")
	work := fs.String("work", "bin/bench", "directory for the rows the benchmarks record")
	proc := fs.String("proc", "/proc", "proc file system to read the machine and its load from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	targets := fs.Args()
	mk := strings.Fields(*makeCmd)
	if len(targets) == 0 || len(mk) == 0 {
		return errors.New("run: no make command or no targets")
	}
	if err := os.MkdirAll(*work, 0o755); err != nil {
		return err
	}
	rowsPath, err := filepath.Abs(filepath.Join(*work, "rows.jsonl"))
	if err != nil {
		return err
	}
	if err := os.Remove(rowsPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}

	rep := benchreport.Report{Machine: describeMachine(ctx, *proc), Start: benchreport.ReadLoad(*proc, time.Now())}
	for _, t := range targets {
		if ctx.Err() != nil {
			break
		}
		fmt.Printf("== make %s\n", t)
		start := time.Now()
		tail := &logbuf.Buffer{Max: 16 << 10}
		cmd := exec.CommandContext(ctx, mk[0], append(mk[1:], "--no-print-directory", t)...)
		cmd.Stdout = io.MultiWriter(os.Stdout, tail)
		cmd.Stderr = io.MultiWriter(os.Stderr, tail)
		cmd.Env = append(os.Environ(), benchreport.EnvResults+"="+rowsPath, benchreport.EnvTarget+"="+t)
		err := cmd.Run()
		r := benchreport.Run{Bench: t, Seconds: time.Since(start).Seconds()}
		status := "ok"
		if err != nil {
			r.Status = -1
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ExitCode() > 0 {
				r.Status = ee.ExitCode()
			}
			r.Error = lastLines(tail.String(), 3)
			if r.Error == "" {
				r.Error = err.Error()
			}
			status = fmt.Sprintf("FAILED (exit status %d)", r.Status)
		}
		fmt.Printf("== make %s: %s in %s\n\n", t, status, time.Since(start).Round(time.Second))
		rep.Runs = append(rep.Runs, r)
	}
	rows, err := benchreport.ReadRows(rowsPath)
	if err != nil {
		return err
	}
	rep.Rows = rows
	rep.End = benchreport.ReadLoad(*proc, time.Now())

	if err := rep.WriteText(os.Stdout); err != nil {
		return err
	}
	if err := writeFile(*md, rep.WriteMarkdown); err != nil {
		return err
	}
	fmt.Printf("\nreport written to %s\n", *md)
	if rep.Failed() || ctx.Err() != nil {
		return errFailed
	}
	return nil
}

// describeMachine is the machine from procRoot, the Go version this
// command was built with (the one that built the benchmarks) and the
// commit of the working tree.
func describeMachine(ctx context.Context, procRoot string) benchreport.Machine {
	m := benchreport.ReadMachine(procRoot)
	m.Go = runtime.Version()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	return m
}

// writeFile writes path through a temporary file renamed into place.
func writeFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".results-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// lastLines is the last n lines of a failed benchmark's output that are
// not make's own (make only says which rule failed), joined into one.
func lastLines(out string, n int) string {
	var keep []string
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0 && len(keep) < n; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "make:") || strings.HasPrefix(l, "make[") {
			continue
		}
		keep = append([]string{l}, keep...)
	}
	s := strings.Join(keep, " / ")
	if len(s) > 400 {
		s = "…" + strings.ToValidUTF8(s[len(s)-400:], "")
	}
	return s
}

package qemurig

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Machine is one qemu-system-x86_64 run, under TCG unless told otherwise,
// without network, its first UART (ttyS0) as the console on qemu's stdout.
type Machine struct {
	// QEMU is the emulator binary.
	QEMU string
	// Accel is qemu's accelerator: "tcg" when empty, or "kvm" (with the
	// host's CPU model) where /dev/kvm is usable (see KVMUsable).
	Accel string
	// Kernel and Initrd are the boot files.
	Kernel, Initrd string
	// Memory is qemu's -m (512M when empty); CPUs its -smp (1 when 0).
	Memory string
	CPUs   int
	// Append is added to the kernel command line after
	// "console=ttyS0 panic=-1".
	Append string
	// Serial1Socket, when set, wires the guest's second UART (ttyS1) to a
	// unix socket qemu listens on; qemu waits for the host to connect
	// before it starts the guest, so nothing the guest sends is lost.
	Serial1Socket string
	// ExtraArgs are added to qemu's command line (devices, say).
	ExtraArgs []string
	// Console receives the console output as it arrives (optional).
	Console io.Writer
}

// Args returns qemu's command line.
func (m *Machine) Args() []string {
	mem := m.Memory
	if mem == "" {
		mem = "512M"
	}
	cpus := m.CPUs
	if cpus <= 0 {
		cpus = 1
	}
	cmdline := "console=ttyS0 panic=-1"
	if m.Append != "" {
		cmdline += " " + m.Append
	}
	accel := m.Accel
	if accel == "" {
		accel = "tcg"
	}
	args := []string{"-accel", accel}
	if accel == "kvm" {
		args = append(args, "-cpu", "host")
	}
	args = append(args,
		"-nographic", "-no-reboot",
		"-m", mem, "-smp", fmt.Sprint(cpus),
		"-nic", "none", "-monitor", "none",
		"-kernel", m.Kernel, "-initrd", m.Initrd, "-append", cmdline,
		"-serial", "stdio",
	)
	if m.Serial1Socket != "" {
		args = append(args,
			"-chardev", "socket,id=ttyS1,path="+m.Serial1Socket+",server=on,wait=on",
			"-serial", "chardev:ttyS1")
	}
	return append(args, m.ExtraArgs...)
}

// KVMUsable reports whether this process can open /dev/kvm, which qemu's
// kvm accelerator needs; when it cannot, say why.
func KVMUsable() (bool, string) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false, err.Error()
	}
	f.Close()
	return true, ""
}

// Run boots the machine and returns when the guest powers off, qemu
// exits, or ctx ends (qemu is killed then). When Serial1Socket is set,
// serial1 is called with the host end of ttyS1 once qemu listens; the
// connection is closed when the run ends. The returned outcome holds the
// console output even when err is not nil.
func (m *Machine) Run(ctx context.Context, serial1 func(ctx context.Context, conn net.Conn)) (*Outcome, error) {
	cmd := exec.Command(m.QEMU, m.Args()...)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	cmd.Stdin = devnull
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", m.QEMU, err)
	}
	exited := make(chan struct{})
	var waitErr error
	var console bytes.Buffer
	var mu sync.Mutex
	var firstLine, bootLine, doneLine time.Duration
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r") + "\n"
			since := time.Since(start)
			mu.Lock()
			console.WriteString(line)
			if firstLine == 0 {
				firstLine = since
			}
			if bootLine == 0 && strings.Contains(line, MarkerBoot+" ") {
				bootLine = since
			}
			if doneLine == 0 && strings.Contains(line, MarkerDone+" ") {
				doneLine = since
			}
			mu.Unlock()
			if m.Console != nil {
				_, _ = io.WriteString(m.Console, line)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()

	go func() {
		<-readDone
		waitErr = cmd.Wait()
		close(exited)
	}()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var serialWG sync.WaitGroup
	var serialErr error
	if m.Serial1Socket != "" {
		conn, err := dialWhileRunning(runCtx, m.Serial1Socket, exited)
		if err != nil {
			serialErr = err
			_ = cmd.Process.Kill()
		} else {
			serialWG.Add(1)
			go func() {
				defer serialWG.Done()
				if serial1 != nil {
					serial1(runCtx, conn)
				}
			}()
			defer conn.Close()
		}
	}

	killed := false
	select {
	case <-exited:
	case <-ctx.Done():
		killed = true
		_ = cmd.Process.Kill()
		<-exited
	}
	cancel()
	serialWG.Wait()

	mu.Lock()
	out := ParseConsole(console.String())
	mu.Unlock()
	out.Elapsed = time.Since(start)
	out.FirstOutputAt, out.BootAt, out.DoneAt = firstLine, bootLine, doneLine
	out.Stderr = strings.TrimSpace(stderr.String())
	switch {
	case serialErr != nil:
		return out, fmt.Errorf("qemu: ttyS1 chardev: %w (qemu stderr: %s)", serialErr, out.Stderr)
	case killed:
		return out, fmt.Errorf("qemu killed after %s: %w", out.Elapsed.Round(time.Second), ctx.Err())
	case waitErr != nil:
		return out, fmt.Errorf("qemu: %w (stderr: %s)", waitErr, out.Stderr)
	}
	return out, nil
}

// dialWhileRunning connects to qemu's chardev socket, retrying while qemu
// starts, and gives up when qemu exits or ctx ends.
func dialWhileRunning(ctx context.Context, path string, exited <-chan struct{}) (net.Conn, error) {
	var d net.Dialer
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := d.DialContext(dctx, "unix", path)
		cancel()
		if err == nil {
			return conn, nil
		}
		select {
		case <-exited:
			return nil, errors.New("qemu exited before its socket accepted a connection")
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Result is one test binary's outcome in the guest.
type Result struct {
	// Package is the import path (or "modules" for a module that did not load).
	Package string
	// Pass is true when the binary exited 0.
	Pass bool
	// Detail is the rest of the marker line (the exit status on failure).
	Detail string
}

// Outcome is what a guest run reported on its console.
type Outcome struct {
	// Console is the whole console output.
	Console string
	// Stderr is qemu's own error output.
	Stderr string
	// Booted is true when the init script started.
	Booted bool
	// BootLine is the FLEET-BOOT marker line (kernel release, CPUs, uptime).
	BootLine string
	// Results has one entry per FLEET-RESULT marker.
	Results []Result
	// Done is true when the guest printed its final marker.
	Done bool
	// DoneLine is the FLEET-DONE marker line.
	DoneLine string
	// Skipped are the guest's "--- SKIP: TestKernel..." lines and its
	// "no tests to run" warnings: a kernel test never skips in the guest.
	Skipped []string
	// Elapsed is the wall time from qemu's start to its exit; FirstOutputAt,
	// BootAt and DoneAt when the first console line, the boot marker and
	// the done marker arrived (0 when they did not).
	Elapsed, FirstOutputAt, BootAt, DoneAt time.Duration
}

// ansiRE matches the terminal escape sequences SeaBIOS and the kernel
// print on the console (they can precede the first marker on its line).
var ansiRE = regexp.MustCompile(`\x1b(\[[0-9;?]*[ -/]*[@-~]|[@-Z\\-_]|c)`)

// ParseConsole reads the markers out of console output. Result and done
// markers must start a line, so test output that merely mentions one does
// not count.
func ParseConsole(console string) *Outcome {
	o := &Outcome{Console: console}
	for _, line := range strings.Split(console, "\n") {
		line = strings.TrimSpace(ansiRE.ReplaceAllString(line, ""))
		if i := strings.Index(line, MarkerBoot+" "); i > 0 {
			// Only the init script prints it; the firmware's last line
			// may precede it without a newline.
			line = line[i:]
		}
		if strings.HasPrefix(line, "--- SKIP: TestKernel") || strings.HasPrefix(line, "testing: warning: no tests to run") {
			o.Skipped = append(o.Skipped, line)
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case MarkerBoot:
			o.Booted = true
			o.BootLine = line
		case MarkerResult:
			if len(fields) < 3 {
				continue
			}
			r := Result{Package: fields[1], Pass: fields[2] == "PASS"}
			r.Detail = strings.Join(fields[2:], " ")
			o.Results = append(o.Results, r)
		case MarkerDone:
			o.Done = true
			o.DoneLine = line
		}
	}
	return o
}

// Check returns nil when the guest booted, reported a passing result for
// every package in want, no failing result, no skipped kernel test, and
// finished; otherwise an error that says what went wrong, followed by the
// guest's console.
func (o *Outcome) Check(want []string) error {
	var problems []string
	if !o.Booted {
		problems = append(problems, "the guest never reached its init (no "+MarkerBoot+" line): boot failure")
	}
	seen := make(map[string]bool)
	for _, r := range o.Results {
		seen[r.Package] = true
		if !r.Pass {
			problems = append(problems, fmt.Sprintf("%s: %s", r.Package, r.Detail))
		}
	}
	for _, p := range want {
		if !seen[p] {
			problems = append(problems, fmt.Sprintf("%s: no result (the guest stopped before it finished)", p))
		}
	}
	for _, sk := range o.Skipped {
		problems = append(problems, "skipped in the guest, where kernel tests must run: "+sk)
	}
	if o.Booted && !o.Done {
		problems = append(problems, "the guest never printed "+MarkerDone)
	}
	if len(problems) == 0 {
		return nil
	}
	msg := "guest tests failed:\n  " + strings.Join(problems, "\n  ") + "\n--- guest console ---\n" + o.Console
	if o.Stderr != "" {
		msg += "\n--- qemu stderr ---\n" + o.Stderr
	}
	return errors.New(msg)
}

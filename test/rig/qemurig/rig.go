package qemurig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"
)

// Config configures a rig run.
type Config struct {
	// Root is the module's root directory (where go.mod is).
	Root string
	// CacheDir keeps the extracted kernel between runs
	// (Root/.cache/qemurig when empty).
	CacheDir string
	// WorkDir receives the test binaries and the initramfs (a temporary
	// directory is made and removed when empty).
	WorkDir string
	// Packages are the packages whose TestKernel* tests run in the guest;
	// when empty they are discovered (every package with a TestKernel*),
	// unless NoTests is set.
	Packages []string
	// NoTests boots the guest for its Command alone, without test binaries
	// and without the modules built from source.
	NoTests bool
	// Require are packages that must be among those run: the rig fails
	// when one has no TestKernel* test.
	Require []string
	// Modules are the kernel modules to load from the image package
	// (DefaultModules when empty).
	Modules []string
	// Source are the modules built from Debian's kernel source
	// (DefaultSourceModules when nil, none with NoTests).
	Source []SourceModule
	// CAN adds qemu's CAN controllers to the guest (see CANArgs): the CTU
	// CAN FD PCI card's two cores on one qemu CAN bus, which the guest
	// names can0 and can1 (FLEET_CAN_FD), and the Kvaser PCIcan card (an
	// SJA1000, classic CAN) on a bus of its own, can2 (FLEET_CAN_CLASSIC).
	CAN bool
	// Memory and CPUs size the guest (512M and 2 when empty).
	Memory string
	CPUs   int
	// KVM runs the guest under qemu's kvm accelerator when /dev/kvm is
	// usable (TCG otherwise, and always when false); Report.Accel says
	// which ran.
	KVM bool
	// Files are host files placed in the guest (executables).
	Files []GuestFile
	// Command is a shell script the guest runs after the tests; its exit
	// status is the result named CommandResult.
	Command string
	// Timeout bounds the qemu run; qemu is killed after it (150 s when 0).
	Timeout time.Duration
	// TestTimeout bounds each test binary in the guest (60 s when 0).
	TestTimeout time.Duration
	// Env is exported to the guest's tests.
	Env map[string]string
	// Serial1 serves the guest's ttyS1 from the host (optional).
	Serial1 func(ctx context.Context, conn net.Conn)
	// Console receives the guest console live (optional).
	Console io.Writer
	// Log receives progress lines and timings.
	Log *slog.Logger
}

// Timings are the durations of the rig's steps.
type Timings struct {
	Tools, Kernel, Build, Pack, Boot time.Duration
}

// Report is the result of a rig run.
type Report struct {
	// Kernel is the Debian kernel that ran.
	Kernel *Kernel
	// Tests are the binaries that ran in the guest.
	Tests []TestBinary
	// InitramfsBytes is the size of the gzip'd initramfs.
	InitramfsBytes int64
	// Outcome is what the guest reported (nil when it never booted).
	Outcome *Outcome
	// Accel is the accelerator qemu ran with ("tcg" or "kvm"), and
	// NoKVM why kvm was not used when it was asked for.
	Accel, NoKVM string
	// Timings are the steps' durations.
	Timings Timings
}

// CANArgs add qemu's CTU CAN FD PCI card with both its cores on one CAN
// bus, and the Kvaser PCIcan card on another.
var CANArgs = []string{
	"-object", "can-bus,id=canfd", "-device", "ctucan_pci,canbus0=canfd,canbus1=canfd",
	"-object", "can-bus,id=canclassic", "-device", "kvaser_pci,canbus=canclassic",
}

// The names the guest kernel gives the CAN controllers of CANArgs: the
// modules built from source load first, so the CTU CAN FD cores come
// before the Kvaser card.
const (
	FDCANInterfaces     = "can0 can1"
	ClassicCANInterface = "can2"
)

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Run prepares everything and boots the guest. It returns an error when
// the rig cannot start (no qemu, no kernel package, a test binary that does
// not build, a boot failure) or when any guest test fails; the error then
// carries the guest's console.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	rep := &Report{}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for k := range cfg.Env {
		if !envKeyRE.MatchString(k) {
			return rep, fmt.Errorf("qemurig: bad environment variable name %q", k)
		}
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.Root, ".cache", "qemurig")
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 2
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 150 * time.Second
	}
	if cfg.TestTimeout == 0 {
		cfg.TestTimeout = 60 * time.Second
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return rep, fmt.Errorf("qemurig: cache: %w", err)
	}
	work := cfg.WorkDir
	if work == "" {
		tmp, err := os.MkdirTemp("", "qemurig-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(tmp)
		work = tmp
	}

	t0 := time.Now()
	qemu, err := EnsureQEMU(ctx, log)
	if err != nil {
		return rep, fmt.Errorf("qemurig: cannot start the rig: %w", err)
	}
	busybox, err := EnsureBusybox(ctx, log, cfg.CacheDir)
	if err != nil {
		return rep, fmt.Errorf("qemurig: cannot start the rig: %w", err)
	}
	rep.Timings.Tools = time.Since(t0)

	t0 = time.Now()
	source := cfg.Source
	if source == nil && !cfg.NoTests {
		source = DefaultSourceModules
	}
	k, err := FetchKernel(ctx, KernelOptions{
		CacheDir: filepath.Join(cfg.CacheDir, "kernel"), Modules: cfg.Modules,
		Source: source, SourceCacheDir: filepath.Join(cfg.CacheDir, "modules"), Log: log})
	if err != nil {
		return rep, fmt.Errorf("qemurig: cannot start the rig: kernel: %w", err)
	}
	rep.Kernel = k
	rep.Timings.Kernel = time.Since(t0)

	t0 = time.Now()
	goTool, err := exec.LookPath("go")
	if err != nil {
		return rep, fmt.Errorf("qemurig: cannot start the rig: %w", err)
	}
	pkgs := cfg.Packages
	if cfg.NoTests {
		if len(pkgs) > 0 || len(cfg.Require) > 0 || cfg.Command == "" {
			return rep, errors.New("qemurig: NoTests runs a Command and no packages")
		}
	} else if len(pkgs) == 0 {
		if pkgs, err = DiscoverKernelTests(ctx, goTool, cfg.Root); err != nil {
			return rep, fmt.Errorf("qemurig: %w", err)
		}
	}
	for _, r := range cfg.Require {
		found := false
		for _, p := range pkgs {
			found = found || p == r
		}
		if !found {
			return rep, fmt.Errorf("qemurig: package %s has no TestKernel* test to run in the guest", r)
		}
	}
	if len(pkgs) == 0 && !cfg.NoTests {
		return rep, errors.New("qemurig: no package has TestKernel* tests")
	}
	var bins []TestBinary
	if len(pkgs) > 0 {
		log.Info("building guest test binaries", "packages", pkgs)
		if bins, err = BuildTests(ctx, goTool, cfg.Root, work, pkgs); err != nil {
			return rep, fmt.Errorf("qemurig: %w", err)
		}
	}
	rep.Tests = bins
	rep.Timings.Build = time.Since(t0)

	t0 = time.Now()
	initrd := filepath.Join(work, "initramfs.cpio.gz")
	f, err := os.Create(initrd)
	if err != nil {
		return rep, err
	}
	env := make(map[string]string, len(cfg.Env)+1)
	for key, v := range cfg.Env {
		env[key] = v
	}
	if cfg.CAN {
		env["FLEET_CAN_FD"] = FDCANInterfaces
		env["FLEET_CAN_CLASSIC"] = ClassicCANInterface
	}
	ir := &Initramfs{Busybox: busybox, Kernel: k, Tests: bins, Env: env, TestTimeout: cfg.TestTimeout,
		Files: cfg.Files, Command: cfg.Command}
	if err := ir.Write(f); err != nil {
		f.Close()
		return rep, fmt.Errorf("qemurig: initramfs: %w", err)
	}
	if err := f.Close(); err != nil {
		return rep, err
	}
	if st, err := os.Stat(initrd); err == nil {
		rep.InitramfsBytes = st.Size()
	}
	rep.Timings.Pack = time.Since(t0)

	t0 = time.Now()
	boot := k.Vmlinux
	if boot == "" {
		boot = k.Vmlinuz
	}
	rep.Accel = "tcg"
	if cfg.KVM {
		if ok, why := KVMUsable(); ok {
			rep.Accel = "kvm"
		} else {
			rep.NoKVM = why
			log.Warn("kvm not usable, running under TCG", "reason", why)
		}
	}
	m := &Machine{
		QEMU: qemu, Accel: rep.Accel, Kernel: boot, Initrd: initrd,
		Memory: cfg.Memory, CPUs: cfg.CPUs, Append: "quiet loglevel=3",
		Console: cfg.Console,
	}
	if cfg.CAN {
		m.ExtraArgs = append(m.ExtraArgs, CANArgs...)
	}
	if cfg.Serial1 != nil {
		// A unix socket path must stay short (108 bytes).
		sockDir, err := os.MkdirTemp("", "qr")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(sockDir)
		m.Serial1Socket = filepath.Join(sockDir, "ttyS1")
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	log.Info("booting", "kernel", boot, "initramfs_bytes", rep.InitramfsBytes, "cpus", cfg.CPUs)
	out, runErr := m.Run(runCtx, cfg.Serial1)
	rep.Outcome = out
	rep.Timings.Boot = time.Since(t0)
	want := make([]string, 0, len(bins))
	for _, b := range bins {
		want = append(want, b.Package)
	}
	if cfg.Command != "" {
		want = append(want, CommandResult)
	}
	if out == nil {
		return rep, fmt.Errorf("qemurig: %w", runErr)
	}
	if err := out.Check(want); err != nil {
		if runErr != nil {
			return rep, fmt.Errorf("qemurig: %v\n%w", runErr, err)
		}
		return rep, fmt.Errorf("qemurig: %w", err)
	}
	if runErr != nil {
		return rep, fmt.Errorf("qemurig: %w\n--- guest console ---\n%s", runErr, out.Console)
	}
	return rep, nil
}

package qemurig

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Initramfs describes the guest's root file system.
type Initramfs struct {
	// Busybox is a static busybox binary; its applets serve the init script.
	Busybox string
	// Kernel supplies the modules loaded at boot, in its load order.
	Kernel *Kernel
	// Tests are run in order, each with -test.v and -test.run=^TestKernel.
	Tests []TestBinary
	// Env is exported to the tests (FLEET_KERNEL_TEST=1 always is).
	Env map[string]string
	// TestTimeout bounds each test binary (-test.timeout).
	TestTimeout time.Duration
	// Files are host files added to the guest's root (executable).
	Files []GuestFile
	// Command, when set, is a shell script the guest runs after the tests
	// (in /tmp, with the same environment); its exit status is the result
	// of the package named CommandResult.
	Command string
}

// GuestFile is a host file placed in the guest.
type GuestFile struct {
	// Path is where it lands, relative to the guest's root ("bin/tool").
	Path string
	// Host is the file on the host.
	Host string
}

// CommandResult is the name the guest's result marker gives the command.
const CommandResult = "command"

// Markers the guest prints on its console, one per line.
const (
	MarkerBoot   = "FLEET-BOOT"
	MarkerModule = "FLEET-MODULE"
	MarkerRun    = "FLEET-RUN"
	MarkerResult = "FLEET-RESULT"
	MarkerDone   = "FLEET-DONE"
)

// initScript is the guest's /init. It mounts the pseudo file systems,
// loads the modules in dependency order, mounts configfs when a module
// brought it (gpio-sim is set up through it), brings up loopback and runs each
// test binary, then the command if there is one, printing a result marker
// for each and a final done marker, then powers off (the host's qemu runs
// with -no-reboot).
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /tmp /run
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
echo
echo "FLEET-BOOT kernel=$(uname -r) cpus=$(nproc) uptime=$(cut -d' ' -f1 /proc/uptime)"
pass=0
fail=0
# result NAME STATUS prints NAME's result marker and counts it.
result() {
	if [ "$2" = 0 ]; then
		echo "FLEET-RESULT $1 PASS"
		pass=$((pass+1))
	else
		echo "FLEET-RESULT $1 FAIL exit=$2"
		fail=$((fail+1))
	fi
}
while read m; do
	if insmod "/modules/$m.ko"; then
		echo "FLEET-MODULE $m loaded"
	else
		echo "FLEET-MODULE $m FAIL"
		echo "FLEET-RESULT modules FAIL insmod $m"
		fail=$((fail+1))
	fi
done < /modules/order
grep -qw configfs /proc/filesystems && mount -t configfs configfs /sys/kernel/config
ip link set lo up
. /fleet.env
while read bin pkg; do
	echo "FLEET-RUN $pkg"
	cd /tmp
	"/tests/$bin" -test.v -test.run '^TestKernel' -test.timeout "$FLEET_GUEST_TEST_TIMEOUT" < /dev/null 2>&1
	result "$pkg" $?
done < /tests/list
if [ -f /command.sh ]; then
	echo "FLEET-RUN command"
	cd /tmp
	sh /command.sh < /dev/null 2>&1
	result command $?
fi
echo "FLEET-DONE pass=$pass fail=$fail uptime=$(cut -d' ' -f1 /proc/uptime)"
sync
poweroff -f
`

// rootDirs are the directories every guest root has.
var rootDirs = []string{"bin", "dev", "proc", "sys", "tmp", "run", "modules", "tests"}

// Write writes the gzip'd newc archive to w.
func (i *Initramfs) Write(w io.Writer) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	c := NewCPIOWriter(zw)
	dirs := make(map[string]bool, len(rootDirs))
	for _, d := range rootDirs {
		if err := c.Dir(d, 0o755); err != nil {
			return err
		}
		dirs[d] = true
	}
	if err := addHostFile(c, "bin/busybox", i.Busybox, 0o755); err != nil {
		return err
	}
	if err := c.Symlink("bin/sh", "busybox"); err != nil {
		return err
	}
	if err := c.File("init", 0o755, []byte(initScript)); err != nil {
		return err
	}
	for _, m := range i.Kernel.Modules {
		if err := addHostFile(c, "modules/"+m+".ko", i.Kernel.ModulePath(m), 0o644); err != nil {
			return err
		}
	}
	if err := c.File("modules/order", 0o644, []byte(strings.Join(i.Kernel.Modules, "\n")+"\n")); err != nil {
		return err
	}
	var list strings.Builder
	for _, t := range i.Tests {
		name := filepath.Base(t.Path)
		if err := addHostFile(c, "tests/"+name, t.Path, 0o755); err != nil {
			return err
		}
		fmt.Fprintf(&list, "%s %s\n", name, t.Package)
	}
	if err := c.File("tests/list", 0o644, []byte(list.String())); err != nil {
		return err
	}
	if err := c.File("fleet.env", 0o644, []byte(i.envFile())); err != nil {
		return err
	}
	for _, f := range i.Files {
		name := path.Clean(strings.TrimPrefix(f.Path, "/"))
		if name == "." || strings.HasPrefix(name, "../") || name == ".." {
			return fmt.Errorf("initramfs: bad guest path %q", f.Path)
		}
		var parents []string
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append(parents, d)
		}
		for j := len(parents) - 1; j >= 0; j-- {
			if err := c.Dir(parents[j], 0o755); err != nil {
				return err
			}
			dirs[parents[j]] = true
		}
		if err := addHostFile(c, name, f.Host, 0o755); err != nil {
			return err
		}
	}
	if i.Command != "" {
		if err := c.File("command.sh", 0o755, []byte(i.Command)); err != nil {
			return err
		}
	}
	if err := c.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func (i *Initramfs) envFile() string {
	env := map[string]string{
		"FLEET_KERNEL_TEST":        "1",
		"HOME":                     "/tmp",
		"TMPDIR":                   "/tmp",
		"FLEET_GUEST_TEST_TIMEOUT": i.TestTimeout.String(),
	}
	for k, v := range i.Env {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s='%s'\n", k, strings.ReplaceAll(env[k], "'", `'\''`))
	}
	return b.String()
}

func addHostFile(c *CPIOWriter, name, path string, perm uint32) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return c.File(name, perm, data)
}

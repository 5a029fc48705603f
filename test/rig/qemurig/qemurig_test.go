package qemurig

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

type cpioEntry struct {
	name string
	mode uint32
	data string
}

// readNewc parses a newc archive the way the kernel's initramfs unpacker
// does, stopping at the trailer.
func readNewc(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	for {
		if off+110 > len(b) {
			t.Fatalf("archive ends at %d without a trailer", off)
		}
		h := b[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+namesize-1])
		off = (off + 110 + namesize + 3) &^ 3
		data := string(b[off : off+size])
		off = (off + size + 3) &^ 3
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, cpioEntry{name, uint32(mode), data})
	}
}

func TestCPIOWriter(t *testing.T) {
	var buf bytes.Buffer
	c := NewCPIOWriter(&buf)
	if err := c.File("/a/b/file.txt", 0o644, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := c.Symlink("bin/sh", "busybox"); err != nil {
		t.Fatal(err)
	}
	if err := c.File("init", 0o755, []byte("#!/bin/sh\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.File("init", 0o755, nil); err == nil {
		t.Error("a duplicate entry was accepted")
	}
	if err := c.Close(); err == nil {
		t.Error("Close after a failed write returned nil")
	}

	buf.Reset()
	c = NewCPIOWriter(&buf)
	_ = c.File("/a/b/file.txt", 0o644, []byte("hello"))
	_ = c.Symlink("bin/sh", "busybox")
	_ = c.File("init", 0o755, []byte("#!/bin/sh\n"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	want := []cpioEntry{
		{"a", modeDir | 0o755, ""},
		{"a/b", modeDir | 0o755, ""},
		{"a/b/file.txt", modeRegular | 0o644, "hello"},
		{"bin", modeDir | 0o755, ""},
		{"bin/sh", modeSymlink | 0o777, "busybox"},
		{"init", modeRegular | 0o755, "#!/bin/sh\n"},
	}
	if got := readNewc(t, buf.Bytes()); !reflect.DeepEqual(got, want) {
		t.Errorf("entries\n got %+v\nwant %+v", got, want)
	}
}

func TestLoadOrder(t *testing.T) {
	deps := map[string][]string{
		"can": nil, "can_raw": {"can"}, "can_dev": nil, "vcan": {"can-dev"},
		"wireguard":           {"udp_tunnel", "ip6_udp_tunnel", "libchacha20poly1305"},
		"udp_tunnel":          nil,
		"ip6_udp_tunnel":      nil,
		"libchacha20poly1305": {"libchacha", "libpoly1305"},
		"libchacha":           nil, "libpoly1305": nil,
		"loop_a": {"loop_b"}, "loop_b": {"loop_a"},
		"needs_ghost": {"ghost"},
	}
	builtin := map[string]bool{"libpoly1305": true}
	tests := []struct {
		name    string
		wanted  []string
		want    []string
		wantErr string
	}{
		{"dependencies first", []string{"vcan", "can-raw"}, []string{"can_dev", "vcan", "can", "can_raw"}, ""},
		{"shared dependency once", []string{"can_raw", "can"}, []string{"can", "can_raw"}, ""},
		{"transitive, builtin left out", []string{"wireguard"},
			[]string{"ip6_udp_tunnel", "libchacha", "libchacha20poly1305", "udp_tunnel", "wireguard"}, ""},
		{"unknown module", []string{"nope"}, nil, "module nope not found"},
		{"unknown dependency", []string{"needs_ghost"}, nil, "module ghost (needed by needs_ghost) not found"},
		{"cycle", []string{"loop_a"}, nil, "cycle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadOrder(tt.wanted, deps, builtin)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("order %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseConsoleAndCheck(t *testing.T) {
	const pkgA, pkgB = "example.com/a", "example.com/b"
	booted := "\x1bc\x1b[?7l\x1b[2JBooting from ROM..FLEET-BOOT kernel=6.1.0 cpus=2 uptime=3.9\n"
	tests := []struct {
		name    string
		console string
		wantErr []string
	}{
		{"all pass", booted + "FLEET-RESULT " + pkgA + " PASS\nFLEET-RESULT " + pkgB + " PASS\nFLEET-DONE pass=2 fail=0\n", nil},
		{"one fails", booted + "--- FAIL: TestKernelX\nFLEET-RESULT " + pkgA + " FAIL exit=1\nFLEET-RESULT " + pkgB + " PASS\nFLEET-DONE pass=1 fail=1\n",
			[]string{pkgA + ": FAIL exit=1", "--- FAIL: TestKernelX"}},
		{"stopped midway", booted + "FLEET-RESULT " + pkgA + " PASS\nKernel panic\n",
			[]string{pkgB + ": no result", "never printed FLEET-DONE", "Kernel panic"}},
		{"never booted", "SeaBIOS\nKernel panic - not syncing\n", []string{"boot failure", "Kernel panic"}},
		{"module failed", booted + "FLEET-RESULT modules FAIL insmod vcan\nFLEET-RESULT " + pkgA + " PASS\nFLEET-RESULT " + pkgB + " PASS\nFLEET-DONE pass=2 fail=1\n",
			[]string{"modules: FAIL insmod vcan"}},
		{"a kernel test skipped in the guest", booted + "=== RUN   TestKernelY\n    --- SKIP: TestKernelY (0.00s)\nFLEET-RESULT " + pkgA + " PASS\nFLEET-RESULT " + pkgB + " PASS\nFLEET-DONE pass=2 fail=0\n",
			[]string{"skipped in the guest", "--- SKIP: TestKernelY"}},
		{"a package ran no test", booted + "testing: warning: no tests to run\nPASS\nFLEET-RESULT " + pkgA + " PASS\nFLEET-RESULT " + pkgB + " PASS\nFLEET-DONE pass=2 fail=0\n",
			[]string{"no tests to run"}},
		{"marker inside test output does not count", booted + "    log: FLEET-RESULT " + pkgA + " PASS\nFLEET-RESULT " + pkgB + " PASS\nFLEET-DONE\n",
			[]string{pkgA + ": no result"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ParseConsole(tt.console).Check([]string{pkgA, pkgB})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Check passed a failing run")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestMachineArgs(t *testing.T) {
	m := &Machine{QEMU: "qemu", Kernel: "/k", Initrd: "/i", CPUs: 2, Append: "quiet", Serial1Socket: "/tmp/s", ExtraArgs: CANArgs}
	args := strings.Join(m.Args(), " ")
	for _, want := range []string{
		"-accel tcg", "-nographic", "-no-reboot", "-m 512M", "-smp 2", "-nic none",
		"-append console=ttyS0 panic=-1 quiet",
		"-chardev socket,id=ttyS1,path=/tmp/s,server=on,wait=on -serial chardev:ttyS1",
		"-object can-bus,id=canfd -device ctucan_pci,canbus0=canfd,canbus1=canfd",
		"-object can-bus,id=canclassic -device kvaser_pci,canbus=canclassic",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("qemu args lack %q: %s", want, args)
		}
	}
	if strings.Index(args, "-serial stdio") > strings.Index(args, "-serial chardev:ttyS1") {
		t.Error("the console must be the first UART (ttyS0)")
	}
	if strings.Contains(args, "-cpu") {
		t.Errorf("TCG runs qemu's default CPU model: %s", args)
	}
	m.Accel = "kvm"
	if args := strings.Join(m.Args(), " "); !strings.HasPrefix(args, "-accel kvm -cpu host ") {
		t.Errorf("kvm args: %s", args)
	}
}

func TestInitramfsContents(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("can.ko", "CAN")
	write("vcan.ko", "VCAN")
	k := &Kernel{Dir: dir, Modules: []string{"can", "vcan"}}
	if err := os.MkdirAll(filepath.Join(dir, "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, m := range k.Modules {
		if err := os.Rename(filepath.Join(dir, m+".ko"), k.ModulePath(m)); err != nil {
			t.Fatal(err)
		}
	}
	ir := &Initramfs{
		Busybox:     write("busybox", "BB"),
		Kernel:      k,
		Tests:       []TestBinary{{Package: "example.com/x", Path: write("example_com_x.test", "TEST")}},
		Env:         map[string]string{"FLEET_X": "it's"},
		TestTimeout: 30 * time.Second,
		Files:       []GuestFile{{Path: "/opt/fleet/tool", Host: write("tool", "TOOL")}},
		Command:     "echo hi\n",
	}
	var buf bytes.Buffer
	if err := ir.Write(&buf); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	files := make(map[string]string)
	for _, e := range readNewc(t, raw) {
		files[e.name] = e.data
	}
	for name, want := range map[string]string{
		"bin/busybox":              "BB",
		"bin/sh":                   "busybox",
		"modules/can.ko":           "CAN",
		"modules/vcan.ko":          "VCAN",
		"modules/order":            "can\nvcan\n",
		"tests/example_com_x.test": "TEST",
		"tests/list":               "example_com_x.test example.com/x\n",
		"opt":                      "",
		"opt/fleet":                "",
		"opt/fleet/tool":           "TOOL",
		"command.sh":               "echo hi\n",
	} {
		if files[name] != want {
			t.Errorf("%s = %q, want %q", name, files[name], want)
		}
	}
	env := files["fleet.env"]
	for _, want := range []string{"export FLEET_KERNEL_TEST='1'", `export FLEET_X='it'\''s'`, "export FLEET_GUEST_TEST_TIMEOUT='30s'"} {
		if !strings.Contains(env, want) {
			t.Errorf("fleet.env lacks %q:\n%s", want, env)
		}
	}
	if _, ok := files["opt/fleet"]; !ok {
		t.Error("no opt/fleet directory entry before its file")
	}
	if !strings.HasPrefix(files["init"], "#!/bin/busybox sh") || !strings.Contains(files["init"], "-test.run '^TestKernel'") ||
		!strings.Contains(files["init"], "sh /command.sh") {
		t.Errorf("init script:\n%s", files["init"])
	}
}

func TestParseKernelMeta(t *testing.T) {
	tests := []struct {
		name, record, pkg, version, err string
	}{
		{"bookworm", "Package: linux-image-amd64\nVersion: 6.1.192-2\nDepends: linux-image-6.1.0-56-amd64 (= 6.1.192-2)\n",
			"linux-image-6.1.0-56-amd64", "6.1.192-2", ""},
		{"among others", "Depends: foo (>= 1), linux-image-6.12.1-amd64 (= 6.12.1-1)\n", "linux-image-6.12.1-amd64", "6.12.1-1", ""},
		{"no exact version", "Depends: linux-image-6.1.0-56-amd64\n", "", "", "without an exact version"},
		{"no image", "Depends: foo\n", "", "", "names no linux-image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkg, version, err := parseKernelMeta(tt.record)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || pkg != tt.pkg || version != tt.version {
				t.Fatalf("got %q %q %v, want %q %q", pkg, version, err, tt.pkg, tt.version)
			}
		})
	}
}

func TestExtractVmlinuxRejects(t *testing.T) {
	dir := t.TempDir()
	// A bzImage header (boot protocol 2.15, one setup sector) whose
	// payload is a gzip stream of something that is not a kernel.
	var payload bytes.Buffer
	zw := gzip.NewWriter(&payload)
	zw.Write([]byte("not an ELF kernel"))
	zw.Close()
	img := make([]byte, 2*512)
	img[0x1F1] = 1
	copy(img[0x202:], "HdrS")
	img[0x206], img[0x207] = 0x0F, 0x02
	putLE32(img[0x248:], 0)
	putLE32(img[0x24C:], uint32(payload.Len()))
	img = append(img, payload.Bytes()...)
	bz := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(bz, img, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"payload not a kernel": {img, "not an ELF"},
		"not a bzImage":        {[]byte("MZ plain file"), "not a bzImage"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(bz, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			err := ExtractVmlinux(t.Context(), bz, filepath.Join(dir, "vmlinux"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "vmlinux")); err == nil {
				t.Error("a vmlinux was written for a bad image")
			}
		})
	}
}

func putLE32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// fakeQEMU writes a shell script standing in for qemu-system-x86_64.
func fakeQEMU(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "qemu")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMachineRunFailures(t *testing.T) {
	const pkg = "example.com/p"
	tests := []struct {
		name    string
		qemu    string
		timeout time.Duration
		runErr  string   // from Run
		check   []string // from Outcome.Check
	}{
		{"no qemu", "/nonexistent/qemu-system-x86_64", time.Minute, "start /nonexistent", nil},
		{"qemu refuses its arguments", "echo 'qemu: bad option' >&2; exit 1", time.Minute, "bad option",
			[]string{"boot failure"}},
		{"guest test fails", "echo 'FLEET-BOOT kernel=x'; echo '--- FAIL: TestKernelX'; echo 'FLEET-RESULT " + pkg + " FAIL exit=1'; echo 'FLEET-DONE pass=0 fail=1'", time.Minute, "",
			[]string{pkg + ": FAIL exit=1", "--- FAIL: TestKernelX"}},
		{"guest hangs: killed at the timeout", "echo 'FLEET-BOOT kernel=x'; exec sleep 30", 500 * time.Millisecond, "qemu killed",
			[]string{pkg + ": no result", "never printed FLEET-DONE"}},
		{"all pass", "echo 'FLEET-BOOT kernel=x'; echo 'FLEET-RESULT " + pkg + " PASS'; echo 'FLEET-DONE pass=1 fail=0'", time.Minute, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.qemu
			if !strings.HasPrefix(q, "/") {
				q = fakeQEMU(t, tt.qemu)
			}
			ctx, cancel := context.WithTimeout(t.Context(), tt.timeout)
			defer cancel()
			start := time.Now()
			out, err := (&Machine{QEMU: q, Kernel: "/k", Initrd: "/i"}).Run(ctx, nil)
			if time.Since(start) > 10*time.Second {
				t.Errorf("Run took %s", time.Since(start))
			}
			if tt.runErr == "" && err != nil {
				t.Fatalf("Run: %v", err)
			}
			if tt.runErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.runErr) {
					t.Fatalf("Run err %v, want %q", err, tt.runErr)
				}
			}
			if out == nil {
				if tt.check != nil {
					t.Fatal("no outcome")
				}
				return
			}
			cerr := out.Check([]string{pkg})
			if tt.check == nil && tt.runErr == "" && cerr != nil {
				t.Fatalf("Check: %v", cerr)
			}
			for _, w := range tt.check {
				if cerr == nil || !strings.Contains(cerr.Error(), w) {
					t.Errorf("Check error lacks %q: %v", w, cerr)
				}
			}
		})
	}
}

// TestBuildTests builds real guest test binaries from a throwaway module:
// static, named after their import paths, packages with the same last
// element both built.
func TestBuildTests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go binaries")
	}
	root := t.TempDir()
	files := map[string]string{
		"go.mod":        "module example.com/m\n\ngo 1.22\n",
		"a/x/x_test.go": "package x\n\nimport \"testing\"\n\nfunc TestKernelA(t *testing.T) {}\n",
		"b/x/x_test.go": "package x\n\nimport \"testing\"\n\nfunc TestKernelB(t *testing.T) {}\n",
		"c/c_test.go":   "package c\n\nimport \"testing\"\n\nfunc TestOther(t *testing.T) {}\n",
		"d/d.go":        "package d\n",
	}
	for name, src := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pkgs, err := DiscoverKernelTests(t.Context(), "go", root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"example.com/m/a/x", "example.com/m/b/x"}; !reflect.DeepEqual(pkgs, want) {
		t.Fatalf("discovered %v, want %v", pkgs, want)
	}
	out := t.TempDir()
	bins, err := BuildTests(t.Context(), "go", root, out, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(bins) != 2 {
		t.Fatalf("binaries %+v", bins)
	}
	for _, b := range bins {
		static, err := isStatic(b.Path)
		if err != nil || !static {
			t.Errorf("%s: static %v, err %v", b.Path, static, err)
		}
		if filepath.Base(b.Path) != strings.NewReplacer("/", "_", ".", "_").Replace(b.Package)+".test" {
			t.Errorf("binary %s for %s", b.Path, b.Package)
		}
	}
	if _, err := BuildTests(t.Context(), "go", root, out, []string{"example.com/m/d"}); err == nil {
		t.Error("a package without tests built a binary")
	}
}

func TestInitramfsRejectsFilesOutsideTheRoot(t *testing.T) {
	k := &Kernel{Dir: t.TempDir()}
	bb := filepath.Join(t.TempDir(), "busybox")
	if err := os.WriteFile(bb, []byte("BB"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../etc/passwd", "/", "a/../../b"} {
		ir := &Initramfs{Busybox: bb, Kernel: k, Files: []GuestFile{{Path: p, Host: bb}}}
		if err := ir.Write(io.Discard); err == nil || !strings.Contains(err.Error(), "bad guest path") {
			t.Errorf("path %q: err %v, want a bad guest path error", p, err)
		}
	}
}

func TestParseDepends(t *testing.T) {
	got := parseDepends("linux-headers-6.1.0-56-common (= 6.1.192-2), linux-kbuild-6.1 (>= 6.1.192-2), linux-compiler-gcc-12-x86, libc6:any (>= 2.34) | libc6-udeb, ")
	want := []string{"linux-headers-6.1.0-56-common", "linux-kbuild-6.1", "linux-compiler-gcc-12-x86", "libc6"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseDepends = %q, want %q", got, want)
	}
}

func TestEditSource(t *testing.T) {
	f := SourceFile{Path: "kernel/irq/irq_sim.c", Replace: [][2]string{{"old()", "new()"}}, Append: "\nMODULE_LICENSE(\"GPL\");\n"}
	got, err := editSource([]byte("a old() b"), f)
	if err != nil || string(got) != "a new() b\nMODULE_LICENSE(\"GPL\");\n" {
		t.Fatalf("editSource = %q, %v", got, err)
	}
	for name, src := range map[string]string{"edit no longer applies": "a b", "edit ambiguous": "old() old()"} {
		if _, err := editSource([]byte(src), f); err == nil || !strings.Contains(err.Error(), "want once") {
			t.Errorf("%s: err %v", name, err)
		}
	}
	if _, err := editSource(nil, f); err == nil {
		t.Error("a file missing from the source was accepted")
	}
}

func TestSeriesOfAKernelVersion(t *testing.T) {
	for v, want := range map[string]string{"6.1.192-2": "6.1", "6.12.57-1": "6.12", "1:7.0-1": "7.0"} {
		if got, err := kernelSeries(v); err != nil || got != want {
			t.Errorf("kernelSeries(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
	if _, err := kernelSeries("6"); err == nil {
		t.Error("a version without major.minor was accepted")
	}
}

// The modules built from source load before the image's wanted ones, after
// the image modules they need, and only with the image's vermagic.
func TestAddBuiltModules(t *testing.T) {
	const vm = "6.1.0-56-amd64 SMP preempt mod_unload modversions "
	newKernel := func() *Kernel {
		return &Kernel{Dir: "/k", Vermagic: vm,
			Modules: []string{"configfs", "can_dev", "can", "sja1000", "kvaser_pci"},
			Deps:    map[string][]string{"configfs": nil, "can_dev": nil, "can": nil, "sja1000": {"can_dev"}, "kvaser_pci": {"sja1000"}}}
	}
	b := &BuiltModules{Dir: "/b", Modules: []BuiltModule{
		{Name: "irq_sim", Vermagic: vm},
		{Name: "gpio_sim", Vermagic: vm, Depends: []string{"configfs", "irq_sim"}},
		{Name: "ctucanfd", Vermagic: vm, Depends: []string{"can_dev"}},
		{Name: "ctucanfd_pci", Vermagic: vm, Depends: []string{"ctucanfd", "can_dev"}},
	}}
	if got, want := b.imageDeps(), []string{"configfs", "can_dev"}; !reflect.DeepEqual(got, want) {
		t.Errorf("imageDeps = %v, want %v", got, want)
	}
	k := newKernel()
	if err := k.addBuilt(b); err != nil {
		t.Fatal(err)
	}
	want := []string{"irq_sim", "configfs", "gpio_sim", "can_dev", "ctucanfd", "ctucanfd_pci", "can", "sja1000", "kvaser_pci"}
	if !reflect.DeepEqual(k.Modules, want) {
		t.Errorf("load order %v, want %v", k.Modules, want)
	}
	if k.ModulePath("gpio_sim") != "/b/gpio_sim.ko" || k.ModulePath("can") != "/k/modules/can.ko" {
		t.Errorf("paths %s %s", k.ModulePath("gpio_sim"), k.ModulePath("can"))
	}
	b.Modules[1].Vermagic = "6.1.0-55-amd64 SMP preempt mod_unload modversions "
	if err := newKernel().addBuilt(b); err == nil || !strings.Contains(err.Error(), "vermagic") {
		t.Errorf("a module of another kernel release was accepted: %v", err)
	}
}

// One cache entry serves every subset of the modules it holds (the rig's
// tests and fleet-loadgen guest want different ones) and names what it
// was extracted for when it does not.
func TestCacheEntryServesSubsets(t *testing.T) {
	dir := t.TempDir()
	entry := Kernel{Wanted: []string{"vcan", "configfs"}, Modules: []string{"can_dev", "vcan", "configfs"},
		Deps: map[string][]string{"can_dev": nil, "vcan": {"can_dev"}, "configfs": nil}, Vermagic: "6.1.0-56-amd64 SMP "}
	meta, err := json.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kernel.json", "vmlinuz", "modules/can_dev.ko", "modules/vcan.ko", "modules/configfs.ko"} {
		data := []byte("x")
		if f == "kernel.json" {
			data = meta
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k, err := readCachedKernel(dir, []string{"vcan"})
	if err != nil || !reflect.DeepEqual(k.Modules, []string{"can_dev", "vcan"}) {
		t.Fatalf("subset: %+v, %v", k, err)
	}
	k, err = readCachedKernel(dir, []string{"vcan", "wireguard"})
	if err == nil || k == nil || !reflect.DeepEqual(k.Wanted, entry.Wanted) {
		t.Fatalf("a module the entry lacks: %+v, %v; want a miss naming the entry's modules", k, err)
	}
}

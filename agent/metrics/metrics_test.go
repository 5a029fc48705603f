package metrics

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleet/fleet/shared/resource"
)

// copyTree copies testdata/name into a temp dir so the test can change files.
func copyTree(tb testing.TB, name string) string {
	tb.Helper()
	dst := tb.TempDir()
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("testdata", name))); err != nil {
		tb.Fatal(err)
	}
	return dst
}

func near(a, b float64) bool { d := a - b; return d < 1e-9 && d > -1e-9 }

// The expected values come from the fixture numbers:
//
//	cpuPct: stat -> stat.later deltas. normal, multizone, nocpuzone:
//	  user +600, system +300, idle +1400, iowait +100, softirq +100:
//	  total 2500, idle+iowait 1500, busy 1000 -> 40%.
//	  nothermal: user +100, system +50, idle +800, iowait +50: total 1000,
//	  idle 850 -> 15%.
//	memPct: (MemTotal - MemAvailable) / MemTotal: (1000000 - 387500) /
//	  1000000 = 61.25%; nothermal has no MemAvailable (old kernel):
//	  available = MemFree + Buffers + Cached = 250000 of 500000 -> 50%.
//	tempCpu: normal cpu-thermal 47250 m°C -> 47.25; multizone takes
//	  x86_pkg_temp (61.5) over the hotter iwlwifi_1 (70.0), skipping the
//	  zone without temp; nocpuzone has no CPU zone -> hottest, 52.125 ->
//	  52.13 (two decimals); nothermal -> 0, listed in missing (no sensor),
//	  with no error.
//	loadAvg1: the first field of loadavg.
func TestSamplerFixtures(t *testing.T) {
	tests := []struct {
		tree string
		want resource.MetricSample
	}{
		{"normal", resource.MetricSample{CPUPct: 40, MemPct: 61.25, TempCPU: 47.25, LoadAvg1: 0.42}},
		{"nothermal", resource.MetricSample{CPUPct: 15, MemPct: 50, TempCPU: 0, LoadAvg1: 1.05, Missing: []string{"tempCpu"}}},
		{"multizone", resource.MetricSample{CPUPct: 40, MemPct: 61.25, TempCPU: 61.5, LoadAvg1: 3.17}},
		{"nocpuzone", resource.MetricSample{CPUPct: 40, MemPct: 61.25, TempCPU: 52.13, LoadAvg1: 0}},
	}
	at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.tree, func(t *testing.T) {
			root := copyTree(t, tc.tree)
			s := NewSampler(Options{
				ProcRoot: filepath.Join(root, "proc"),
				SysRoot:  filepath.Join(root, "sys"),
				DiskPath: root,
				Now:      func() time.Time { return at },
			})
			later, err := os.ReadFile(filepath.Join(root, "stat.later"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "proc", "stat"), later, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := s.Sample()
			if err != nil {
				t.Fatalf("sample: %v", err)
			}
			if !got.CapturedAt.Equal(at) {
				t.Errorf("capturedAt = %v", got.CapturedAt)
			}
			if !near(got.CPUPct, tc.want.CPUPct) || !near(got.MemPct, tc.want.MemPct) ||
				!near(got.TempCPU, tc.want.TempCPU) || !near(got.LoadAvg1, tc.want.LoadAvg1) {
				t.Errorf("got cpu %v mem %v temp %v load %v, want %+v", got.CPUPct, got.MemPct, got.TempCPU, got.LoadAvg1, tc.want)
			}
			if !slices.Equal(got.Missing, tc.want.Missing) {
				t.Errorf("missing = %q, want %q", got.Missing, tc.want.Missing)
			}
			if got.DiskUsedPct <= 0 || got.DiskUsedPct > 100 {
				t.Errorf("diskUsedPct of the temp dir's filesystem = %v", got.DiskUsedPct)
			}
		})
	}
}

func TestCPUUnchangedCounters(t *testing.T) {
	root := copyTree(t, "normal")
	c := NewCPU(filepath.Join(root, "proc"))
	var s resource.MetricSample
	if err := c.Update(&s); err != nil || s.CPUPct != 0 {
		t.Fatalf("first update without prime: %v %v", s.CPUPct, err)
	}
	if err := c.Update(&s); err != nil || s.CPUPct != 0 {
		t.Fatalf("no time passed: %v %v", s.CPUPct, err)
	}
}

func TestDiskFromStatfs(t *testing.T) {
	d := NewDisk("/data")
	d.statfs = func(path string, st *unix.Statfs_t) error {
		if path != "/data" {
			t.Errorf("statfs(%q)", path)
		}
		// used = (1000-300) blocks, available 250: 700/950 = 73.684...%
		st.Blocks, st.Bfree, st.Bavail, st.Bsize = 1000, 300, 250, 4096
		return nil
	}
	var s resource.MetricSample
	if err := d.Update(&s); err != nil || !near(s.DiskUsedPct, 73.68) {
		t.Fatalf("diskUsedPct = %v, %v; want 73.68", s.DiskUsedPct, err)
	}
	d.statfs = func(string, *unix.Statfs_t) error { return unix.ENOENT }
	if err := NewDisk(filepath.Join(t.TempDir(), "missing")).Update(&s); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("missing path: %v", err)
	}
}

// A broken collector zeroes only its own field and names itself.
func TestCollectorIsolation(t *testing.T) {
	root := copyTree(t, "normal")
	os.Remove(filepath.Join(root, "proc", "loadavg"))
	os.WriteFile(filepath.Join(root, "proc", "meminfo"), []byte("garbage\n"), 0o644)
	s := NewSampler(Options{ProcRoot: filepath.Join(root, "proc"), SysRoot: filepath.Join(root, "sys"), DiskPath: root})
	got, err := s.Sample()
	var names []string
	for _, e := range unwrapJoin(err) {
		var ce *CollectorError
		if !errors.As(e, &ce) {
			t.Fatalf("not a CollectorError: %v", e)
		}
		names = append(names, ce.Collector)
	}
	if len(names) != 2 || names[0] != "mem" || names[1] != "load" {
		t.Fatalf("failed collectors = %v (%v)", names, err)
	}
	if !near(got.TempCPU, 47.25) || got.MemPct != 0 || got.LoadAvg1 != 0 {
		t.Fatalf("sample = %+v", got)
	}
}

// No /sys at all (a container): no sensor (tempCpu 0, listed as missing)
// and no error.
func TestNoSysfs(t *testing.T) {
	var s resource.MetricSample
	if err := NewThermal(filepath.Join(t.TempDir(), "nosys")).Update(&s); err != nil || s.TempCPU != 0 || !slices.Equal(s.Missing, []string{"tempCpu"}) {
		t.Fatalf("no sysfs: %v %q %v", s.TempCPU, s.Missing, err)
	}
}

// A sysfs without thermal zones but with hwmon sensors (a fake root in a
// temp dir): the hottest input of the CPU's chip, not "no sensor"; with
// only other chips, their hottest; with hwmon chips but no temperature
// input, no sensor.
func TestHwmonWithoutThermalZones(t *testing.T) {
	root := t.TempDir()
	chip := func(n, name string, temps ...string) {
		dir := filepath.Join(root, "class", "hwmon", "hwmon"+n)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "name"), []byte(name+"\n"), 0o644)
		for i, v := range temps {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("temp%d_input", i+1)), []byte(v+"\n"), 0o644)
		}
	}
	os.MkdirAll(filepath.Join(root, "class", "thermal"), 0o755)
	chip("0", "acpitz", "27800")
	chip("1", "nvme", "71850", "garbage")
	read := func() resource.MetricSample {
		var s resource.MetricSample
		if err := NewThermal(root).Update(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := read(); s.TempCPU != 71.85 || s.Missing != nil {
		t.Fatalf("other chips only: %v %q, want the hottest, 71.85", s.TempCPU, s.Missing)
	}
	chip("2", "coretemp", "44000", "46512")
	if s := read(); s.TempCPU != 46.51 || s.Missing != nil {
		t.Fatalf("with coretemp: %v %q, want its hottest, 46.51", s.TempCPU, s.Missing)
	}
	os.RemoveAll(filepath.Join(root, "class", "hwmon"))
	chip("0", "fan_ctl")
	if s := read(); s.TempCPU != 0 || !slices.Equal(s.Missing, []string{"tempCpu"}) {
		t.Fatalf("no temperature input: %v %q, want no sensor", s.TempCPU, s.Missing)
	}
}

func unwrapJoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

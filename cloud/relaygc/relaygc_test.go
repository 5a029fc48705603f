package relaygc

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1500MiB": 1500 << 20, "2GiB": 2 << 30, "800MB": 800e6, "1.5GiB": 3 << 29, "1048576": 1 << 20, "4096KiB": 4 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "1KiB", "-5GiB", "NaN", "1e30GiB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestResolve(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "")
	p, err := Resolve(Auto, 0)
	if err != nil {
		t.Fatal(err)
	}
	// This machine has memory, so the automatic limit is a share of it
	// (or of its cgroup's).
	if avail, _ := available(); p.Limit != int64(float64(avail)*AutoLimitFraction) || p.Limit <= 0 || p.GCPercent != DefaultGCPercent {
		t.Errorf("Resolve(auto, 0) = %+v; available %d", p, avail)
	}
	if p, err = Resolve("1GiB", 250); err != nil || p.Limit != 1<<30 || p.GCPercent != 250 || p.LimitFrom != "flag" || p.PercentFrom != "flag" {
		t.Errorf("Resolve(1GiB, 250) = %+v, %v", p, err)
	}
	if p, err = Resolve("off", -1); err != nil || p.Limit != math.MaxInt64 || p.GCPercent != -1 {
		t.Errorf("Resolve(off, -1) = %+v, %v", p, err)
	}
	if _, err = Resolve("much", 0); err == nil || CheckLimit("much") == nil {
		t.Error("Resolve(much) or CheckLimit(much) took it")
	}
}

// The environment's GOMEMLIMIT and GOGC, which the runtime applied at
// start, stay when the flags are left at their defaults.
func TestResolveKeepsEnvironment(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(700 << 20))
	defer debug.SetGCPercent(debug.SetGCPercent(300))
	t.Setenv("GOMEMLIMIT", "700MiB")
	t.Setenv("GOGC", "300")
	p, err := Resolve(Auto, 0)
	if err != nil || p.Limit != 700<<20 || p.GCPercent != 300 || p.LimitFrom != "GOMEMLIMIT" || p.PercentFrom != "GOGC" {
		t.Errorf("Resolve(auto, 0) = %+v, %v; want the environment's", p, err)
	}
	if p.String() != "memory limit 700 MiB (GOMEMLIMIT), GOGC=300 (GOGC)" {
		t.Errorf("String() = %q", p.String())
	}
}

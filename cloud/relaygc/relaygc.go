// Package relaygc sets the Go garbage collector of a relay process: a soft
// memory limit (the runtime's GOMEMLIMIT) and the GC percentage (GOGC).
//
// A relay's live heap grows with its agent connections (about 420 MiB
// plus 100 MiB of goroutine stacks at 20,000), and each collection's mark
// phase takes CPU from the heartbeats in flight: the fewer collections,
// the fewer heartbeats wait behind one (docs/benchmarks.md, issue 31). A
// higher GOGC spaces collections out but lets the heap grow to GOGC % over
// the live heap; the soft limit bounds that growth, so that a relay near
// its memory collects more often instead of being killed. `fleet-relay
// serve` and the load benchmark's relay (bench/cmd/fleet-loadgen) apply
// the same Policy.
package relaygc

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultGCPercent is the GC percentage a relay runs with when neither
// --gc-percent nor GOGC says otherwise (measured: docs/benchmarks.md,
// "GC policy").
const DefaultGCPercent = 100

// AutoLimitFraction is the share of the memory available to the process
// (its cgroup's limit, else the machine's) that the automatic soft limit
// takes: the rest is for what the Go runtime does not count (SQLite's page
// cache and other C memory, the kernel's socket buffers).
const AutoLimitFraction = 0.8

// Policy is the collector's setting for a process.
type Policy struct {
	// Limit is the soft memory limit in bytes; math.MaxInt64 is none.
	Limit int64
	// GCPercent is GOGC's value; negative turns proportional collection
	// off (then only the limit triggers one).
	GCPercent int
	// LimitFrom and PercentFrom say where each value came from: "flag",
	// "GOMEMLIMIT"/"GOGC" (the environment, left to the runtime),
	// "cgroup", "memory" (the machine's), "default" or "none".
	LimitFrom, PercentFrom string
}

// Auto is the --memory-limit value that derives the limit from the
// memory available to the process.
const Auto = "auto"

// Resolve returns the policy for a --memory-limit value (Auto; "off"; or
// a size: 1500MiB, 2GiB, 800MB, bytes) and a --gc-percent value (0: the
// default; negative: off). GOMEMLIMIT and GOGC in the environment win over
// Auto and 0, as the runtime already applied them.
func Resolve(limit string, gcPercent int) (Policy, error) {
	var p Policy
	switch v, env := strings.TrimSpace(limit), os.Getenv("GOMEMLIMIT"); {
	case (v == "" || v == Auto) && env != "":
		p.Limit, p.LimitFrom = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	case v == "" || v == Auto:
		avail, from := available()
		if avail <= 0 {
			p.Limit, p.LimitFrom = math.MaxInt64, "none"
		} else {
			p.Limit, p.LimitFrom = int64(float64(avail)*AutoLimitFraction), from
		}
	case v == "off":
		p.Limit, p.LimitFrom = math.MaxInt64, "flag"
	default:
		if err := CheckLimit(v); err != nil {
			return Policy{}, err
		}
		n, _ := ParseSize(v)
		p.Limit, p.LimitFrom = n, "flag"
	}
	switch env := os.Getenv("GOGC"); {
	case gcPercent != 0:
		p.GCPercent, p.PercentFrom = max(gcPercent, -1), "flag"
	case env != "":
		p.GCPercent = debug.SetGCPercent(-1)
		debug.SetGCPercent(p.GCPercent)
		p.PercentFrom = "GOGC"
	default:
		p.GCPercent, p.PercentFrom = DefaultGCPercent, "default"
	}
	return p, nil
}

// CheckLimit reports whether limit is a --memory-limit value Resolve
// takes, reading nothing.
func CheckLimit(limit string) error {
	switch v := strings.TrimSpace(limit); v {
	case "", Auto, "off":
		return nil
	default:
		if _, err := ParseSize(v); err != nil {
			return fmt.Errorf("--memory-limit %q: %w", limit, err)
		}
		return nil
	}
}

// Apply sets the policy on the runtime.
func (p Policy) Apply() {
	debug.SetMemoryLimit(p.Limit)
	debug.SetGCPercent(p.GCPercent)
}

// String is the policy as a log line or a benchmark's notes show it.
func (p Policy) String() string {
	limit := "no memory limit"
	if p.Limit != math.MaxInt64 {
		limit = fmt.Sprintf("memory limit %d MiB", p.Limit>>20)
	}
	gc := fmt.Sprintf("GOGC=%d", p.GCPercent)
	if p.GCPercent < 0 {
		gc = "GOGC=off"
	}
	return fmt.Sprintf("%s (%s), %s (%s)", limit, p.LimitFrom, gc, p.PercentFrom)
}

// ParseSize reads a size in bytes: a number with an optional unit B, KiB,
// MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), as
// GOMEMLIMIT does; at least 1 MiB.
func ParseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := 1.0
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || f*mult > math.MaxInt64 {
		return 0, errors.New("want a size such as 1500MiB or 2GiB, auto or off")
	}
	if n := int64(f * mult); n >= 1<<20 {
		return n, nil
	}
	return 0, errors.New("below 1MiB")
}

// available returns the memory the process may use: its cgroup's limit
// (v2 memory.max, else v1 memory.limit_in_bytes) when one is set and below
// the machine's memory, else the machine's (MemTotal); 0 when neither can
// be read.
func available() (int64, string) {
	total := memTotal()
	if cg := cgroupLimit(); cg > 0 && (total == 0 || cg < total) {
		return cg, "cgroup"
	}
	if total > 0 {
		return total, "memory"
	}
	return 0, "none"
}

// cgroupLimit is the memory limit of the process's cgroup in bytes, 0
// when none is set or it cannot be read.
func cgroupLimit() int64 {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		// cgroup v1 says "no limit" with a huge number (a page-rounded
		// MaxInt64).
		if err != nil || n <= 0 || n >= math.MaxInt64/2 {
			return 0
		}
		return n
	}
	return 0
}

// memTotal is the machine's memory from /proc/meminfo, 0 when unknown.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

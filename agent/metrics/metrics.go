// Package metrics samples the gateway's system metrics (cpuPct, memPct,
// diskUsedPct, tempCpu, loadAvg1) from /proc and /sys through
// github.com/prometheus/procfs and from statfs(2).
//
// Each metric has its own Collector in its own file; a Sampler runs them all
// and one failing collector only zeroes its own field, so a gateway with an
// odd /sys still reports the rest. Every file is read through configurable
// roots (Options.ProcRoot, Options.SysRoot), so tests run against the fake
// trees in testdata/.
package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/fleet/fleet/shared/resource"
)

// Collector fills its field(s) of a sample.
type Collector interface {
	// Update writes the collector's metric into s.
	Update(s *resource.MetricSample) error
}

// Options configures a Sampler.
type Options struct {
	// ProcRoot is the procfs mount (default /proc).
	ProcRoot string
	// SysRoot is the sysfs mount (default /sys).
	SysRoot string
	// DiskPath is a path on the filesystem whose usage is measured (default /).
	DiskPath string
	// Now replaces time.Now.
	Now func() time.Time
	// Logger receives collector failures, once per change of error.
	Logger *slog.Logger
}

// Sampler runs the collectors. It is safe for concurrent use.
type Sampler struct {
	now        func() time.Time
	log        *slog.Logger
	names      []string
	collectors []Collector

	mu      sync.Mutex
	lastErr map[string]string
}

// NewSampler returns a Sampler with the standard collectors. It primes the
// CPU collector so the first sample's cpuPct covers the time since then.
func NewSampler(opts Options) *Sampler {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.SysRoot == "" {
		opts.SysRoot = "/sys"
	}
	if opts.DiskPath == "" {
		opts.DiskPath = "/"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sampler{now: opts.Now, log: opts.Logger, lastErr: map[string]string{}}
	cpu := NewCPU(opts.ProcRoot)
	_ = cpu.Prime()
	s.Add("cpu", cpu)
	s.Add("mem", NewMem(opts.ProcRoot))
	s.Add("disk", NewDisk(opts.DiskPath))
	s.Add("thermal", NewThermal(opts.SysRoot))
	s.Add("load", NewLoad(opts.ProcRoot))
	return s
}

// Add adds a collector under name.
func (s *Sampler) Add(name string, c Collector) {
	s.names = append(s.names, name)
	s.collectors = append(s.collectors, c)
}

// CollectorError is one collector's failure.
type CollectorError struct {
	Collector string
	Err       error
}

func (e *CollectorError) Error() string { return fmt.Sprintf("metrics %s: %v", e.Collector, e.Err) }
func (e *CollectorError) Unwrap() error { return e.Err }

// Sample runs every collector and returns the sample. The error joins the
// collectors' errors (each a *CollectorError); the sample is valid either
// way, with a failed collector's field at 0.
func (s *Sampler) Sample() (resource.MetricSample, error) {
	ms := resource.MetricSample{CapturedAt: resource.T(s.now())}
	var errs []error
	for i, c := range s.collectors {
		name := s.names[i]
		err := c.Update(&ms)
		msg := ""
		if err != nil {
			msg = err.Error()
			errs = append(errs, &CollectorError{Collector: name, Err: err})
		}
		s.mu.Lock()
		prev := s.lastErr[name]
		s.lastErr[name] = msg
		s.mu.Unlock()
		switch {
		case msg != "" && msg != prev:
			s.log.Warn("metrics collector failed", "collector", name, "err", err)
		case msg == "" && prev != "":
			s.log.Info("metrics collector recovered", "collector", name)
		}
	}
	return ms, errors.Join(errs...)
}

// round2 keeps two decimals, enough for percentages and degrees.
func round2(v float64) float64 {
	if v < 0 {
		return -float64(int64(-v*100+0.5)) / 100
	}
	return float64(int64(v*100+0.5)) / 100
}

// readProc reads the file name of the procfs at root with read (a method of
// procfs.FS, such as procfs.FS.LoadAvg).
func readProc[T any](root, name string, read func(procfs.FS) (T, error)) (T, error) {
	var v T
	fs, err := procfs.NewFS(root)
	if err != nil {
		return v, fmt.Errorf("procfs: %w", err)
	}
	if v, err = read(fs); err != nil {
		return v, fmt.Errorf("read %s: %w", name, err)
	}
	return v, nil
}

package metrics

import (
	"sync"

	"github.com/prometheus/procfs"

	"github.com/fleet/fleet/shared/resource"
)

// CPU computes cpuPct from the deltas of the aggregate "cpu" line of
// /proc/stat between two samples: 100 × (Δtotal − Δidle − Δiowait) / Δtotal.
type CPU struct {
	root string

	mu   sync.Mutex
	prev *procfs.CPUStat
}

// NewCPU returns the CPU collector reading procRoot/stat.
func NewCPU(procRoot string) *CPU { return &CPU{root: procRoot} }

// Prime records the current counters as the base of the next Update.
func (c *CPU) Prime() error {
	st, err := c.read()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.prev = &st
	c.mu.Unlock()
	return nil
}

func (c *CPU) read() (procfs.CPUStat, error) {
	st, err := readProc(c.root, "stat", procfs.FS.Stat)
	return st.CPUTotal, err
}

// Update sets CPUPct. Without a previous reading (first call after a failed
// Prime) it records the base and leaves CPUPct at 0.
func (c *CPU) Update(s *resource.MetricSample) error {
	cur, err := c.read()
	if err != nil {
		return err
	}
	c.mu.Lock()
	prev := c.prev
	c.prev = &cur
	c.mu.Unlock()
	if prev == nil {
		return nil
	}
	idle := (cur.Idle - prev.Idle) + (cur.Iowait - prev.Iowait)
	total := cpuTotal(cur) - cpuTotal(*prev)
	if total <= 0 {
		return nil
	}
	busy := total - idle
	s.CPUPct = round2(clamp(100*busy/total, 0, 100))
	return nil
}

// cpuTotal sums the time counters; guest time is already part of user.
func cpuTotal(c procfs.CPUStat) float64 {
	return c.User + c.Nice + c.System + c.Idle + c.Iowait + c.IRQ + c.SoftIRQ + c.Steal
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }

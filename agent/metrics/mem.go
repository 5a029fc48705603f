package metrics

import (
	"errors"

	"github.com/prometheus/procfs"

	"github.com/fleet/fleet/shared/resource"
)

// Mem computes memPct from /proc/meminfo: 100 × (MemTotal − MemAvailable) /
// MemTotal, with MemFree + Buffers + Cached standing in for MemAvailable on
// kernels older than 3.14.
type Mem struct{ root string }

// NewMem returns the memory collector reading procRoot/meminfo.
func NewMem(procRoot string) *Mem { return &Mem{root: procRoot} }

// Update sets MemPct.
func (m *Mem) Update(s *resource.MetricSample) error {
	mi, err := readProc(m.root, "meminfo", procfs.FS.Meminfo)
	if err != nil {
		return err
	}
	if mi.MemTotal == nil || *mi.MemTotal == 0 {
		return errors.New("meminfo: no MemTotal")
	}
	var avail uint64
	switch {
	case mi.MemAvailable != nil:
		avail = *mi.MemAvailable
	case mi.MemFree != nil:
		avail = *mi.MemFree + deref(mi.Buffers) + deref(mi.Cached)
	default:
		return errors.New("meminfo: neither MemAvailable nor MemFree")
	}
	total := float64(*mi.MemTotal)
	s.MemPct = round2(clamp(100*(total-float64(avail))/total, 0, 100))
	return nil
}

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

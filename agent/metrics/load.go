package metrics

import (
	"github.com/prometheus/procfs"

	"github.com/fleet/fleet/shared/resource"
)

// Load reads the one-minute load average from /proc/loadavg.
type Load struct{ root string }

// NewLoad returns the load collector reading procRoot/loadavg.
func NewLoad(procRoot string) *Load { return &Load{root: procRoot} }

// Update sets LoadAvg1.
func (l *Load) Update(s *resource.MetricSample) error {
	la, err := readProc(l.root, "loadavg", procfs.FS.LoadAvg)
	if err != nil {
		return err
	}
	s.LoadAvg1 = la.Load1
	return nil
}

package metrics

import (
	"fmt"

	"github.com/prometheus/procfs"

	"github.com/fleet/fleet/shared/resource"
)

// Load reads the one-minute load average from /proc/loadavg.
type Load struct{ root string }

// NewLoad returns the load collector reading procRoot/loadavg.
func NewLoad(procRoot string) *Load { return &Load{root: procRoot} }

// Update sets LoadAvg1.
func (l *Load) Update(s *resource.MetricSample) error {
	fs, err := procfs.NewFS(l.root)
	if err != nil {
		return fmt.Errorf("procfs: %w", err)
	}
	la, err := fs.LoadAvg()
	if err != nil {
		return fmt.Errorf("read loadavg: %w", err)
	}
	s.LoadAvg1 = la.Load1
	return nil
}

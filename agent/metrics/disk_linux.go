package metrics

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/fleet/fleet/shared/resource"
)

// Disk measures diskUsedPct of the filesystem holding a path, as df does:
// 100 × used / (used + available to unprivileged users), with used =
// (blocks − free) × block size.
type Disk struct {
	path   string
	statfs func(path string, st *unix.Statfs_t) error
}

// NewDisk returns the disk collector for the filesystem holding path.
func NewDisk(path string) *Disk { return &Disk{path: path, statfs: unix.Statfs} }

// Update sets DiskUsedPct.
func (d *Disk) Update(s *resource.MetricSample) error {
	var st unix.Statfs_t
	if err := d.statfs(d.path, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", d.path, err)
	}
	used := float64(st.Blocks-st.Bfree) * float64(st.Bsize)
	avail := float64(st.Bavail) * float64(st.Bsize)
	if used+avail <= 0 {
		return nil
	}
	s.DiskUsedPct = round2(clamp(100*used/(used+avail), 0, 100))
	return nil
}

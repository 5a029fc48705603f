package soak

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// mountTmpfs mounts a tmpfs of size bytes on dir (root only), so that
// filling it up fills the database's filesystem and nothing else.
func mountTmpfs(dir string, size int64) error {
	if os.Getuid() != 0 {
		return errors.New("not root: a size-limited tmpfs cannot be mounted")
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10)+",mode=0700", "tmpfs", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount tmpfs: %v: %s", err, out)
	}
	return nil
}

func unmount(dir string) { exec.Command("umount", "-l", dir).Run() }

// fill writes a file into dir until its filesystem has no space left, and
// returns the file's path (removing it gives the space back).
func fill(dir string) (string, error) {
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		return path, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				// The last few blocks too.
				small := buf[:4096]
				for {
					if _, err := f.Write(small); err != nil {
						return path, nil
					}
				}
			}
			return path, err
		}
	}
}

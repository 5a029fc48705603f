package qemurig

import (
	"fmt"
	"io"
	"path"
	"strings"
)

// CPIOWriter writes a cpio archive in the "newc" format the kernel unpacks
// as an initramfs. Entries are written in the order they are added; parent
// directories must be added before their children.
type CPIOWriter struct {
	w     io.Writer
	ino   uint32
	names map[string]bool
	err   error
}

// NewCPIOWriter returns a writer appending to w.
func NewCPIOWriter(w io.Writer) *CPIOWriter {
	return &CPIOWriter{w: w, ino: 1, names: make(map[string]bool)}
}

const (
	modeDir     = 0o040000
	modeRegular = 0o100000
	modeSymlink = 0o120000
)

// Dir adds a directory, and any missing parents, with permission perm.
func (c *CPIOWriter) Dir(name string, perm uint32) error {
	name = cleanName(name)
	if name == "" || c.names[name] {
		return c.err
	}
	if parent := path.Dir(name); parent != "." {
		if err := c.Dir(parent, 0o755); err != nil {
			return err
		}
	}
	return c.entry(name, modeDir|perm, nil, "")
}

// File adds a regular file with the given contents and permission perm,
// creating missing parent directories.
func (c *CPIOWriter) File(name string, perm uint32, data []byte) error {
	name = cleanName(name)
	if parent := path.Dir(name); parent != "." {
		if err := c.Dir(parent, 0o755); err != nil {
			return err
		}
	}
	return c.entry(name, modeRegular|perm, data, "")
}

// Symlink adds a symbolic link name pointing at target.
func (c *CPIOWriter) Symlink(name, target string) error {
	name = cleanName(name)
	if parent := path.Dir(name); parent != "." {
		if err := c.Dir(parent, 0o755); err != nil {
			return err
		}
	}
	return c.entry(name, modeSymlink|0o777, []byte(target), "")
}

// Close writes the trailer. It does not close the underlying writer.
func (c *CPIOWriter) Close() error {
	return c.entry("TRAILER!!!", 0, nil, "trailer")
}

func cleanName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

func (c *CPIOWriter) entry(name string, mode uint32, data []byte, kind string) error {
	if c.err != nil {
		return c.err
	}
	if kind != "trailer" {
		if c.names[name] {
			c.err = fmt.Errorf("cpio: duplicate entry %q", name)
			return c.err
		}
		c.names[name] = true
	}
	ino := uint32(0)
	nlink := uint32(1)
	if kind != "trailer" {
		ino = c.ino
		c.ino++
		if mode&0o170000 == modeDir {
			nlink = 2
		}
	}
	// newc header: magic, then 13 eight-digit hex fields.
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	buf := make([]byte, 0, len(hdr)+len(name)+4)
	buf = append(buf, hdr...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	if _, err := c.w.Write(buf); err != nil {
		c.err = fmt.Errorf("cpio: write %s: %w", name, err)
		return c.err
	}
	if len(data) > 0 {
		if _, err := c.w.Write(data); err != nil {
			c.err = fmt.Errorf("cpio: write %s: %w", name, err)
			return c.err
		}
		if n := (4 - len(data)%4) % 4; n > 0 {
			if _, err := c.w.Write(make([]byte, n)); err != nil {
				c.err = fmt.Errorf("cpio: write %s: %w", name, err)
				return c.err
			}
		}
	}
	return nil
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

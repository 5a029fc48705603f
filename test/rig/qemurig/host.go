package qemurig

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
)

// QEMUBinary is the emulator the rig boots.
const QEMUBinary = "qemu-system-x86_64"

// systemBusybox is where Debian's busybox-static installs its binary.
const systemBusybox = "/bin/busybox"

// EnsureQEMU returns the path of qemu-system-x86_64, installing Debian's
// qemu-system-x86 package (apt-get update, then apt-get install) when it
// is missing (with busybox-static when no busybox is there either).
// Installing needs root; without it the error says what to install.
func EnsureQEMU(ctx context.Context, log *slog.Logger) (string, error) {
	if p, err := exec.LookPath(QEMUBinary); err == nil {
		return p, nil
	}
	pkgs := []string{"qemu-system-x86"}
	if _, err := os.Stat(systemBusybox); errors.Is(err, os.ErrNotExist) {
		// One apt-get run for both on a fresh machine.
		pkgs = append(pkgs, "busybox-static")
	}
	if err := aptInstall(ctx, log, pkgs...); err != nil {
		return "", fmt.Errorf("%s is missing: %w", QEMUBinary, err)
	}
	p, err := exec.LookPath(QEMUBinary)
	if err != nil {
		return "", fmt.Errorf("%s still missing after installing qemu-system-x86: %w", QEMUBinary, err)
	}
	return p, nil
}

// EnsureBusybox returns the path of a statically linked busybox for the
// guest. It uses /bin/busybox when that is static, installs Debian's
// busybox-static when no busybox is there, and when the host has the
// dynamic busybox (which busybox-static would replace) takes the static
// binary out of the downloaded package into cacheDir instead.
func EnsureBusybox(ctx context.Context, log *slog.Logger, cacheDir string) (string, error) {
	static, err := isStatic(systemBusybox)
	switch {
	case err == nil && static:
		return systemBusybox, nil
	case errors.Is(err, os.ErrNotExist):
		if err := aptInstall(ctx, log, "busybox-static"); err != nil {
			return "", fmt.Errorf("busybox is missing: %w", err)
		}
		if static, err := isStatic(systemBusybox); err != nil || !static {
			return "", fmt.Errorf("%s is not a static binary after installing busybox-static", systemBusybox)
		}
		return systemBusybox, nil
	}
	// A dynamic busybox: use the static one from the package, cached.
	cached := filepath.Join(cacheDir, "busybox-static", "busybox")
	if static, err := isStatic(cached); err == nil && static {
		return cached, nil
	}
	log.Info("host busybox is dynamic; extracting busybox-static into the cache")
	tmp, err := os.MkdirTemp(cacheDir, ".busybox-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	deb, err := aptDownload(ctx, tmp, "busybox-static")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return "", err
	}
	found := false
	err = walkDeb(ctx, deb, func(h *tar.Header, r io.Reader) error {
		if h.Typeflag == tar.TypeReg && (h.Name == "./bin/busybox" || h.Name == "./usr/bin/busybox") {
			found = true
			if err := writeFile(cached, r); err != nil {
				return err
			}
			return os.Chmod(cached, 0o755)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if !found {
		return "", errors.New("busybox-static package has no bin/busybox")
	}
	return cached, nil
}

// isStatic reports whether the ELF file at path has no program
// interpreter, that is, needs no dynamic loader.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

func aptInstall(ctx context.Context, log *slog.Logger, pkgs ...string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root, cannot apt-get install %v: install it and rerun", pkgs)
	}
	log.Info("installing with apt-get", "packages", pkgs)
	if err := aptUpdate(ctx); err != nil {
		return err
	}
	args := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	if _, err := runOut(ctx, "apt-get", args...); err != nil {
		return err
	}
	return nil
}

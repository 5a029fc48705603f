package qemurig

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// TestBinary is a static test binary for the guest.
type TestBinary struct {
	// Package is the import path the binary tests.
	Package string
	// Path is the binary on the host.
	Path string
}

// kernelTestRE finds a TestKernel* function in a test file.
var kernelTestRE = regexp.MustCompile(`(?m)^func TestKernel\w*\(\s*\w+\s+\*testing\.T\s*\)`)

// DiscoverKernelTests lists the packages under root (a module directory)
// whose test files define TestKernel* tests, as built for linux/amd64
// without cgo.
func DiscoverKernelTests(ctx context.Context, goTool, root string) ([]string, error) {
	cmd := exec.CommandContext(ctx, goTool, "list", "-e",
		"-f", `{{.ImportPath}}|{{.Dir}}|{{join .TestGoFiles ","}}|{{join .XTestGoFiles ","}}`, "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, tail(stderr.Bytes()))
	}
	var pkgs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 4 {
			continue
		}
		var files []string
		for _, list := range f[2:] {
			if list != "" {
				files = append(files, strings.Split(list, ",")...)
			}
		}
		for _, name := range files {
			src, err := os.ReadFile(filepath.Join(f[1], name))
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", name, err)
			}
			if kernelTestRE.Match(src) {
				pkgs = append(pkgs, f[0])
				break
			}
		}
	}
	sort.Strings(pkgs)
	return pkgs, nil
}

// BuildTests builds a static, stripped linux/amd64 test binary for each
// package into dir (go test -c with CGO_ENABLED=0). Packages are built in
// as few go invocations as their names allow (one, unless two packages
// share a last path element), so compiles and links overlap.
func BuildTests(ctx context.Context, goTool, root, dir string, pkgs []string) ([]TestBinary, error) {
	var batches [][]string
	for _, pkg := range pkgs {
		placed := false
		for i, b := range batches {
			clash := false
			for _, other := range b {
				clash = clash || path.Base(other) == path.Base(pkg)
			}
			if !clash {
				batches[i] = append(b, pkg)
				placed = true
				break
			}
		}
		if !placed {
			batches = append(batches, []string{pkg})
		}
	}
	var bins []TestBinary
	for i, batch := range batches {
		out := filepath.Join(dir, fmt.Sprintf("b%d", i))
		if err := os.MkdirAll(out, 0o755); err != nil {
			return nil, err
		}
		args := append([]string{"test", "-c", "-ldflags=-s -w", "-o", out + "/"}, batch...)
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build the guest test binaries of %v: %w: %s", batch, err, tail(msg))
		}
		for _, pkg := range batch {
			built := filepath.Join(out, path.Base(pkg)+".test")
			bin := filepath.Join(dir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg)+".test")
			if err := os.Rename(built, bin); err != nil {
				return nil, fmt.Errorf("build test binary of %s: no binary (no test files?): %w", pkg, err)
			}
			bins = append(bins, TestBinary{Package: pkg, Path: bin})
		}
	}
	return bins, nil
}

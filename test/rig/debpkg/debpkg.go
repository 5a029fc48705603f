// Package debpkg finds the program a test harness runs (redis-server,
// haproxy, ...) and installs its Debian package with apt-get when it is
// missing, so that a fresh machine runs the same tests as a prepared one.
package debpkg

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var mu sync.Mutex // one apt-get at a time within a test binary

// Need returns the path of program, installing Debian package pkg first
// when program is neither on PATH nor in /usr/sbin or /usr/bin. It fails
// the test when that is impossible (not root, no apt-get).
func Need(tb testing.TB, program, pkg string) string {
	tb.Helper()
	p, err := Find(program, pkg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Find is Need for a program that is not a test (a benchmark): it returns
// an error where Need fails the test.
func Find(program, pkg string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if p := find(program); p != "" {
		return p, nil
	}
	if err := install(pkg); err != nil {
		return "", fmt.Errorf("%s is missing and could not be installed: %v", program, err)
	}
	p := find(program)
	if p == "" {
		return "", fmt.Errorf("%s still missing after installing %s", program, pkg)
	}
	return p, nil
}

func find(program string) string {
	if p, err := exec.LookPath(program); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/sbin"} {
		p := filepath.Join(dir, program)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

func install(pkg string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root: run `apt-get install -y %s` first", pkg)
	}
	apt := func(args ...string) error {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %v: %v\n%s", args, err, out)
		}
		return nil
	}
	if err := apt("install", "-y", "--no-install-recommends", pkg); err != nil {
		// A fresh machine may have no package lists yet.
		if err := apt("update"); err != nil {
			return err
		}
		return apt("install", "-y", "--no-install-recommends", pkg)
	}
	return nil
}

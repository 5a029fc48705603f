// Package deploy_test checks the deployment files in deploy/ against the
// real binaries and tools: the systemd units with systemd-analyze, the
// example configs against the flag sets, the .deb packages built by
// `make package` with dpkg, and the relay's container image laid out from
// its Dockerfile and run in a chroot. TestMain runs
// `make package-deps package nspawn-root` once; every test uses what it
// built.
package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repo is the repository root; bin and dist are the BIN and DIST folders
// of TestMain's make run, in a temporary folder of this run's own.
var (
	repo      = mustAbs("..")
	bin, dist string
	// nspawnTemplate is the Debian root of make nspawn-root.
	nspawnTemplate = envOr("NSPAWN_ROOT", "/var/cache/fleet-deploy/nspawn-bookworm")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "fleet-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	bin, dist = filepath.Join(tmp, "bin"), filepath.Join(tmp, "dist")
	cmd := exec.Command("make", "-C", repo, "--no-print-directory", "package-deps", "package", "nspawn-root",
		"BIN="+bin, "DIST="+dist, "NSPAWN_ROOT="+nspawnTemplate)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "deploy: make package-deps package nspawn-root: %v\n%s", err, out.String())
		return 1
	}
	return m.Run()
}

// relayBin is the static relay that make package put in the .deb and the
// container image uses.
func relayBin() string { return filepath.Join(bin, "fleet-relay-static") }

// deb returns the one package make package built for name and arch.
func deb(t *testing.T, name, arch string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dist, name+"_*_"+arch+".deb"))
	if err != nil || len(m) != 1 {
		t.Fatalf("dist/%s_*_%s.deb: want one package, found %v (%v)", name, arch, m, err)
	}
	return m[0]
}

// run runs a command and fails the test with its output when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// gateway is a device as `device add` prints it.
type gateway struct{ ID, Token string }

// addGateway creates the organization Acme with one IG-500 gateway through
// admin, as an operator does before the agent's first start; it returns
// the organization's id and the gateway.
func addGateway(admin func(v any, args ...string)) (string, gateway) {
	var org struct{ ID string }
	admin(&org, "org", "create", "--name", "Acme")
	var dev gateway
	admin(&dev, "device", "add", "--org", org.ID, "--name", "gw", "--serial", "SN-1", "--model", "IG-500")
	return org.ID, dev
}

// copyFile copies src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil {
		t.Fatal(err)
	}
}

// Repository-wide checks that no single package owns.
package fleet_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEveryPackageHasADocComment fails when a package (other than a main or
// a test-only package) has no package doc comment in any of its files.
func TestEveryPackageHasADocComment(t *testing.T) {
	dirs := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found only %d package directories; is the walk broken?", len(dirs))
	}
	for dir := range dirs {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		for name, pkg := range pkgs {
			documented := false
			for _, f := range pkg.Files {
				if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
					documented = true
					break
				}
			}
			if !documented {
				t.Errorf("package %s (%s) has no package doc comment", name, dir)
			}
		}
	}
}

// TestNoGrabBagPackages keeps package names meaningful (STYLE.md).
func TestNoGrabBagPackages(t *testing.T) {
	for _, bad := range []string{"util", "utils", "common", "helpers", "pkg", "misc"} {
		matches, _ := filepath.Glob(filepath.Join("*", bad))
		more, _ := filepath.Glob(filepath.Join("*", "*", bad))
		for _, m := range append(matches, more...) {
			if fi, err := os.Stat(m); err == nil && fi.IsDir() {
				t.Errorf("grab-bag package directory %s", m)
			}
		}
	}
}

// makeVar returns the value of NAME := VALUE in the Makefile.
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*:=\s*(.*)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("the Makefile sets no %s", name)
	}
	return strings.TrimSpace(m[1])
}

// TestMakeTestReadsInOnePlace: the Makefile's test and test-e2e lines name
// every suite make test runs, no fragment of mk/ adds to them (or to
// test-unit), every suite has a description in make help, and what
// test-unit leaves to the end-to-end suites still exists: their packages
// and the relay's tests they select by name.
func TestMakeTestReadsInOnePlace(t *testing.T) {
	b, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	makefile := string(b)
	ruleOf := func(text, target string) []string {
		m := regexp.MustCompile(`(?m)^` + target + `:([^=#\n]*)`).FindStringSubmatch(text)
		if m == nil {
			return nil
		}
		return strings.Fields(m[1])
	}
	suites := ruleOf(makefile, "test")
	e2e := ruleOf(makefile, "test-e2e")
	for _, want := range []string{"vet", "test-unit", "test-e2e"} {
		if !slices.Contains(suites, want) {
			t.Errorf("the Makefile's test line does not name %s: %v", want, suites)
		}
	}
	if len(e2e) < 5 {
		t.Errorf("the Makefile's test-e2e line names %v; want every end-to-end suite", e2e)
	}
	fragments, _ := filepath.Glob("mk/*.mk")
	for _, f := range fragments {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "TEST_TARGETS") {
			t.Errorf("%s adds to TEST_TARGETS; name the suite on the Makefile's test line instead", f)
		}
		for _, target := range []string{"test", "test-unit", "test-e2e"} {
			if ruleOf(string(b), target) != nil {
				t.Errorf("%s adds prerequisites to %s; list them where the Makefile defines it", f, target)
			}
		}
	}
	out, err := exec.Command("make", "--no-print-directory", "help").CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	for _, target := range append(append([]string{"test", "test-e2e"}, suites...), e2e...) {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(target) + ` +\S`).Match(out) {
			t.Errorf("make help does not describe %s (a ## comment on its rule)", target)
		}
	}
	for _, pkg := range strings.Fields(makeVar(t, makefile, "E2E_PKGS")) {
		if fi, err := os.Stat(pkg); err != nil || !fi.IsDir() {
			t.Errorf("E2E_PKGS names %s, which is not a folder: test-unit would run what it means to leave out", pkg)
		}
	}
	relay := makeVar(t, makefile, "RELAY_PKG")
	var src strings.Builder
	files, _ := filepath.Glob(filepath.Join(relay, "*_test.go"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, name := range []string{"RELAY_CLUSTER", "RELAY_BINARIES"} {
		for _, test := range regexp.MustCompile(`Test[A-Za-z0-9_]+`).FindAllString(makeVar(t, makefile, name), -1) {
			if !regexp.MustCompile(`(?m)^func ` + test).MatchString(src.String()) {
				t.Errorf("%s selects %s, which no test of %s (RELAY_PKG) declares", name, test, relay)
			}
		}
	}
}

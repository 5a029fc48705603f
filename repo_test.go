// Repository-wide checks that no single package owns.
package fleet_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
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

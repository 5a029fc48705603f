package fleet_test

// docs/architecture.md is a newcomer's map: its picture names the rooms
// (folders) and its two walks name files and the functions in them, in the
// order a message passes. These tests keep every one of those names true, so
// a move or a rename that would strand the map fails here with the line to
// fix.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const architectureDoc = "docs/architecture.md"

func readArchitecture(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// backticked returns the `quoted` names of text.
func backticked(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// looksLikePath reports whether a quoted name is meant as a file or folder
// of the repository (not an API path, a scope or a type).
func looksLikePath(s string) bool {
	if strings.ContainsAny(s, " {}:*") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return false
	}
	if strings.HasSuffix(s, ".go") || strings.HasSuffix(s, ".md") || strings.HasSuffix(s, ".sql") {
		return true
	}
	top, _, ok := strings.Cut(s, "/")
	if !ok {
		return false
	}
	switch top {
	case "agent", "cloud", "hw", "shared", "bench", "test", "deploy", "docs", "mk":
		return true
	}
	return false
}

// TestArchitectureNamesExist: every file and folder the page names exists.
func TestArchitectureNamesExist(t *testing.T) {
	doc := readArchitecture(t)
	seen := 0
	for _, name := range backticked(doc) {
		if !looksLikePath(name) {
			continue
		}
		seen++
		if _, err := os.Stat(filepath.FromSlash(strings.TrimSuffix(name, "/"))); err != nil {
			t.Errorf("%s names %s, which does not exist", architectureDoc, name)
		}
	}
	// The picture: every folder it draws.
	dirs := pictureFolders(t, doc)
	if len(dirs) < 20 {
		t.Errorf("the picture names %d folders; want the rooms of the agent and the relay (20 or more)", len(dirs))
	}
	for _, d := range dirs {
		if fi, err := os.Stat(strings.TrimSuffix(d, "/")); err != nil || !fi.IsDir() {
			t.Errorf("the picture in %s draws folder %s, which does not exist", architectureDoc, d)
		}
	}
	if seen < 40 {
		t.Errorf("%s names %d files and folders; the walks alone should name more than 40", architectureDoc, seen)
	}
}

// pictureFolders returns the folders the page's picture (its first fenced
// block) draws, as written (a room may end in a slash).
func pictureFolders(t *testing.T, doc string) []string {
	t.Helper()
	pic, _, ok := strings.Cut(doc[strings.Index(doc, "```")+3:], "```")
	if !ok {
		t.Fatalf("%s has no picture (a fenced block)", architectureDoc)
	}
	var dirs []string
	for _, m := range regexp.MustCompile(`(?m)(?:^|[^/\w])((?:agent|cloud|hw|shared|bench|test|deploy|docs)(?:/[a-z0-9_-]+)*/?)`).FindAllStringSubmatch(pic, -1) {
		dirs = append(dirs, m[1])
	}
	return dirs
}

// module is the import path of the repository's root.
const module = "github.com/fleet/fleet"

// goList runs go list with args at the repository's root and returns the
// lines it prints.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestArchitectureShowsEveryPackage: every Go package of the repository is
// drawn in the picture or named in the page's list of every package, so a
// new package cannot go unmapped.
func TestArchitectureShowsEveryPackage(t *testing.T) {
	doc := readArchitecture(t)
	shown := map[string]bool{}
	for _, d := range pictureFolders(t, doc) {
		shown[strings.TrimSuffix(d, "/")] = true
	}
	_, list, ok := strings.Cut(doc, "\n## Every package\n")
	if !ok {
		t.Fatalf("%s has no section \"## Every package\"", architectureDoc)
	}
	list, _, _ = strings.Cut(list, "\n## ")
	for _, name := range backticked(list) {
		shown[strings.TrimSuffix(name, "/")] = true
	}
	var missing []string
	for _, pkg := range goList(t, "./...") {
		rel, ok := strings.CutPrefix(pkg, module+"/")
		if !ok {
			continue // the repository-wide tests at the root
		}
		if !shown[rel] {
			missing = append(missing, rel)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s shows neither in its picture nor in its list of every package: %s", architectureDoc, strings.Join(missing, ", "))
	}
}

// The rooms of what ships, and what never does.
var productRooms = []string{"agent", "cloud", "hw", "shared"}

// room returns the top folder of a package of the module ("" for another
// module's package).
func room(importPath string) string {
	rel, ok := strings.CutPrefix(importPath, module+"/")
	if !ok {
		return ""
	}
	top, _, _ := strings.Cut(rel, "/")
	return top
}

// testHelper reports whether a package is a helper for tests kept beside
// the code it exercises (cloud/storetest, hw/modbus/modbustest): tests
// and other helpers import it, shipped code never.
func testHelper(importPath string) bool {
	return strings.HasSuffix(importPath, "test")
}

// TestShippedCodeImportsNoRig keeps what ships apart from what only tests,
// measures or demonstrates it: the two binaries link only packages of the
// product's rooms (agent/, cloud/, hw/, shared/) and no test helper, and no
// product package, test helpers included, depends on the test rigs and
// suites (test/), the benchmarks (bench/) or the demo's tools (deploy/).
func TestShippedCodeImportsNoRig(t *testing.T) {
	for _, pkg := range goList(t, "-deps", "./cloud/cmd/fleet-relay", "./agent/cmd/fleet-agent") {
		if r := room(pkg); r != "" && (!slices.Contains(productRooms, r) || testHelper(pkg)) {
			t.Errorf("fleet-relay or fleet-agent links %s, which must not ship", pkg)
		}
	}
	var trees []string
	for _, r := range productRooms {
		trees = append(trees, "./"+r+"/...")
	}
	checked := 0
	for _, line := range goList(t, append([]string{"-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, trees...)...) {
		imports := strings.Fields(line)
		pkg := imports[0]
		checked++
		for _, dep := range imports[1:] {
			switch r := room(dep); {
			case r == "":
			case !slices.Contains(productRooms, r):
				t.Errorf("%s imports %s: product code (%s) may not import test rigs, benchmarks or demo tools; a test file may", pkg, dep, strings.Join(productRooms, "/, ")+"/")
			case testHelper(dep) && !testHelper(pkg):
				t.Errorf("%s imports the test helper %s; only tests and other test helpers may", pkg, dep)
			}
		}
	}
	if checked < 40 {
		t.Errorf("checked %d product packages; is go list's pattern broken?", checked)
	}
}

// walkStep is one numbered step of a walk.
type walkStep struct {
	walk string
	n    string
	text string // with its lines joined
}

// walks returns the steps of every <!-- walk: NAME --> block.
func walks(t *testing.T, doc string) map[string][]walkStep {
	t.Helper()
	out := map[string][]walkStep{}
	re := regexp.MustCompile(`(?s)<!-- walk: ([a-z-]+) -->(.*?)<!-- /walk -->`)
	step := regexp.MustCompile(`^(\d+)\. (.*)`)
	for _, m := range re.FindAllStringSubmatch(doc, -1) {
		name := m[1]
		var steps []walkStep
		for _, line := range strings.Split(m[2], "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			if s := step.FindStringSubmatch(line); s != nil {
				steps = append(steps, walkStep{walk: name, n: s[1], text: s[2]})
				continue
			}
			if len(steps) == 0 {
				t.Fatalf("walk %s: text before its first numbered step: %q", name, line)
			}
			steps[len(steps)-1].text += " " + line
		}
		out[name] = steps
	}
	return out
}

// declares reports whether the Go file at path declares a function or
// method called name.
func declares(t *testing.T, path, name string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		return false
	}
	re := regexp.MustCompile(`(?m)^func (\([^)]*\) )?` + regexp.QuoteMeta(name) + `[\[(]`)
	return re.Match(b)
}

// TestArchitectureWalks: both walks are there, every step starts with a
// file and a function, and every "`file.go` `Function`" pair of a step is a
// function declared in that file.
func TestArchitectureWalks(t *testing.T) {
	ws := walks(t, readArchitecture(t))
	for _, want := range []string{"heartbeat", "put-channel"} {
		if len(ws[want]) < 10 {
			t.Errorf("walk %q has %d steps; want the whole path (10 or more)", want, len(ws[want]))
		}
	}
	pair := regexp.MustCompile("`([a-z0-9_/.-]+\\.go)` `([A-Za-z_][A-Za-z0-9_]*)`")
	lead := regexp.MustCompile("^`[a-z0-9_/.-]+\\.go` `[A-Za-z_][A-Za-z0-9_]*`")
	for name, steps := range ws {
		for i, s := range steps {
			if want := i + 1; s.n != strconv.Itoa(want) {
				t.Errorf("walk %s: step %s comes where step %d should", name, s.n, want)
			}
			if !lead.MatchString(s.text) {
				t.Errorf("walk %s step %s does not start with a file and a function: %q", name, s.n, s.text)
			}
			for _, m := range pair.FindAllStringSubmatch(s.text, -1) {
				if !declares(t, m[1], m[2]) {
					t.Errorf("walk %s step %s: %s does not declare %s", name, s.n, m[1], m[2])
				}
			}
		}
	}
}

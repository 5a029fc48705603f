package api_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud/api"
)

// TestOpenAPITypeScript generates a TypeScript client's types from the
// served document with openapi-typescript (from the npm registry, pinned in
// testdata/openapi-typescript/package-lock.json), as a customer would, and
// checks that every field of every schema gets a useful type: none is
// unknown, never or Record<string, never> (an anyOf of bare constraints, or
// an object without properties, makes them), the free-form objects
// (Alert.payload, Event.data) are maps, and the output compiles under tsc
// --strict.
func TestOpenAPITypeScript(t *testing.T) {
	dir := npmTools(t, "testdata/openapi-typescript")
	doc := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(doc, api.OpenAPI(), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "fleet-api.ts")
	run(t, dir, filepath.Join(dir, "node_modules/.bin/openapi-typescript"), doc, "-o", out)
	ts, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// The schemas: from "schemas: {" to the "responses: {" of components.
	text := string(ts)
	start, end := strings.Index(text, "    schemas: {"), strings.Index(text, "    responses: {")
	if start < 0 || end < start {
		t.Fatalf("no components.schemas in the generated types:\n%s", text)
	}
	schemas := text[start:end]
	field := regexp.MustCompile(`(?m)^\s+("?[\w-]+"?\??): (.+);$`)
	fields := 0
	for _, m := range field.FindAllStringSubmatch(schemas, -1) {
		fields++
		typ := m[2]
		for _, bad := range []string{"unknown", "never", "Record<string, never>"} {
			if regexp.MustCompile(`(^|[ |<(])` + regexp.QuoteMeta(bad) + `($|[ |>;)\]])`).MatchString(typ) {
				t.Errorf("field %s is typed %q (contains %s)", m[1], typ, bad)
			}
		}
	}
	if fields < 100 {
		t.Fatalf("only %d fields found in the generated schemas:\n%s", fields, schemas)
	}
	for _, open := range []string{"payload: {\n                [key: string]: unknown;", "data: {\n                [key: string]: unknown;"} {
		if !strings.Contains(schemas, open) {
			t.Errorf("no map type %q in the generated schemas", open)
		}
	}
	if strings.Contains(schemas, "intervalMs: number | 0 | unknown") || !strings.Contains(schemas, "intervalMs: number | 0;") {
		t.Errorf("tx.intervalMs is not typed number:\n%s", schemas)
	}
	run(t, dir, filepath.Join(dir, "node_modules/.bin/tsc"), "--noEmit", "--strict", "--target", "es2020", out)
}

// npmTools installs the npm packages pinned in src (package.json and
// package-lock.json) with npm ci into .cache/<name> at the repository's
// root, once per lock file, and returns that folder.
func npmTools(t *testing.T, src string) string {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm is needed (Debian: apt-get install nodejs npm; make test installs it): %v", err)
	}
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, ".cache", filepath.Base(src))
	if have, err := os.ReadFile(filepath.Join(dir, "package-lock.json")); err == nil && bytes.Equal(have, lock) {
		if _, err := os.Stat(filepath.Join(dir, "node_modules")); err == nil {
			return dir
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dir, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	return dir
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

// TestOpenAPIDocumentHygiene: the info block names a license, and every
// component is referenced from somewhere (an unused one is dead weight that
// generated clients still carry).
func TestOpenAPIDocumentHygiene(t *testing.T) {
	var doc struct {
		Info struct {
			License *struct{ Name, Identifier, URL string } `json:"license"`
		} `json:"info"`
		Components map[string]map[string]json.RawMessage `json:"components"`
	}
	raw := api.OpenAPI()
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if l := doc.Info.License; l == nil || l.Name == "" || l.Identifier == "" && l.URL == "" {
		t.Errorf("info.license = %+v, want a name and an identifier or URL", l)
	}
	for kind, items := range doc.Components {
		if kind == "securitySchemes" {
			continue // referenced by name in security requirements
		}
		for name := range items {
			if !bytes.Contains(raw, []byte(`"#/components/`+kind+`/`+name+`"`)) {
				t.Errorf("components.%s.%s is referenced nowhere", kind, name)
			}
		}
	}
}

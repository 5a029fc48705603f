package panel_test

import (
	"os"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
)

// docTables returns the rows of the Markdown tables of docs/panel.md, by
// the table's first header cell.
func docTables(t *testing.T) map[string][][]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/panel.md")
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string][][]string{}
	head := ""
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "|") {
			head = ""
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		switch {
		case head == "":
			head = cells[0]
		case strings.HasPrefix(cells[0], "---"):
		default:
			tables[head] = append(tables[head], cells)
		}
	}
	return tables
}

// TestDocsRoleMatrix: docs/panel.md's matrix is the one the server enforces.
func TestDocsRoleMatrix(t *testing.T) {
	rows := docTables(t)["permission"]
	if len(rows) != len(cloud.Permissions) {
		t.Fatalf("docs/panel.md's matrix has %d rows, the code %d permissions", len(rows), len(cloud.Permissions))
	}
	for i, r := range rows {
		perm := cloud.Permission(strings.SplitN(r[0], ":", 2)[0])
		if perm != cloud.Permissions[i] {
			t.Errorf("row %d is %q, want %q", i, perm, cloud.Permissions[i])
		}
		for j, role := range cloud.Roles {
			if want := map[bool]string{true: "yes", false: "no"}[role.Can(perm)]; r[j+1] != want {
				t.Errorf("docs say %s may %s: %q; the server says %s", role, perm, r[j+1], want)
			}
		}
	}
}

// TestDocsRoutes: docs/panel.md lists every route with its permission, and
// no other.
func TestDocsRoutes(t *testing.T) { stores.Run(t, testDocsRoutes) }

func testDocsRoutes(t *testing.T, open storetest.Opener) {
	h := liveHarness(t, open, 0) // every route, the live stream's too
	documented := map[string]string{}
	for _, r := range docTables(t)["method"] {
		documented[r[0]+" "+r[1]] = r[2]
	}
	seen := 0
	for _, rt := range h.srv.Routes() {
		key := rt.Method + " " + strings.ReplaceAll(rt.Pattern, "{$}", "")
		perm, ok := documented[key]
		if !ok {
			t.Errorf("docs/panel.md does not list %s", key)
			continue
		}
		seen++
		if perm != string(rt.Perm) {
			t.Errorf("%s: docs say permission %q, the server %q", key, perm, rt.Perm)
		}
	}
	if seen != len(documented) {
		t.Errorf("docs/panel.md lists %d routes, the server has %d of them", len(documented), seen)
	}
}

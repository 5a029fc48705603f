package cloud_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
)

// TestAuditActionsComplete: AuditActions names every Action* constant of
// audit.go, in its order, and docs/audit.md's table lists each of them.
func TestAuditActionsComplete(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "audit.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, sp := range g.Specs {
			vs := sp.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if strings.HasPrefix(n.Name, "Action") && i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
						v, _ := strconv.Unquote(lit.Value)
						declared = append(declared, v)
					}
				}
			}
		}
	}
	if !slices.Equal(declared, cloud.AuditActions) {
		t.Errorf("cloud.AuditActions is not audit.go's Action* constants in order:\n have %q\n want %q", cloud.AuditActions, declared)
	}
	doc, err := os.ReadFile("../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range declared {
		if !strings.Contains(string(doc), "| `"+a+"` |") {
			t.Errorf("docs/audit.md has no row for %s", a)
		}
	}
}

func TestAuditActionFilters(t *testing.T) {
	for _, a := range []string{"", cloud.ActionKeyCreated, "key.", "session.", "notification_channel."} {
		if !cloud.ValidAuditAction(a) {
			t.Errorf("%q refused", a)
		}
	}
	for _, a := range []string{"key", "key.made", "nothing.", ".", "key.created.", "KEY."} {
		if cloud.ValidAuditAction(a) {
			t.Errorf("%q accepted", a)
		}
	}
}

// TestAuditRecordJSON: DESIGN.md's shape, at in UTC with milliseconds, the
// address only as "ip".
func TestAuditRecordJSON(t *testing.T) {
	r := cloud.AuditRecord{ID: "a1", OrgID: "o1", At: time.Date(2026, 11, 27, 5, 6, 7, 890_123_000, time.FixedZone("x", 3600)),
		Actor:  cloud.Actor{Kind: cloud.ActorUser, ID: "u1", Name: "ana@example.com", IP: "192.0.2.1"},
		Action: cloud.ActionKeyCreated, Target: cloud.AuditTarget{Kind: cloud.TargetKey, ID: "k1"}, IP: "192.0.2.1"}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"a1","at":"2026-11-27T04:06:07.890Z","actor":{"kind":"user","id":"u1","name":"ana@example.com"},"action":"key.created","target":{"kind":"api_key","id":"k1"},"ip":"192.0.2.1","details":{}}`
	if string(b) != want {
		t.Errorf("JSON\n have %s\n want %s", b, want)
	}
}

// TestAuditDetailsText: details for people keep < and & as themselves
// (the page escapes them) and numbers as written.
func TestAuditDetailsText(t *testing.T) {
	r := cloud.AuditRecord{Details: json.RawMessage(`{"name":"\u003cscript\u003e \u0026 co","n":12345678901234567890}`)}
	if got, want := r.DetailsText(), `{"n":12345678901234567890,"name":"<script> & co"}`; got != want {
		t.Errorf("DetailsText %s, want %s", got, want)
	}
	if got := (cloud.AuditRecord{}).DetailsText(); got != "{}" {
		t.Errorf("no details: %s", got)
	}
}

package benchreport_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet/fleet/bench/benchreport"
)

func target(op benchreport.Op, v float64, unit string) *benchreport.Target {
	return &benchreport.Target{Op: op, Value: v, Unit: unit}
}

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name string
		row  benchreport.Row
		want benchreport.Result
	}{
		{"at least, above", benchreport.Row{Measured: 22114, Unit: "req/s", Target: target(benchreport.AtLeast, 15000, "")}, benchreport.Pass},
		{"at least, equal", benchreport.Row{Measured: 15000, Unit: "req/s", Target: target(benchreport.AtLeast, 15000, "")}, benchreport.Pass},
		{"at least, below", benchreport.Row{Measured: 7476, Unit: "req/s", Target: target(benchreport.AtLeast, 15000, "")}, benchreport.Miss},
		{"at most, equal", benchreport.Row{Measured: 50.41, Unit: "ms", Target: target(benchreport.AtMost, 50.41, "")}, benchreport.Pass},
		{"at most, above", benchreport.Row{Measured: 50.42, Unit: "ms", Target: target(benchreport.AtMost, 50.41, "")}, benchreport.Miss},
		{"below, equal", benchreport.Row{Measured: 5, Unit: "ms", Target: target(benchreport.Below, 5, "")}, benchreport.Miss},
		{"below, under", benchreport.Row{Measured: 3.53, Unit: "ms", Target: target(benchreport.Below, 5, "")}, benchreport.Pass},
		{"above, equal", benchreport.Row{Measured: 1, Unit: "x", Target: target(benchreport.Above, 1, "")}, benchreport.Miss},
		{"MiB against GiB, under", benchreport.Row{Measured: 1900, Unit: "MiB", Target: target(benchreport.Below, 2, "GiB")}, benchreport.Pass},
		{"MiB against GiB, over", benchreport.Row{Measured: 2049, Unit: "MiB", Target: target(benchreport.Below, 2, "GiB")}, benchreport.Miss},
		{"s against ms: 3.5 s is not under 100 ms", benchreport.Row{Measured: 3.5, Unit: "s", Target: target(benchreport.Below, 100, "ms")}, benchreport.Miss},
		{"µs against ms", benchreport.Row{Measured: 900, Unit: "µs", Target: target(benchreport.Below, 1, "ms")}, benchreport.Pass},
		{"no target", benchreport.Row{Measured: 38700, Unit: "heartbeats/s"}, benchreport.Info},
		{"failed run, even with a good value", benchreport.Row{Measured: 30000, Unit: "req/s", Target: target(benchreport.AtLeast, 15000, ""), Error: "exit status 1"}, benchreport.Miss},
		{"not a number", benchreport.Row{Measured: math.NaN(), Unit: "ms", Target: target(benchreport.Below, 5, "")}, benchreport.Miss},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.row.Area, tt.row.Figure = "a", "f"
			got, err := tt.row.Evaluate()
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Evaluate() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestEvaluateRefusesWhatCannotCompare(t *testing.T) {
	for name, row := range map[string]benchreport.Row{
		"units of two families": {Area: "a", Figure: "f", Measured: 9, Unit: "MiB", Target: target(benchreport.Below, 15, "ms")},
		"unknown unit":          {Area: "a", Figure: "f", Measured: 9, Unit: "req/s", Target: target(benchreport.AtLeast, 15, "rps")},
		"unknown comparison":    {Area: "a", Figure: "f", Measured: 9, Unit: "ms", Target: target("~", 15, "")},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := row.Evaluate()
			if err == nil {
				t.Fatalf("Evaluate() = %s, want an error", res)
			}
			if res != benchreport.Miss {
				t.Errorf("result %s, want MISS", res)
			}
		})
	}
}

func TestRecord(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rows.jsonl")
	row := benchreport.Row{Area: "webhooks", Figure: "deliveries", Unit: "deliveries/s", Measured: 7469, Target: target(benchreport.AtLeast, 2000, "")}

	t.Setenv(benchreport.EnvResults, "")
	if err := benchreport.Record(row); err != nil {
		t.Fatal(err)
	}
	if benchreport.Enabled() {
		t.Error("Enabled() without the variable")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("Record wrote %v without %s", entries, benchreport.EnvResults)
	}

	t.Setenv(benchreport.EnvResults, path)
	t.Setenv(benchreport.EnvTarget, "bench-webhook")
	if err := benchreport.Record(row); err != nil {
		t.Fatal(err)
	}
	named := row
	named.Bench = "bench-other"
	if err := benchreport.Record(named); err != nil {
		t.Fatal(err)
	}
	if err := benchreport.Record(benchreport.Row{Figure: "no area"}); err == nil {
		t.Error("Record accepted a row without an area")
	}
	if err := benchreport.Record(benchreport.Row{Area: "a", Figure: "f", Unit: "MiB", Target: target(benchreport.Below, 1, "s")}); err == nil {
		t.Error("Record accepted a target that cannot be compared")
	}

	got, err := benchreport.ReadRows(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("read %d rows, want 2: %+v", len(got), got)
	}
	if got[0].Bench != "bench-webhook" || got[1].Bench != "bench-other" {
		t.Errorf("bench names %q, %q: want the variable's, then the row's own", got[0].Bench, got[1].Bench)
	}
	if got[0].Measured != 7469 || got[0].Target == nil || got[0].Target.Op != benchreport.AtLeast || got[0].Target.Value != 2000 {
		t.Errorf("row read back as %+v", got[0])
	}
}

func TestReadRowsReportsABadLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rows.jsonl")
	if err := os.WriteFile(path, []byte(`{"area":"a","figure":"f","measured":1}`+"\n{not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := benchreport.ReadRows(path)
	if err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("ReadRows error %v, want one naming line 2", err)
	}
	rows, err := benchreport.ReadRows(filepath.Join(t.TempDir(), "missing.jsonl"))
	if err != nil || len(rows) != 0 {
		t.Fatalf("missing file: %v, %v; want no rows and no error", rows, err)
	}
}

func TestFormatValue(t *testing.T) {
	tests := []struct {
		v    float64
		unit string
		want string
	}{
		{22114.4, "req/s", "22,114 req/s"},
		{1234567, "", "1,234,567"},
		{-4200, "ms", "-4,200 ms"},
		{100, "ms", "100 ms"},
		{38.83, "KiB", "38.8 KiB"},
		{3.534, "ms", "3.53 ms"},
		{0.017, "% of a core", "0.017 % of a core"},
		{2.5, "s", "2.5 s"},
		{0.1058, "ms", "0.106 ms"},
		{0, "ms", "0 ms"},
	}
	for _, tt := range tests {
		if got := benchreport.FormatValue(tt.v, tt.unit); got != tt.want {
			t.Errorf("FormatValue(%v, %q) = %q, want %q", tt.v, tt.unit, got, tt.want)
		}
	}
	if got := benchreport.FormatTarget(target(benchreport.AtLeast, 15000, ""), "req/s"); got != "≥ 15,000 req/s" {
		t.Errorf("FormatTarget = %q", got)
	}
	if got := benchreport.FormatTarget(target(benchreport.Below, 2, "GiB"), "MiB"); got != "< 2 GiB" {
		t.Errorf("FormatTarget with its own unit = %q", got)
	}
}

func TestEscapeMarkdown(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text, 1.5 ms", "plain text, 1.5 ms"},
		{"a | b", `a \| b`},
		{"p99 < 5 ms", `p99 \< 5 ms`},
		{"*bold* _it_ `code`", "\\*bold\\* \\_it\\_ \\`code\\`"},
		{"[link](x) #1", `\[link\](x) \#1`},
		{`back\slash`, `back\\slash`},
		{"two\nlines\r\n  here", "two lines here"},
	}
	for _, tt := range tests {
		if got := benchreport.EscapeMarkdown(tt.in); got != tt.want {
			t.Errorf("EscapeMarkdown(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fleet/fleet/bench/benchreport"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../../.."

// build compiles pkg (a path inside the repository) into dir.
func build(t *testing.T, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, "./"+pkg)
	cmd.Dir = repoRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// runRecording runs a command in dir with FLEET_BENCH_RESULTS set and
// returns the rows it recorded and its output.
func runRecording(t *testing.T, dir string, target string, name string, args ...string) ([]benchreport.Row, string, error) {
	t.Helper()
	rowsPath := filepath.Join(t.TempDir(), "rows.jsonl")
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), benchreport.EnvResults+"="+rowsPath, benchreport.EnvTarget+"="+target)
	out, runErr := cmd.CombinedOutput()
	rows, err := benchreport.ReadRows(rowsPath)
	if err != nil {
		t.Fatal(err)
	}
	return rows, string(out), runErr
}

// TestEveryBenchmarkIsReported holds `make bench` to "every benchmark in
// the repository": each Go benchmark function has rows in a metric set,
// and each metric set is used by a make rule.
func TestEveryBenchmarkIsReported(t *testing.T) {
	sets := metricSets()
	for name, ms := range sets {
		for _, m := range ms {
			if err := m.Row.Validate(); err != nil || (m.TargetFrom != "" && m.Row.Target == nil) {
				t.Errorf("set %s, %s %s: a row the report cannot evaluate (%v)", name, m.Benchmark, m.Unit, err)
			}
		}
	}
	covered := func(bench string) bool {
		for _, ms := range sets {
			for _, m := range ms {
				if m.Benchmark == bench || strings.HasPrefix(m.Benchmark, bench+"/") {
					return true
				}
			}
		}
		return false
	}
	decl := regexp.MustCompile(`(?m)^func (Benchmark\w+)\(b \*testing\.B\)`)
	// The committed test files: a benchmark still being written in
	// someone's working tree is not in the repository yet.
	ls := exec.Command("git", "ls-files", "-z", "*_test.go")
	ls.Dir = repoRoot
	files, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var found []string
	for _, path := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(repoRoot, path))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			found = append(found, string(m[1]))
			if !covered(string(m[1])) {
				t.Errorf("%s: %s is in no metric set of metrics.go, so `make bench` does not report it", path, m[1])
			}
		}
	}
	if len(found) < 7 {
		t.Fatalf("found only %d benchmarks (%v); is the walk broken?", len(found), found)
	}

	mkFiles, err := filepath.Glob(filepath.Join(repoRoot, "mk", "*.mk"))
	if err != nil {
		t.Fatal(err)
	}
	var mk []byte
	for _, f := range mkFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		mk = append(mk, b...)
	}
	for name := range sets {
		if !bytes.Contains(mk, []byte("gotest --set "+name+" ")) {
			t.Errorf("metric set %q is used by no rule in mk/*.mk", name)
		}
	}
}

// TestGoTestRecordsARealBenchmark runs the converter on a real, short
// `go test -bench` run and checks the rows it recorded.
func TestGoTestRecordsARealBenchmark(t *testing.T) {
	tool := build(t, t.TempDir(), "bench/cmd/fleet-benchreport")
	rows, out, err := runRecording(t, repoRoot, "bench-agentlink-decode", tool, "gotest", "--set", "agentlink-decode", "--",
		"go", "test", "-run", "^$", "-bench", "BenchmarkDecodeHeartbeat", "-benchtime", "200x", "./cloud/agentlink/")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "BenchmarkDecodeHeartbeat/cbor") {
		t.Errorf("the go test output was not passed through:\n%s", out)
	}
	want := metricSets()["agentlink-decode"]
	if len(rows) != len(want) {
		t.Fatalf("recorded %d rows, want %d: %+v\n%s", len(rows), len(want), rows, out)
	}
	for i, r := range rows {
		if r.Figure != want[i].Row.Figure || r.Bench != "bench-agentlink-decode" || r.Unit != "µs" || r.Error != "" {
			t.Errorf("row %d = %+v", i, r)
		}
		// Decoding a heartbeat takes microseconds, not nothing and not a
		// second: the figure is the benchmark's ns/op in µs.
		if r.Measured <= 0.01 || r.Measured > 1e6 {
			t.Errorf("row %d measured %v µs", i, r.Measured)
		}
	}
}

// TestGoTestFailingBenchmark: a benchmark that does not run is a failed
// row and a non-zero exit, not a silence.
func TestGoTestFailingBenchmark(t *testing.T) {
	tool := build(t, t.TempDir(), "bench/cmd/fleet-benchreport")
	rows, out, err := runRecording(t, repoRoot, "bench-agentlink-decode", tool, "gotest", "--set", "agentlink-decode", "--",
		"go", "test", "-run", "^$", "-bench", "BenchmarkNoSuchThing", "-benchtime", "1x", "./cloud/agentlink/")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1\n%s", err, out)
	}
	if len(rows) != len(metricSets()["agentlink-decode"]) {
		t.Fatalf("rows %+v: want every figure recorded", rows)
	}
	for _, r := range rows {
		if r.Error == "" {
			t.Fatalf("rows %+v: want every figure recorded as failed", rows)
		}
	}
}

// TestWebhookBenchRecords runs a real benchmark program in a short mode
// with FLEET_BENCH_RESULTS set.
func TestWebhookBenchRecords(t *testing.T) {
	bin := build(t, t.TempDir(), "bench/cmd/fleet-webhookbench")
	rows, out, err := runRecording(t, t.TempDir(), "bench-webhook", bin, "-agents", "2", "-changes", "4", "-every", "20ms", "-deliveries", "100", "-devices", "5")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "deliveries/s   (target: >= 2000/s)") {
		t.Errorf("the program no longer prints its figures beside the targets:\n%s", out)
	}
	if len(rows) != 2 {
		t.Fatalf("recorded %d rows, want 2: %+v", len(rows), rows)
	}
	lat, rate := rows[0], rows[1]
	if lat.Bench != "bench-webhook" || lat.Area != "webhooks" || lat.Unit != "ms" || lat.Target == nil || lat.Target.Op != benchreport.Below || lat.Target.Value != 50 {
		t.Errorf("latency row %+v", lat)
	}
	if lat.Measured <= 0 || !strings.Contains(lat.Notes, "8 changes from 2 agents") {
		t.Errorf("latency row measured %v ms, notes %q", lat.Measured, lat.Notes)
	}
	if rate.Unit != "deliveries/s" || rate.Target == nil || rate.Target.Op != benchreport.AtLeast || rate.Target.Value != 2000 || rate.Measured <= 0 {
		t.Errorf("throughput row %+v", rate)
	}
}

// TestAlertBenchRecords runs the alert benchmark in a short mode (a real
// fleet-relay, Mailpit and fleet-loadgen agents whose first point crosses
// the rule's threshold every other round) with FLEET_BENCH_RESULTS set:
// every alert opened in the window has its e-mail, and the p99 row stands
// beside DESIGN.md's target.
func TestAlertBenchRecords(t *testing.T) {
	dir := t.TempDir()
	relay, loadgen := build(t, dir, "cloud/cmd/fleet-relay"), build(t, dir, "bench/cmd/fleet-loadgen")
	bin := build(t, dir, "bench/cmd/fleet-alertbench")
	rows, out, err := runRecording(t, t.TempDir(), "bench-alerts", bin, "--relay", relay, "--loadgen", loadgen, "--agents", "6", "--points", "2",
		"--cross-every", "1", "--heartbeat", "1s", "--warmup", "2s", "--duration", "4s")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "(figure | target)") {
		t.Errorf("the program no longer prints its figures beside the target:\n%s", out)
	}
	if len(rows) != 2 {
		t.Fatalf("recorded %d rows, want 2: %+v\n%s", len(rows), rows, out)
	}
	p99, p50 := rows[0], rows[1]
	if p99.Bench != "bench-alerts" || p99.Area != "rules" || p99.Unit != "s" || p99.Target == nil || p99.Target.Op != benchreport.Below || p99.Target.Value != 2 || p99.Error != "" {
		t.Errorf("p99 row %+v", p99)
	}
	// Six agents crossing up every other round of a second: about 12
	// alerts in the 4 s window, each e-mailed within seconds.
	m := regexp.MustCompile(`; (\d+) alerts opened by crossings captured in a 4s window, (\d+) e-mailed`).FindStringSubmatch(p99.Notes)
	if m == nil || m[1] != m[2] || m[1] == "0" || !strings.Contains(p99.Notes, "6 agents (fleet-loadgen) × 2 point samples every 1s") {
		t.Errorf("p99 notes %q", p99.Notes)
	}
	if p99.Measured <= 0 || p99.Measured > 60 || p50.Measured <= 0 || p50.Measured > p99.Measured || p50.Target != nil {
		t.Errorf("p99 %v s, p50 %+v", p99.Measured, p50)
	}
}

// TestRunWritesTheReport runs `fleet-benchreport run` over a Makefile with
// a benchmark that records a row, one that fails and one that records
// nothing, and checks the report it writes and its exit status.
func TestRunWritesTheReport(t *testing.T) {
	dir := t.TempDir()
	tool := build(t, dir, "bench/cmd/fleet-benchreport")
	agent := filepath.Join(dir, "agent.bin")
	if err := os.WriteFile(agent, make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	makefile := "size:\n\t@$(TOOL) agent-size 'linux/test=$(AGENT)'\n" +
		"broken:\n\t@echo 'bench: connecting: disk | full' >&2; exit 3\n" +
		"quiet:\n\t@echo 'prints its figure, records nothing'\n"
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(makefile), 0o644); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(dir, "out", "results.md")
	cmd := exec.Command(tool, "run", "--make", "make TOOL="+tool+" AGENT="+agent, "--md", md, "--work", filepath.Join(dir, "work"), "size", "broken", "quiet")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1 (a benchmark failed)\n%s", err, out)
	}
	report, err := os.ReadFile(md)
	if err != nil {
		t.Fatalf("no report written: %v\n%s", err, out)
	}
	for _, want := range []string{
		"| agent | static binary size, linux/test | \\< 15 MiB | 3 MiB | pass |",
		"| broken | make broken failed | — | — | **MISS** | exit status 2: bench: connecting: disk \\| full |",
		"| quiet | make quiet recorded no figures | — | — | **MISS** |",
		"- **Failed to run:** broken: exit status 2",
		"- **Machine:** ",
		"- **Run times:** size ",
	} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	for _, want := range []string{"agent binary linux/test", "== make broken: FAILED (exit status 2)", "RESULT", "report written to " + md} {
		if !strings.Contains(string(out), want) {
			t.Errorf("console lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(string(out), "\n")
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, "agent ") && strings.Contains(l, "3 MiB") && strings.Contains(l, "pass")
	}) {
		t.Errorf("console table has no passing size row:\n%s", out)
	}
}

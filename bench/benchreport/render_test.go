package benchreport_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -run %s -update rewrites it)\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

// sampleReport has one row of each kind: pass, miss, information, a target
// in another unit, a failed benchmark that recorded one row first, a
// benchmark that recorded nothing, a row Markdown would misread, and a row
// from a benchmark run outside the loop.
func sampleReport(t *testing.T) benchreport.Report {
	t.Helper()
	start := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	m := benchreport.ReadMachine("testdata/proc")
	m.Go, m.Commit = "go1.26.8", "76e59f9-dirty"
	end := benchreport.ReadLoad("testdata/proc", start.Add(14*time.Minute+3*time.Second))
	end.LoadAvg = "3.10 2.20 1.40"
	end.CPUPressure = "avg10=40.00 avg60=30.00 avg300=10.00 total=292823789" // 169.367 s stalled in 843 s: 20 %
	return benchreport.Report{
		Machine: m,
		Start:   benchreport.ReadLoad("testdata/proc", start),
		End:     end,
		Runs: []benchreport.Run{
			{Bench: "bench-api", Seconds: 41.2},
			{Bench: "bench-agentlink", Seconds: 212.6, Status: 1, Error: "fleet-loadgen: stored 239000 spooled samples, want 239232"},
			{Bench: "bench-webhook", Seconds: 12},
			{Bench: "bench-serial-modbus", Seconds: 25},
		},
		Rows: []benchreport.Row{
			{Bench: "bench-api", Area: "API", Figure: "GET /devices (limit 25), throughput", Unit: "req/s", Measured: 22114.3,
				Target: target(benchreport.AtLeast, 15000, ""), Notes: "10000 devices, 16 clients"},
			{Bench: "bench-api", Area: "API", Figure: "GET /devices, 100 commits/s, throughput", Unit: "req/s", Measured: 7476,
				Notes: "for information: caches emptied | by every commit"},
			{Bench: "bench-agentlink", Area: "agent link", Figure: "relay RSS, all agents", Unit: "MiB", Measured: 771,
				Target: target(benchreport.Below, 2, "GiB")},
			{Bench: "bench-agentlink", Area: "agent link", Figure: "heartbeat-to-stored p99", Unit: "ms", Measured: 3512.4,
				Target: target(benchreport.Below, 100, ""), Notes: "p50 1,200 ms; *contended* CPU"},
			{Bench: "bench-serial-modbus", Area: "serial", Figure: "Modbus RTU transaction, 115200 baud", Unit: "ms",
				Target: target(benchreport.AtMost, 7.315, ""), Error: "go test reported no ms/txn for BenchmarkRTUTransaction/115200"},
			{Bench: "bench-agent-size", Area: "agent", Figure: "static binary size, linux/arm v7", Unit: "MiB", Measured: 7.62,
				Target: target(benchreport.Below, 15, "")},
		},
	}
}

func TestReportGolden(t *testing.T) {
	rep := sampleReport(t)
	var md, text bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.md", md.Bytes())
	golden(t, "report.txt", text.Bytes())
}

func TestReportLines(t *testing.T) {
	rep := sampleReport(t)
	if !rep.Failed() {
		t.Error("Failed() = false for a report with a failed benchmark")
	}
	var got []string
	for _, l := range rep.Lines() {
		got = append(got, l.Bench+" "+string(l.Result)+" "+l.Figure)
	}
	want := []string{
		"bench-api pass GET /devices (limit 25), throughput",
		"bench-api info GET /devices, 100 commits/s, throughput",
		"bench-agentlink pass relay RSS, all agents",
		"bench-agentlink MISS heartbeat-to-stored p99",
		"bench-agentlink MISS make bench-agentlink failed",
		"bench-webhook MISS make bench-webhook recorded no figures",
		"bench-serial-modbus MISS Modbus RTU transaction, 115200 baud",
		"bench-agent-size pass static binary size, linux/arm v7",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	ok := benchreport.Report{Runs: []benchreport.Run{{Bench: "bench-api"}},
		Rows: []benchreport.Row{{Bench: "bench-api", Area: "API", Figure: "f", Measured: 1, Target: target(benchreport.AtLeast, 2, "")}}}
	if ok.Failed() {
		t.Error("Failed() = true for a report whose only problem is a missed target")
	}
}

func TestReadMachine(t *testing.T) {
	m := benchreport.ReadMachine("testdata/proc")
	if m.CPU != "Intel(R) Xeon(R) Processor" || m.Cores != 2 || m.MemBytes != 24634012<<10 || m.Kernel != "6.1.0-28-amd64" {
		t.Errorf("ReadMachine = %+v", m)
	}
	l := benchreport.ReadLoad("testdata/proc", time.Time{})
	if l.LoadAvg != "1.52 0.98 0.61" || l.CPUPressure != "avg10=12.50 avg60=8.00 avg300=3.10 total=123456789" {
		t.Errorf("ReadLoad = %+v", l)
	}
	none := benchreport.ReadLoad(t.TempDir(), time.Time{})
	if none.LoadAvg != "" || none.CPUPressure != "" {
		t.Errorf("ReadLoad of an empty root = %+v", none)
	}
}

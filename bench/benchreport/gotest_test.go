package benchreport_test

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/fleet/fleet/bench/benchreport"
)

func modbusMetric(baud string) benchreport.Metric {
	return benchreport.Metric{Benchmark: "BenchmarkRTUTransaction/" + baud, Unit: "ms/txn", TargetFrom: "formula-ms", TargetScale: 1.10,
		Extra: []benchreport.Extra{{Unit: "formula-ms", Label: "formula", RowUnit: "ms"}, {Unit: "no-such-unit", Label: "absent"}},
		Row:   benchreport.Row{Area: "serial", Figure: "Modbus " + baud, Unit: "ms", Target: &benchreport.Target{Op: benchreport.AtMost}}}
}

// testdata/gotest-modbus.txt is real `go test -bench RTUTransaction`
// output: the benchmark prints while it runs, which splits its benchmark
// line, and the 115200 baud run failed.
func TestFromGoTestModbus(t *testing.T) {
	f, err := os.Open("testdata/gotest-modbus.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := benchreport.FromGoTest(f, []benchreport.Metric{modbusMetric("9600"), modbusMetric("115200")})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	r := rows[0]
	if r.Error != "" || r.Measured != 46.43 || r.Target == nil || math.Abs(r.Target.Value-45.83*1.10) > 1e-9 || r.Target.Op != benchreport.AtMost {
		t.Errorf("9600 baud row %+v (target %+v): want 46.43 ms against 45.83 × 1.10", r, r.Target)
	}
	if r.Notes != "formula 45.8 ms" {
		t.Errorf("9600 baud notes %q, want the formula's value and nothing for a unit not reported", r.Notes)
	}
	if res, _ := r.Evaluate(); res != benchreport.Pass {
		t.Errorf("9600 baud: %s, want pass", res)
	}
	if !strings.Contains(rows[1].Error, "no ms/txn for BenchmarkRTUTransaction/115200") {
		t.Errorf("115200 baud row error %q, want the missing figure named", rows[1].Error)
	}
	if res, _ := rows[1].Evaluate(); res != benchreport.Miss {
		t.Errorf("115200 baud: %s, want MISS", res)
	}
}

func TestFromGoTest(t *testing.T) {
	passthrough := []benchreport.Metric{
		{Benchmark: "BenchmarkPassthroughVsSer2net", Unit: "raw-uart-p50-us", TargetFrom: "raw-uart-ser2net-p50-us",
			Row: benchreport.Row{Area: "serial", Figure: "round trip", Unit: "µs", Target: &benchreport.Target{Op: benchreport.AtMost}}},
		{Benchmark: "BenchmarkPassthroughVsSer2net", Unit: "raw-uart-MB/s", TargetFrom: "raw-uart-ser2net-MB/s",
			Row: benchreport.Row{Area: "serial", Figure: "throughput", Unit: "MB/s", Target: &benchreport.Target{Op: benchreport.AtLeast}}},
	}
	tests := []struct {
		name    string
		out     string
		metrics []benchreport.Metric
		want    []string // result, measured and target of each row
	}{
		{
			name: "ns/op scaled to µs, sub-benchmark names with slashes, GOMAXPROCS dropped",
			out: "goos: linux\npkg: github.com/fleet/fleet/cloud/agentlink\n" +
				"BenchmarkDecodeHeartbeat/fast-2         \t   89062\t     12860 ns/op\n" +
				"BenchmarkDecodeHeartbeat/encoding/json-2\t   14122\t     78757 ns/op\t  4000 B/op\nPASS\n",
			metrics: []benchreport.Metric{
				{Benchmark: "BenchmarkDecodeHeartbeat/encoding/json", Unit: "ns/op", Scale: 1e-3, Row: benchreport.Row{Area: "a", Figure: "json", Unit: "µs"}},
				{Benchmark: "BenchmarkDecodeHeartbeat/fast", Unit: "ns/op", Scale: 1e-3, Row: benchreport.Row{Area: "a", Figure: "fast", Unit: "µs"}},
			},
			want: []string{"info 78.8 µs —", "info 12.9 µs —"},
		},
		{
			name: "comparison with ser2net in the same run",
			out: "BenchmarkPassthroughVsSer2net-2\tpassthrough raw uart ours: round trip p50 41.2 us\n" +
				"      1\t         0 ns/op\t 41.2 raw-uart-p50-us\t 18.5 raw-uart-MB/s\t 47.0 raw-uart-ser2net-p50-us\t 5.1 raw-uart-ser2net-MB/s\n",
			metrics: passthrough,
			want:    []string{"pass 41.2 µs ≤ 47 µs", "pass 18.5 MB/s ≥ 5.1 MB/s"},
		},
		{
			name:    "ser2net missing: information only, with a note",
			out:     "BenchmarkPassthroughVsSer2net-2\t      1\t         0 ns/op\t 41.2 raw-uart-p50-us\t 18.5 raw-uart-MB/s\n",
			metrics: passthrough,
			want:    []string{"info 41.2 µs —", "info 18.5 MB/s —"},
		},
		{
			name: "go test -v: the name alone first, the last of -count results counts",
			out: "BenchmarkAgentHeartbeats\n    agent_bench_test.go:109: store writer alone\n" +
				"BenchmarkAgentHeartbeats-2\t  200000\t      9000 ns/op\t     30000 heartbeats/s\n" +
				"BenchmarkAgentHeartbeats-2\t  200000\t      9000 ns/op\t     38700 heartbeats/s\n",
			metrics: []benchreport.Metric{{Benchmark: "BenchmarkAgentHeartbeats", Unit: "heartbeats/s",
				Row: benchreport.Row{Area: "a", Figure: "f", Unit: "heartbeats/s", Target: &benchreport.Target{Op: benchreport.AtLeast, Value: 20000}}}},
			want: []string{"pass 38,700 heartbeats/s ≥ 20,000 heartbeats/s"},
		},
		{
			name:    "benchmark absent",
			out:     "FAIL\tgithub.com/fleet/fleet/cloud/sqlite [build failed]\n",
			metrics: []benchreport.Metric{{Benchmark: "BenchmarkAgentHeartbeats", Unit: "heartbeats/s", Row: benchreport.Row{Area: "a", Figure: "f"}}},
			want:    []string{"MISS 0 —"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := benchreport.FromGoTest(strings.NewReader(tt.out), tt.metrics)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rows {
				res, err := r.Evaluate()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(res)+" "+benchreport.FormatValue(r.Measured, r.Unit)+" "+benchreport.FormatTarget(r.Target, r.Unit))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestFromGoTestRefusesATargetWithoutComparison(t *testing.T) {
	_, err := benchreport.FromGoTest(strings.NewReader("BenchmarkX-2\t1\t5 ns/op\t3 other\n"),
		[]benchreport.Metric{{Benchmark: "BenchmarkX", Unit: "ns/op", TargetFrom: "other", Row: benchreport.Row{Area: "a", Figure: "f"}}})
	if err == nil {
		t.Fatal("FromGoTest accepted TargetFrom on a row without a target comparison")
	}
}

package benchreport

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// Metric turns one value of a Go benchmark's output (`go test -bench`,
// read with golang.org/x/perf/benchfmt) into a row.
type Metric struct {
	// Benchmark is the full benchmark name without its -GOMAXPROCS
	// suffix: "BenchmarkRTUTransaction/9600".
	Benchmark string
	// Unit is the unit as the benchmark reported it: "ns/op", "ms/txn",
	// a b.ReportMetric unit such as "raw-uart-p50-us".
	Unit string
	// Scale multiplies the reported value into the row's unit (0 is 1):
	// 1e-3 turns "ns/op" into µs.
	Scale float64
	// Row is the row written: area, figure, unit, target and notes;
	// Measured is filled in.
	Row Row
	// TargetFrom, when set, takes the target's value from another unit of
	// the same benchmark result times TargetScale (0 is 1), with the
	// comparison of Row.Target: the Modbus formula plus 10 %, or ser2net's
	// figure measured in the same run. When the benchmark did not report
	// it, the row is shown for information with a note saying so.
	TargetFrom  string
	TargetScale float64
	// Extra are other units of the same result added to the notes, such
	// as ser2net's figure beside an information row; one the run did not
	// report is left out.
	Extra []Extra
}

// Extra is a side figure for a row's notes: Label, then the value of
// Unit in the result times Scale (0 is 1), then RowUnit.
type Extra struct {
	Unit, Label, RowUnit string
	Scale                float64
}

// FromGoTest reads `go test -bench` output and returns one row per metric,
// in the order given. A metric the output does not hold becomes a failed
// row, so a benchmark that stopped early shows as a miss, not as nothing.
// When a benchmark appears more than once (-count), its last result
// counts.
func FromGoTest(r io.Reader, metrics []Metric) ([]Row, error) {
	values := map[string]map[string]float64{}
	br := benchfmt.NewReader(rejoin(r), "go test output")
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue // unit metadata, or a line benchfmt could not parse: not ours to judge
		}
		name := benchName(res.Name)
		vals := map[string]float64{}
		for _, v := range res.Values {
			if v.OrigUnit != "" {
				vals[v.OrigUnit] = v.OrigValue
			} else {
				vals[v.Unit] = v.Value
			}
		}
		values[name] = vals
	}
	if err := br.Err(); err != nil {
		return nil, fmt.Errorf("read go test output: %w", err)
	}
	rows := make([]Row, 0, len(metrics))
	for _, m := range metrics {
		row := m.Row
		v, ok := values[m.Benchmark][m.Unit]
		if !ok {
			row.Error = fmt.Sprintf("go test reported no %s for %s", m.Unit, m.Benchmark)
			rows = append(rows, row)
			continue
		}
		row.Measured = v * orOne(m.Scale)
		if m.TargetFrom != "" {
			if row.Target == nil {
				return nil, fmt.Errorf("metric %s %s: TargetFrom without a target comparison", m.Benchmark, m.Unit)
			}
			ref, ok := values[m.Benchmark][m.TargetFrom]
			if ok {
				t := *row.Target
				t.Value = ref * orOne(m.TargetScale)
				row.Target = &t
			} else {
				row.Target = nil
				row.Notes = joinNotes(row.Notes, "no comparison: "+m.TargetFrom+" not measured in this run")
			}
		}
		for _, x := range m.Extra {
			if v, ok := values[m.Benchmark][x.Unit]; ok {
				row.Notes = joinNotes(row.Notes, x.Label+" "+FormatValue(v*orOne(x.Scale), x.RowUnit))
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func orOne(f float64) float64 {
	if f == 0 {
		return 1
	}
	return f
}

// benchName is a benchmark's full name without the -GOMAXPROCS suffix.
// benchfmt keeps the name without its "Benchmark" prefix.
func benchName(n benchfmt.Name) string {
	base, parts := n.Parts()
	s := "Benchmark" + string(base)
	for _, p := range parts {
		if len(p) > 0 && p[0] == '-' {
			continue
		}
		s += string(p)
	}
	return s
}

// resultLine is the second half of a benchmark line whose benchmark
// printed while it ran: the iteration count and the first value.
var resultLine = regexp.MustCompile(`^\s+\d+\t\s*[-+0-9.eE]+ \S`)

// rejoin undoes what a benchmark that prints (fmt.Printf) does to go test's
// output: the testing package writes the name, the benchmark's own lines
// follow, then the iteration count and values on a line of their own.
// rejoin puts the name back in front of those values so benchfmt reads
// one benchmark line; every other line passes unchanged.
func rejoin(r io.Reader) io.Reader {
	var out bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	pending := ""
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Benchmark") {
			name, rest, _ := strings.Cut(line, "\t")
			if !resultLine.MatchString("\t"+rest) && !resultLine.MatchString(rest) {
				pending = strings.TrimSpace(name)
				out.WriteString(line[len(name):] + "\n") // what the benchmark printed
				continue
			}
			pending = ""
		} else if pending != "" && resultLine.MatchString(line) {
			line = pending + "\t" + line
			pending = ""
		}
		out.WriteString(line + "\n")
	}
	return &out
}

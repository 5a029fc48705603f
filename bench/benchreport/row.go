// Package benchreport is the results format of `make bench`. Every
// benchmark in the repository records its figures as rows (area, figure,
// measured value and unit, target, notes) by appending JSON lines to the
// file named by FLEET_BENCH_RESULTS; without that variable recording does
// nothing and the benchmarks only print, as they do on their own. Once
// every benchmark has run, the rows are rendered as one table, headed by
// the machine they ran on, to the console and to bench/results.md. Whether
// a row passes is computed here from its measured value and its target,
// never written by the benchmark.
package benchreport

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
)

// Environment variables read by Record.
const (
	// EnvResults names the JSON-lines file that Record appends rows to.
	EnvResults = "FLEET_BENCH_RESULTS"
	// EnvTarget is the make target running the benchmark; Record stores it
	// in rows that do not name one.
	EnvTarget = "FLEET_BENCH_TARGET"
)

// Op is a target's comparison of the measured value with the target value.
type Op string

// The comparisons a target can make.
const (
	AtLeast Op = ">=" // measured >= value
	AtMost  Op = "<=" // measured <= value
	Below   Op = "<"  // measured < value
	Above   Op = ">"  // measured > value
)

// Symbol is the comparison as printed in the report.
func (o Op) Symbol() string {
	switch o {
	case AtLeast:
		return "≥"
	case AtMost:
		return "≤"
	}
	return string(o)
}

func (o Op) valid() bool {
	switch o {
	case AtLeast, AtMost, Below, Above:
		return true
	}
	return false
}

// Target is what a figure must reach.
type Target struct {
	Op    Op      `json:"op"`
	Value float64 `json:"value"`
	// Unit is the unit of Value when it differs from the row's unit (a
	// size in MiB against a target in GiB, say); the two must convert.
	Unit string `json:"unit,omitempty"`
}

// Row is one figure of one benchmark.
type Row struct {
	// Bench is the make target that ran the benchmark; Record fills it
	// from FLEET_BENCH_TARGET when empty.
	Bench string `json:"bench,omitempty"`
	// Area is the part of Fleet measured: "API", "agent link", "agent",
	// "webhooks", "serial".
	Area string `json:"area"`
	// Figure names what was measured, with the conditions that define it
	// ("GET /devices, 25 per page, 16 clients").
	Figure   string  `json:"figure"`
	Measured float64 `json:"measured"`
	Unit     string  `json:"unit,omitempty"`
	// Target is nil for a row shown for information only.
	Target *Target `json:"target,omitempty"`
	// Notes are the run's conditions and side figures.
	Notes string `json:"notes,omitempty"`
	// Error, when set, says the benchmark failed to produce this figure:
	// the row is a miss whatever Measured holds.
	Error string `json:"error,omitempty"`
}

// Result is a row's verdict.
type Result string

// Verdicts. A benchmark that failed to run is a Miss.
const (
	Pass Result = "pass"
	Miss Result = "MISS"
	Info Result = "info"
)

// Evaluate compares the measured value with the target, converting the
// target to the row's unit. An error row is a Miss; a row without a target
// is Info. The error reports a target that cannot be compared (an unknown
// comparison or units that do not convert).
func (r Row) Evaluate() (Result, error) {
	if r.Error != "" {
		return Miss, nil
	}
	if r.Target == nil {
		return Info, nil
	}
	if !r.Target.Op.valid() {
		return Miss, fmt.Errorf("%s: unknown comparison %q", r.Figure, r.Target.Op)
	}
	want := r.Target.Value
	if r.Target.Unit != "" && r.Target.Unit != r.Unit {
		v, err := Convert(want, r.Target.Unit, r.Unit)
		if err != nil {
			return Miss, fmt.Errorf("%s: target: %w", r.Figure, err)
		}
		want = v
	}
	got := r.Measured
	if math.IsNaN(got) || math.IsNaN(want) {
		return Miss, nil
	}
	var ok bool
	switch r.Target.Op {
	case AtLeast:
		ok = got >= want
	case AtMost:
		ok = got <= want
	case Below:
		ok = got < want
	case Above:
		ok = got > want
	}
	if ok {
		return Pass, nil
	}
	return Miss, nil
}

// Validate reports a row that cannot be rendered: no area or figure, or a
// target that cannot be compared.
func (r Row) Validate() error {
	if r.Area == "" || r.Figure == "" {
		return fmt.Errorf("row %+v: area and figure are required", r)
	}
	_, err := r.Evaluate()
	return err
}

// Enabled reports whether FLEET_BENCH_RESULTS names a file, that is
// whether Record writes anything.
func Enabled() bool { return os.Getenv(EnvResults) != "" }

// Record appends rows to the file named by FLEET_BENCH_RESULTS, filling
// Bench from FLEET_BENCH_TARGET where empty. Without the variable it does
// nothing.
func Record(rows ...Row) error {
	path := os.Getenv(EnvResults)
	if path == "" {
		return nil
	}
	bench := os.Getenv(EnvTarget)
	filled := make([]Row, len(rows))
	for i, r := range rows {
		if r.Bench == "" {
			r.Bench = bench
		}
		filled[i] = r
	}
	return Append(path, filled...)
}

// Append writes rows to path as JSON lines, creating the file when
// missing. The rows go out in one write, so benchmarks running at the same
// time do not interleave their lines.
func Append(path string, rows ...Row) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		if err := r.Validate(); err != nil {
			return err
		}
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("encode row %q: %w", r.Figure, err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("bench results: %w", err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("bench results: %w", err)
	}
	return f.Close()
}

// maxLine bounds one JSON line of a results file.
const maxLine = 1 << 20

// ReadRows reads a results file written by Append. A missing file holds
// no rows.
func ReadRows(path string) ([]Row, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []Row
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r Row
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

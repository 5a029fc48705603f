package benchreport

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Run is one benchmark's run under `make bench`: its make target, how long
// it took and its exit status.
type Run struct {
	Bench   string  `json:"bench"`
	Seconds float64 `json:"seconds"`
	Status  int     `json:"status"`
	// Error is the end of the benchmark's output when Status is not 0.
	Error string `json:"error,omitempty"`
}

// Report is one `make bench`: the machine, its load before and after, the
// benchmarks that ran and the rows they recorded.
type Report struct {
	Machine    Machine
	Start, End Load
	Runs       []Run
	Rows       []Row
}

// Line is one line of the rendered table.
type Line struct {
	Row
	Result Result
}

// Lines returns the table: for each run in order, the rows its benchmark
// recorded, then a failed row when it exited non-zero or recorded nothing
// (so no benchmark goes missing silently); rows of benchmarks that are not
// among the runs come last. A row whose target cannot be compared is a
// miss with the reason in its notes.
func (r Report) Lines() []Line {
	var lines []Line
	add := func(row Row) {
		res, err := row.Evaluate()
		if err != nil {
			row.Notes = joinNotes(row.Notes, err.Error())
		}
		lines = append(lines, Line{Row: row, Result: res})
	}
	done := map[string]bool{}
	for _, run := range r.Runs {
		done[run.Bench] = true
		n := 0
		for _, row := range r.Rows {
			if row.Bench == run.Bench {
				add(row)
				n++
			}
		}
		switch {
		case run.Status != 0:
			msg := fmt.Sprintf("exit status %d", run.Status)
			if run.Error != "" {
				msg += ": " + run.Error
			}
			add(Row{Bench: run.Bench, Area: run.Bench, Figure: "make " + run.Bench + " failed", Error: msg})
		case n == 0:
			add(Row{Bench: run.Bench, Area: run.Bench, Figure: "make " + run.Bench + " recorded no figures",
				Error: "the benchmark ran but wrote no rows to " + EnvResults})
		}
	}
	for _, row := range r.Rows {
		if !done[row.Bench] {
			add(row)
		}
	}
	return lines
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Failed reports whether any benchmark failed to run or to record.
func (r Report) Failed() bool {
	for _, l := range r.Lines() {
		if l.Error != "" {
			return true
		}
	}
	return false
}

// header is the report's preamble as label/value pairs.
func (r Report) header(lines []Line) [][2]string {
	var h [][2]string
	m := r.Machine
	date := r.Start.At.UTC().Format("2006-01-02 15:04 MST")
	if !r.End.At.IsZero() {
		date += fmt.Sprintf(" to %s (%s)", r.End.At.UTC().Format("15:04 MST"), r.End.At.Sub(r.Start.At).Round(time.Second))
	}
	h = append(h, [2]string{"Date", date})
	machine := orUnknown(m.CPU)
	if m.Cores > 0 {
		machine += fmt.Sprintf(", %d cores", m.Cores)
	}
	if m.MemBytes > 0 {
		machine += fmt.Sprintf(", %.1f GiB memory", float64(m.MemBytes)/(1<<30))
	}
	if m.Kernel != "" {
		machine += ", Linux " + m.Kernel
	}
	h = append(h, [2]string{"Machine", machine})
	h = append(h, [2]string{"Go, commit", orUnknown(m.Go) + ", " + orUnknown(m.Commit)})
	h = append(h, [2]string{"Load average (1, 5, 15 min)", startEnd(r.Start.LoadAvg, r.End.LoadAvg)})
	if r.Start.CPUPressure != "" || r.End.CPUPressure != "" {
		p := startEnd(averages(r.Start.CPUPressure), averages(r.End.CPUPressure))
		t0, ok0 := stallTotal(r.Start.CPUPressure)
		t1, ok1 := stallTotal(r.End.CPUPressure)
		if span := r.End.At.Sub(r.Start.At); ok0 && ok1 && span > 0 {
			p += fmt.Sprintf("; some task waited for a CPU %.0f %% of the run", 100*float64(t1-t0)*float64(time.Microsecond)/float64(span))
		}
		h = append(h, [2]string{"CPU pressure (some)", p})
	}
	if len(r.Runs) > 0 {
		var times []string
		for _, run := range r.Runs {
			times = append(times, fmt.Sprintf("%s %s", run.Bench, (time.Duration(run.Seconds*float64(time.Second))).Round(time.Second)))
		}
		h = append(h, [2]string{"Run times", strings.Join(times, ", ")})
	}
	count := map[Result]int{}
	var failed []string
	for _, l := range lines {
		count[l.Result]++
		if l.Error != "" {
			failed = append(failed, l.Bench+": "+l.Error)
		}
	}
	h = append(h, [2]string{"Figures", fmt.Sprintf("%d (%d pass, %d MISS, %d for information)", len(lines), count[Pass], count[Miss], count[Info])})
	if len(failed) == 0 {
		h = append(h, [2]string{"Failed to run", "none"})
	}
	for _, f := range failed {
		h = append(h, [2]string{"Failed to run", f})
	}
	return h
}

// averages is a PSI line without its cumulative total.
func averages(psi string) string {
	var keep []string
	for _, f := range strings.Fields(psi) {
		if !strings.HasPrefix(f, "total=") {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, " ")
}

// stallTotal is a PSI line's total: microseconds stalled since boot.
func stallTotal(psi string) (int64, bool) {
	for _, f := range strings.Fields(psi) {
		if v, ok := strings.CutPrefix(f, "total="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func startEnd(start, end string) string {
	return orUnknown(start) + " at start, " + orUnknown(end) + " at end"
}

// cells is a line's table cells: area, figure, target, measured, result,
// notes.
func (l Line) cells() [6]string {
	measured := FormatValue(l.Measured, l.Unit)
	notes := l.Notes
	if l.Error != "" {
		measured = "—"
		notes = joinNotes(notes, l.Error)
	}
	return [6]string{l.Area, l.Figure, FormatTarget(l.Target, l.Unit), measured, string(l.Result), notes}
}

var columns = [6]string{"area", "figure", "target", "measured", "result", "notes"}

// WriteMarkdown writes the report as Markdown: a title, the header as a
// list and one table.
func (r Report) WriteMarkdown(w io.Writer) error {
	lines := r.Lines()
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "# Benchmark results")
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "Written by `make bench`; docs/benchmarks.md explains each row. A benchmark that failed to run is a MISS row with its error.")
	fmt.Fprintln(bw)
	for _, kv := range r.header(lines) {
		fmt.Fprintf(bw, "- **%s:** %s\n", kv[0], EscapeMarkdown(kv[1]))
	}
	fmt.Fprintln(bw)
	fmt.Fprintln(bw, "| "+strings.Join(columns[:], " | ")+" |")
	fmt.Fprintln(bw, strings.Repeat("| --- ", len(columns))+"|")
	for _, l := range lines {
		c := l.cells()
		for i := range c {
			c[i] = EscapeMarkdown(c[i])
		}
		if l.Result == Miss {
			c[4] = "**MISS**"
		}
		fmt.Fprintln(bw, "| "+strings.Join(c[:], " | ")+" |")
	}
	return bw.Flush()
}

// WriteText writes the report for a terminal: the header, then the table
// in aligned columns.
func (r Report) WriteText(w io.Writer) error {
	lines := r.Lines()
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "Benchmark results")
	for _, kv := range r.header(lines) {
		fmt.Fprintf(bw, "  %s: %s\n", kv[0], kv[1])
	}
	fmt.Fprintln(bw)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(columns[:], "\t")))
	for _, l := range lines {
		c := l.cells()
		for i := range c {
			c[i] = strings.ReplaceAll(oneLine(c[i]), "\t", " ")
		}
		fmt.Fprintln(tw, strings.Join(c[:], "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return bw.Flush()
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\r", " ")), " ")
}

// EscapeMarkdown makes s one line of literal text inside a Markdown table
// cell: line breaks become spaces and the characters Markdown would read
// as syntax (the cell separator |, emphasis, code, links and HTML) are
// escaped with a backslash.
func EscapeMarkdown(s string) string {
	s = oneLine(s)
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '\\', '|', '*', '_', '`', '[', ']', '<', '>', '#':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Package libmodbus gives tests a Modbus RTU slave built on libmodbus, the
// reference implementation: slave.c, compiled with gcc and started on a
// pseudo-terminal, serves values set with libmodbus's setters and prints
// what libmodbus's getters (modbus_get_float_abcd and its siblings,
// MODBUS_GET_INT32_FROM_INT16, MODBUS_GET_INT64_FROM_INT16) decode; Mbpoll
// reads its raw registers back. It needs gcc, libmodbus-dev and mbpoll
// (`make modbus-tools`) and fails the test, naming what is missing, without
// them.
package libmodbus

import (
	"bufio"
	"context"
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/serialcfg"
)

// Header is where Debian's libmodbus-dev puts the header.
const Header = "/usr/include/modbus/modbus.h"

//go:embed testdata/slave.c
var slaveSource []byte

// Point is a point the slave serves: its definition (IntervalMs 100), the
// registers as the slave set them and the value libmodbus's getter reads
// from them.
type Point struct {
	Def   serialcfg.RS485Point
	Words []uint16
	Value float64
}

// Slave is a running libmodbus slave.
type Slave struct {
	// Path is the pty's terminal end, the device a master opens.
	Path string
	// ID is the slave id served.
	ID int
	// Points are the values served, in the order slave.c sets them.
	Points []Point
	// Unavailable maps a function ("holding") to its first register outside
	// the slave's mapping: reading it answers exception 2.
	Unavailable map[string]int
}

// Start compiles slave.c and serves slave id on a new pty until the test
// ends.
func Start(tb testing.TB, id int) *Slave {
	tb.Helper()
	var missing []string
	for _, tool := range []string{"gcc", "mbpoll"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if _, err := os.Stat(Header); err != nil {
		missing = append(missing, "libmodbus-dev ("+Header+")")
	}
	if len(missing) > 0 {
		tb.Fatalf("the libmodbus slave needs %s: run `make modbus-tools` (apt-get install gcc libmodbus-dev mbpoll)",
			strings.Join(missing, ", "))
	}
	dir := tb.TempDir()
	src, bin := filepath.Join(dir, "slave.c"), filepath.Join(dir, "libmodbus-slave")
	if err := os.WriteFile(src, slaveSource, 0o644); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-Wall", "-Werror", "-o", bin, src, "-I"+filepath.Dir(Header), "-lmodbus").CombinedOutput(); err != nil {
		tb.Fatalf("compiling the libmodbus slave: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, strconv.Itoa(id))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cancel(); cmd.Wait() })

	s := &Slave{ID: id, Unavailable: map[string]int{}}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		f := strings.Fields(sc.Text())
		tb.Log(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "pty":
			s.Path = f[1]
		case len(f) >= 8 && f[0] == "point":
			s.Points = append(s.Points, parsePoint(tb, f))
		case len(f) == 3 && f[0] == "unavailable":
			first, err := strconv.Atoi(f[2])
			if err != nil {
				tb.Fatalf("libmodbus slave printed %q", sc.Text())
			}
			s.Unavailable[f[1]] = first
		default:
			tb.Fatalf("libmodbus slave printed %q", sc.Text())
		}
	}
	if s.Path == "" || len(s.Points) == 0 {
		tb.Fatalf("libmodbus slave did not start (pty %q, %d points): %v", s.Path, len(s.Points), sc.Err())
	}
	return s
}

// parsePoint parses "point NAME FUNCTION TYPE ORDER REGISTER WORD... = VALUE
// [bit=N] [setter-swapped]".
func parsePoint(tb testing.TB, f []string) Point {
	tb.Helper()
	reg, err := strconv.Atoi(f[5])
	if err != nil {
		tb.Fatalf("register in %q", f)
	}
	r := Point{Def: serialcfg.RS485Point{Name: f[1], Function: f[2], Type: f[3], Register: reg, IntervalMs: 100}}
	if f[4] != "-" {
		r.Def.Order = f[4]
	}
	i := 6
	for ; i < len(f) && f[i] != "="; i++ {
		w, err := strconv.ParseUint(f[i], 16, 16)
		if err != nil {
			tb.Fatalf("word %q in %q", f[i], f)
		}
		r.Words = append(r.Words, uint16(w))
	}
	if i+1 >= len(f) {
		tb.Fatalf("no value in %q", f)
	}
	if r.Value, err = strconv.ParseFloat(f[i+1], 64); err != nil {
		tb.Fatalf("value in %q: %v", f, err)
	}
	for _, opt := range f[i+2:] {
		if b, ok := strings.CutPrefix(opt, "bit="); ok {
			bit, err := strconv.Atoi(b)
			if err != nil {
				tb.Fatalf("bit in %q", f)
			}
			r.Def.Bit = &bit
		}
	}
	return r
}

var mbpollLine = regexp.MustCompile(`^\[(\d+)\]:\s+(\S+)`)

// Mbpoll reads count values of type typ (mbpoll's -t, such as "4:hex")
// from reference start (0-based) of the slave once and returns them by
// reference. No other master may use the line meanwhile.
func (s *Slave) Mbpoll(tb testing.TB, typ string, start, count int, extra ...string) map[int]string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := append([]string{"-m", "rtu", "-b", "115200", "-P", "even", "-a", strconv.Itoa(s.ID), "-0", "-r", strconv.Itoa(start),
		"-c", strconv.Itoa(count), "-t", typ, "-1", "-o", "2"}, extra...)
	out, err := exec.CommandContext(ctx, "mbpoll", append(args, s.Path)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("mbpoll %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	got := map[int]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if m := mbpollLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			i, _ := strconv.Atoi(m[1])
			got[i] = m[2]
		}
	}
	if len(got) == 0 {
		tb.Fatalf("mbpoll %s read nothing:\n%s", strings.Join(args, " "), out)
	}
	return got
}

// CheckRegisters reads every register point's words with mbpoll ("4:hex"
// for holding, "3:hex" for input registers) and reports, with Errorf, each
// register whose raw word is not what the slave set.
func (s *Slave) CheckRegisters(tb testing.TB) {
	tb.Helper()
	span := map[string]int{}
	for _, p := range s.Points {
		if end := p.Def.Register + len(p.Words); (p.Def.Function == "holding" || p.Def.Function == "input") && end > span[p.Def.Function] {
			span[p.Def.Function] = end
		}
	}
	tables := map[string]map[int]string{}
	if n := span["holding"]; n > 0 {
		tables["holding"] = s.Mbpoll(tb, "4:hex", 0, n)
	}
	if n := span["input"]; n > 0 {
		tables["input"] = s.Mbpoll(tb, "3:hex", 0, n)
	}
	for _, p := range s.Points {
		table, ok := tables[p.Def.Function]
		if !ok {
			continue
		}
		for i, w := range p.Words {
			raw := table[p.Def.Register+i]
			got, err := strconv.ParseUint(strings.TrimPrefix(raw, "0x"), 16, 16)
			if err != nil || uint16(got) != w {
				tb.Errorf("%s: mbpoll read register %d as %q, the slave set %04X", p.Def.Name, p.Def.Register+i, raw, w)
			}
		}
	}
}

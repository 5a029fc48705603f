package modbus_test

import (
	"bufio"
	"context"
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

// libmodbusHeader is where Debian's libmodbus-dev puts the header.
const libmodbusHeader = "/usr/include/modbus/modbus.h"

// refPoint is a point the libmodbus slave serves: its registers as it set
// them and the value libmodbus's getter reads from them.
type refPoint struct {
	def   serialcfg.RS485Point
	words []uint16
	value float64
}

// TestLibmodbusReference checks the byte orders against the reference
// implementations, not against ourselves: a slave built on libmodbus
// (testdata/libmodbus/slave.c, compiled here with gcc) serves values set
// with libmodbus's setters and prints what libmodbus's getters
// (modbus_get_float_abcd and its siblings, MODBUS_GET_INT32_FROM_INT16,
// MODBUS_GET_INT64_FROM_INT16) read from its registers; mbpoll reads the
// raw registers back (and a float with its own decoder); then our Port
// reads the same points, and every value must be the getters'.
func TestLibmodbusReference(t *testing.T) {
	var missing []string
	for _, tool := range []string{"gcc", "mbpoll"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if _, err := os.Stat(libmodbusHeader); err != nil {
		missing = append(missing, "libmodbus-dev ("+libmodbusHeader+")")
	}
	if len(missing) > 0 {
		t.Fatalf("the libmodbus reference test needs %s: run `make modbus-tools` (apt-get install gcc libmodbus-dev mbpoll)",
			strings.Join(missing, ", "))
	}
	bin := filepath.Join(t.TempDir(), "libmodbus-slave")
	if out, err := exec.Command("gcc", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "libmodbus", "slave.c"),
		"-I"+filepath.Dir(libmodbusHeader), "-lmodbus").CombinedOutput(); err != nil {
		t.Fatalf("compiling the libmodbus slave: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "7")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })

	var path string
	var refs []refPoint
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		f := strings.Fields(sc.Text())
		t.Log(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "pty":
			path = f[1]
		case len(f) >= 8 && f[0] == "point":
			refs = append(refs, parseRef(t, f))
		default:
			t.Fatalf("libmodbus slave printed %q", sc.Text())
		}
	}
	if path == "" || len(refs) == 0 {
		t.Fatalf("libmodbus slave did not start (pty %q, %d points): %v", path, len(refs), sc.Err())
	}

	// mbpoll reads the raw registers the setters left.
	holding := mbpoll(t, path, "4:hex", 0, 18)
	input := mbpoll(t, path, "3:hex", 0, 2)
	for _, r := range refs {
		table := holding
		switch r.def.Function {
		case "input":
			table = input
		case "coil", "discrete":
			continue
		}
		for i, w := range r.words {
			got, err := strconv.ParseUint(strings.TrimPrefix(table[r.def.Register+i], "0x"), 16, 16)
			if err != nil || uint16(got) != w {
				t.Errorf("%s: mbpoll read register %d as %q, the slave set %04X", r.def.Name, r.def.Register+i, table[r.def.Register+i], w)
			}
		}
	}
	// mbpoll's own float decoder, big-endian word order (-B): ABCD.
	if got := mbpoll(t, path, "4:float", 0, 2, "-B")[0]; got != "123456" {
		t.Errorf("mbpoll -t 4:float -B read %q at register 0, want 123456", got)
	}

	cfg := rs485(func(c *serialcfg.RS485) {
		c.Parity, c.SlaveID = "even", 7
		for _, r := range refs {
			c.Points = append(c.Points, r.def)
		}
	})
	p := openWith(t, path, cfg, fast)
	rs := readings(t, p, "every point read from the libmodbus slave", allRead)
	for i, r := range refs {
		if rs[i].Err != "" || rs[i].Value != r.value {
			t.Errorf("%s (%s %s, registers %04X): we read %v %q, libmodbus's getter %v",
				r.def.Name, r.def.Type, r.def.Order, r.words, rs[i].Value, rs[i].Err, r.value)
		}
	}
}

// parseRef parses "point NAME FUNCTION TYPE ORDER REGISTER WORD... = VALUE".
func parseRef(t *testing.T, f []string) refPoint {
	t.Helper()
	reg, err := strconv.Atoi(f[5])
	if err != nil {
		t.Fatalf("register in %q", f)
	}
	r := refPoint{def: serialcfg.RS485Point{Name: f[1], Function: f[2], Type: f[3], Register: reg, IntervalMs: 100}}
	if f[4] != "-" {
		r.def.Order = f[4]
	}
	i := 6
	for ; i < len(f) && f[i] != "="; i++ {
		w, err := strconv.ParseUint(f[i], 16, 16)
		if err != nil {
			t.Fatalf("word %q in %q", f[i], f)
		}
		r.words = append(r.words, uint16(w))
	}
	if i+1 >= len(f) {
		t.Fatalf("no value in %q", f)
	}
	if r.value, err = strconv.ParseFloat(f[i+1], 64); err != nil {
		t.Fatalf("value in %q: %v", f, err)
	}
	return r
}

var mbpollLine = regexp.MustCompile(`^\[(\d+)\]:\s+(\S+)`)

// mbpoll reads count values of type typ from reference start of slave 7
// on path once and returns them by reference.
func mbpoll(t *testing.T, path, typ string, start, count int, extra ...string) map[int]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := append([]string{"-m", "rtu", "-b", "115200", "-P", "even", "-a", "7", "-0", "-r", strconv.Itoa(start),
		"-c", strconv.Itoa(count), "-t", typ, "-1", "-o", "2"}, extra...)
	out, err := exec.CommandContext(ctx, "mbpoll", append(args, path)...).CombinedOutput()
	if err != nil {
		t.Fatalf("mbpoll %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	got := map[int]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if m := mbpollLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			i, _ := strconv.Atoi(m[1])
			got[i] = m[2]
		}
	}
	if len(got) == 0 {
		t.Fatalf("mbpoll %s read nothing:\n%s", strings.Join(args, " "), out)
	}
	return got
}

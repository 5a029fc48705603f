package gpio_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleet/fleet/hw/gpio"
	"github.com/fleet/fleet/hw/gpio/gpiosim"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/kerneltest"
)

// The TestKernel* tests run the GPIO driver on the kernel's GPIO character
// device, on chips of the GPIO simulator (gpio-sim, built by the qemu rig
// from Debian's kernel source). They need the rig: make test-kernel.

func simChip(t *testing.T, dir string, lines int, names map[int]string) *gpiosim.Chip {
	t.Helper()
	c, err := gpiosim.New(dir, lines, names)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Remove(); err != nil {
			t.Errorf("remove %s: %v", c.Name, err)
		}
	})
	return c
}

func openPort(t *testing.T, name, dev string, cfg serialcfg.Config) *gpio.Port {
	t.Helper()
	p, err := gpio.OpenPort(context.Background(), name, dev, cfg, nil)
	if err != nil {
		t.Fatalf("OpenPort %s on %s: %v", name, dev, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// waitValue waits until the simulator reports want on a line.
func waitValue(t *testing.T, c *gpiosim.Chip, offset int, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := c.Value(offset)
		if err != nil {
			t.Fatal(err)
		}
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s line %d: simulator value %s, want %s", c.Name, offset, v, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLiveKernel waits until the port's live is want, up to d.
func waitLiveKernel(t *testing.T, p *gpio.Port, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for p.Telemetry().Live != want {
		if time.Now().After(deadline) {
			t.Fatalf("live %q after %s, want %q (telemetry %+v)", p.Telemetry().Live, d, want, p.Telemetry())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestKernelGPIOInput reads a gpio-sim input through the driver: the
// lines carry the names given in configfs, the pulled-up line reads 1, a
// glitch shorter than the debounce never reaches live, and a held change
// of the pull reaches it no sooner than the debounce.
func TestKernelGPIOInput(t *testing.T) {
	kerneltest.Require(t)
	c := simChip(t, "fleet-in", 8, map[int]string{0: "door", 3: "estop", 5: "lamp"})
	for off, want := range map[int]string{0: "door", 3: "estop", 5: "lamp"} {
		line, err := gpio.OpenLine(c.Line(off))
		if err != nil {
			t.Fatalf("OpenLine %s: %v", c.Line(off), err)
		}
		if line.Name() != want {
			t.Errorf("%s is named %q, want %q", c.Line(off), line.Name(), want)
		}
	}
	if _, err := gpio.OpenLine(c.Name + ":8"); err == nil {
		t.Error("OpenLine accepted offset 8 on an 8-line chip")
	}

	// estop is pulled up on the board before the agent starts.
	const estop = 3
	if err := c.SetPull(estop, true); err != nil {
		t.Fatal(err)
	}
	const debounce = 400 * time.Millisecond
	p := openPort(t, "gpio-1", c.Line(estop), in("none", int(debounce/time.Millisecond)))
	waitLiveKernel(t, p, "1", 2*time.Second)

	// A glitch: down and straight back up, far shorter than the debounce.
	// A loaded host can stall the guest between the two writes; such a
	// glitch proves nothing and is made again.
	for attempt := 1; ; attempt++ {
		t0 := time.Now()
		if err := c.SetPull(estop, false); err != nil {
			t.Fatal(err)
		}
		if err := c.SetPull(estop, true); err != nil {
			t.Fatal(err)
		}
		width := time.Since(t0)
		time.Sleep(3 * debounce)
		if width < debounce/4 {
			if got := p.Telemetry().Live; got != "1" {
				t.Fatalf("a glitch of %s, shorter than the %s debounce, reached live: %q", width, debounce, got)
			}
			break
		}
		if attempt == 5 {
			t.Fatalf("no glitch shorter than %s in %d attempts (the last %s): the guest is stalled", debounce/4, attempt, width)
		}
		t.Logf("glitch %d took %s, too long to judge; again", attempt, width)
		waitLiveKernel(t, p, "1", 5*time.Second)
	}

	// Held low: live follows, after the debounce.
	changed := time.Now()
	if err := c.SetPull(estop, false); err != nil {
		t.Fatal(err)
	}
	waitLiveKernel(t, p, "0", debounce+5*time.Second)
	if took := time.Since(changed); took < debounce {
		t.Errorf("live changed %s after the line did, before the %s debounce", took, debounce)
	} else {
		t.Logf("held change reached live after %s (debounce %s)", took.Round(time.Millisecond), debounce)
	}
	if e := p.Telemetry().Error; e != "" {
		t.Errorf("error %q", e)
	}
	// The level point is the debounced level, read just now.
	if r := p.ReadPoints(); len(r) != 1 || r[0].Name != serialcfg.GPIOLevelPoint || r[0].Value != 0 || r[0].Err != "" || time.Since(r[0].At) > time.Second {
		t.Errorf("level point %+v, want level 0 read within the second", r)
	}
}

// TestKernelGPIOOutput drives a gpio-sim line through the driver and reads
// it back through the simulator: a single send, a change of tx.value, an
// output without tx holding the level last driven, and a periodic tx
// whose writes the kernel's gpio_value trace events record one interval
// apart.
func TestKernelGPIOOutput(t *testing.T) {
	kerneltest.Require(t)
	c := simChip(t, "fleet-out", 4, map[int]string{1: "relay"})
	const relay = 1
	p := openPort(t, "gpio-2", c.Line(relay), out(serialcfg.GPIOTx{Enabled: true, Value: 1}))
	waitValue(t, c, relay, "1")
	if tm := p.Telemetry(); tm.Live != "1" || tm.Error != "" {
		t.Errorf("telemetry %+v, want live 1", tm)
	}
	for _, v := range []int{0, 1, 0} {
		if err := p.Apply(context.Background(), out(serialcfg.GPIOTx{Enabled: true, Value: v})); err != nil {
			t.Fatal(err)
		}
		waitValue(t, c, relay, strconv.Itoa(v))
	}
	// No tx: the output holds the level it drives (0), it does not float
	// to what the line would read as an input.
	if err := p.Apply(context.Background(), out(serialcfg.GPIOTx{})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	waitValue(t, c, relay, "0")

	// Periodic tx: the writes keep reaching the kernel while tx runs, and
	// stop when it does. (Counts, not gaps: under TCG on a loaded host a
	// stalled ticker fires late and then at once.)
	trace := startGPIOTrace(t)
	const interval = 200 * time.Millisecond
	start := time.Now()
	if err := p.Apply(context.Background(), out(serialcfg.GPIOTx{Enabled: true, Value: 1, IntervalMs: int(interval / time.Millisecond)})); err != nil {
		t.Fatal(err)
	}
	waitValue(t, c, relay, "1")
	if !p.Telemetry().TxOn {
		t.Error("txOn false while a periodic tx runs")
	}
	time.Sleep(10 * interval)
	sets := trace.stop()
	elapsed := time.Since(start)
	// One write at Apply, then one per tick: never more ticks than time.
	if most := 2 + int(elapsed/interval); len(sets) < 4 || len(sets) > most {
		t.Fatalf("the kernel traced %d writes in %s of tx every %s, want 4 to %d: %v", len(sets), elapsed.Round(time.Millisecond), interval, most, sets)
	}
	var gaps []string
	for i, s := range sets {
		if s.value != 1 {
			t.Errorf("write %d set %d, want 1", i, s.value)
		}
		if i > 0 {
			gaps = append(gaps, (s.at - sets[i-1].at).Round(time.Millisecond).String())
		}
	}
	t.Logf("kernel traced %d writes of 1 in %s, gaps %v", len(sets), elapsed.Round(time.Millisecond), gaps)

	// tx off: the one write that holds the level, then none.
	trace = startGPIOTrace(t)
	if err := p.Apply(context.Background(), out(serialcfg.GPIOTx{})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * interval)
	if sets := trace.stop(); len(sets) > 1 {
		t.Fatalf("the kernel traced %d writes after tx was turned off: %v", len(sets), sets)
	}
	waitValue(t, c, relay, "1")
}

// TestKernelGPIOChipAppearsAfterStart opens a line on a chip that was
// created after the process had enumerated the chips there were, and
// after a chip went away and another took its place.
func TestKernelGPIOChipAppearsAfterStart(t *testing.T) {
	kerneltest.Require(t)
	first := simChip(t, "fleet-first", 2, nil)
	p := openPort(t, "gpio-1", first.Line(0), out(serialcfg.GPIOTx{Enabled: true, Value: 1}))
	waitValue(t, first, 0, "1")
	p.Close()

	later, err := gpiosim.New("fleet-later", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { later.Remove() })
	p = openPort(t, "gpio-2", later.Line(1), out(serialcfg.GPIOTx{Enabled: true, Value: 1}))
	waitValue(t, later, 1, "1")
	p.Close()

	// The chip goes away and another comes.
	name := later.Name
	if err := later.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := gpio.OpenLine(name + ":1"); !errors.Is(err, gpio.ErrNoChip) {
		t.Fatalf("OpenLine on the removed %s: %v, want ErrNoChip", name, err)
	}
	again := simChip(t, "fleet-again", 2, nil)
	p = openPort(t, "gpio-3", again.Line(1), out(serialcfg.GPIOTx{Enabled: true, Value: 1}))
	waitValue(t, again, 1, "1")
	t.Logf("chips: %s before the first open, %s after it, %s after %s went away", first.Name, name, again.Name, name)
}

// gpioTrace records the kernel's gpio_value trace events.
type gpioTrace struct {
	t *testing.T
}

type gpioSet struct {
	at    time.Duration // kernel trace clock
	value int
}

const tracefs = "/sys/kernel/tracing"

func startGPIOTrace(t *testing.T) *gpioTrace {
	t.Helper()
	if _, err := os.Stat(tracefs + "/trace"); err != nil {
		if err := unix.Mount("tracefs", tracefs, "tracefs", 0, ""); err != nil {
			t.Fatalf("mount tracefs: %v", err)
		}
	}
	for file, v := range map[string]string{"trace": "", "events/gpio/gpio_value/enable": "1", "tracing_on": "1"} {
		if err := os.WriteFile(tracefs+"/"+file, []byte(v), 0o644); err != nil {
			t.Fatalf("tracefs %s: %v", file, err)
		}
	}
	return &gpioTrace{t: t}
}

// stop ends the trace and returns the "set" events, in order.
func (g *gpioTrace) stop() []gpioSet {
	t := g.t
	if err := os.WriteFile(tracefs+"/events/gpio/gpio_value/enable", []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(tracefs + "/trace")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sets []gpioSet
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "   gpio.test-80  [001] .....  12.345678: gpio_value: 512 set 1"
		line := sc.Text()
		before, after, ok := strings.Cut(line, ": gpio_value: ")
		if !ok {
			continue
		}
		fields := strings.Fields(after)
		if len(fields) != 3 || fields[1] != "set" {
			continue
		}
		ts := strings.Fields(before)
		sec, err := strconv.ParseFloat(strings.TrimSuffix(ts[len(ts)-1], ":"), 64)
		if err != nil {
			t.Fatalf("trace line %q: %v", line, err)
		}
		v, _ := strconv.Atoi(fields[2])
		sets = append(sets, gpioSet{at: time.Duration(sec * float64(time.Second)), value: v})
	}
	return sets
}

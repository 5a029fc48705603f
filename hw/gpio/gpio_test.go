package gpio_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpiotest"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/gpio"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/testwait"
)

func newPin() *gpiotest.Pin {
	return &gpiotest.Pin{N: "GPIO5", Num: 5, Clock: clockwork.NewRealClock(), EdgesChan: make(chan pgpio.Level, 16)}
}

func in(pull string, debounceMs int) serialcfg.Config {
	return serialcfg.Config{Kind: serialcfg.KindGPIO, GPIO: &serialcfg.GPIO{Kind: "gpio", Direction: "in", Pull: pull, DebounceMs: debounceMs}}
}

func out(tx serialcfg.GPIOTx) serialcfg.Config {
	return serialcfg.Config{Kind: serialcfg.KindGPIO, GPIO: &serialcfg.GPIO{Kind: "gpio", Direction: "out", Pull: "none", Tx: tx}}
}

func open(t *testing.T, pin *gpiotest.Pin, c serialcfg.Config) *gpio.Port {
	t.Helper()
	p, err := gpio.New(context.Background(), gpio.Options{Name: "gpio-1", Device: "gpiochip0:5", Pin: pin}, c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func waitLive(t *testing.T, p *gpio.Port, want string) time.Time {
	t.Helper()
	testwait.Value(t, "live "+want, 3*time.Second, 2*time.Millisecond, p.Telemetry, func(tm serialcfg.Telemetry) bool { return tm.Live == want })
	return time.Now()
}

func level(pin *gpiotest.Pin) pgpio.Level {
	pin.Lock()
	defer pin.Unlock()
	return pin.L
}

func TestParseDevice(t *testing.T) {
	tests := []struct {
		dev  string
		chip string
		line int
		ok   bool
	}{
		{"gpiochip0:5", "gpiochip0", 5, true},
		{"gpiochip4:19", "gpiochip4", 19, true},
		{"gpiochip0", "", 0, false},
		{"gpiochip0:x", "", 0, false},
		{"/dev/gpiochip0:5", "", 0, false},
		{"../gpiochip0:5", "", 0, false},
		{":5", "", 0, false},
		{"gpiochip0:-1", "", 0, false},
	}
	for _, tt := range tests {
		chip, line, err := gpio.ParseDevice(tt.dev)
		if (err == nil) != tt.ok || chip != tt.chip || line != tt.line {
			t.Errorf("ParseDevice(%q) = %q, %d, %v", tt.dev, chip, line, err)
		}
	}
}

func TestInputPull(t *testing.T) {
	tests := []struct {
		pull     string
		wantPull pgpio.Pull
		live     string
	}{
		{"up", pgpio.PullUp, "1"},
		{"down", pgpio.PullDown, "0"},
		{"none", pgpio.Float, "0"},
	}
	for _, tt := range tests {
		t.Run(tt.pull, func(t *testing.T) {
			pin := newPin()
			p := open(t, pin, in(tt.pull, 0))
			pin.Lock()
			got := pin.P
			pin.Unlock()
			if got != tt.wantPull {
				t.Fatalf("pull %v, want %v", got, tt.wantPull)
			}
			if tm := p.Telemetry(); tm.Live != tt.live || tm.TxOn || tm.Error != "" {
				t.Fatalf("telemetry %+v, want live %s", tm, tt.live)
			}
		})
	}
}

func TestInputFollowsEdgesWithoutDebounce(t *testing.T) {
	pin := newPin()
	p := open(t, pin, in("down", 0))
	pin.EdgesChan <- pgpio.High
	waitLive(t, p, "1")
	pin.EdgesChan <- pgpio.Low
	waitLive(t, p, "0")
}

func TestInputDebounce(t *testing.T) {
	const debounce = 200 * time.Millisecond
	pin := newPin()
	p := open(t, pin, in("down", int(debounce/time.Millisecond)))

	// A glitch shorter than the debounce does not reach live.
	pin.EdgesChan <- pgpio.High
	pin.EdgesChan <- pgpio.Low
	time.Sleep(2 * debounce)
	if got := p.Telemetry().Live; got != "0" {
		t.Fatalf("live %q after a glitch, want 0", got)
	}

	// A level held for the debounce time does, and not before.
	start := time.Now()
	pin.EdgesChan <- pgpio.High
	at := waitLive(t, p, "1")
	if el := at.Sub(start); el < debounce-10*time.Millisecond {
		t.Fatalf("live changed after %v, before the %v debounce", el, debounce)
	}
}

func TestOutputSingleSend(t *testing.T) {
	pin := newPin()
	p := open(t, pin, out(serialcfg.GPIOTx{Enabled: true, IntervalMs: 0, Value: 1}))
	if level(pin) != pgpio.High {
		t.Fatal("line not driven high")
	}
	waitLive(t, p, "1")
	deadline := time.Now().Add(2 * time.Second)
	for p.Telemetry().TxOn {
		if time.Now().After(deadline) {
			t.Fatal("txOn still true after a single send")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Nothing re-asserts the level after a single send.
	pin.Out(pgpio.Low)
	time.Sleep(300 * time.Millisecond)
	if level(pin) != pgpio.Low || p.Writes() != 1 {
		t.Fatalf("level %v, writes %d after a single send; want the line left alone, 1 write", level(pin), p.Writes())
	}
}

func TestOutputPeriodicReasserts(t *testing.T) {
	pin := newPin()
	p := open(t, pin, out(serialcfg.GPIOTx{Enabled: true, IntervalMs: 100, Value: 1}))
	if tm := p.Telemetry(); !tm.TxOn || tm.Live != "1" {
		t.Fatalf("telemetry %+v, want txOn, live 1", tm)
	}
	// Something else pulls the line low: the next send sets it again.
	pin.Out(pgpio.Low)
	deadline := time.Now().Add(2 * time.Second)
	for level(pin) != pgpio.High {
		if time.Now().After(deadline) {
			t.Fatal("periodic tx did not set the line again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p.Writes() < 2 {
		t.Fatalf("writes %d, want at least 2", p.Writes())
	}
}

func TestReconfigureLive(t *testing.T) {
	pin := newPin()
	p := open(t, pin, in("up", 0))
	waitLive(t, p, "1")
	if err := p.Apply(context.Background(), out(serialcfg.GPIOTx{Enabled: true, IntervalMs: 0, Value: 0})); err != nil {
		t.Fatal(err)
	}
	if level(pin) != pgpio.Low {
		t.Fatal("output not driven low")
	}
	waitLive(t, p, "0")
	// Output without tx holds the current level.
	if err := p.Apply(context.Background(), out(serialcfg.GPIOTx{})); err != nil {
		t.Fatal(err)
	}
	if tm := p.Telemetry(); tm.Live != "0" || tm.TxOn {
		t.Fatalf("telemetry %+v", tm)
	}
	// Back to an input with pull-up.
	if err := p.Apply(context.Background(), in("up", 20)); err != nil {
		t.Fatal(err)
	}
	waitLive(t, p, "1")
	pin.EdgesChan <- pgpio.Low
	waitLive(t, p, "0")
}

func TestApplyRejects(t *testing.T) {
	pin := newPin()
	p := open(t, pin, in("up", 0))
	bad := []serialcfg.Config{
		{Kind: serialcfg.KindCANFD, CANFD: &serialcfg.CANFD{Kind: "canfd"}},
		in("sideways", 0),
		{Kind: serialcfg.KindGPIO, GPIO: &serialcfg.GPIO{Kind: "gpio", Direction: "in", Pull: "up", Tx: serialcfg.GPIOTx{Enabled: true, Value: 1}}},
	}
	for _, c := range bad {
		if err := p.Apply(context.Background(), c); err == nil {
			t.Errorf("Apply(%+v) accepted", c)
		}
	}
	if got := p.Telemetry().Live; got != "1" {
		t.Fatalf("live %q after refused configs, want the running input's 1", got)
	}
}

func TestClose(t *testing.T) {
	pin := newPin()
	released := false
	p, err := gpio.New(context.Background(), gpio.Options{Name: "gpio-1", Pin: pin, Release: func() error { released = true; return nil }},
		out(serialcfg.GPIOTx{Enabled: true, IntervalMs: 100, Value: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !released {
		t.Fatal("line not released")
	}
	tm := p.Telemetry()
	if tm.Error != "port closed" || tm.TxOn {
		t.Fatalf("telemetry after Close %+v", tm)
	}
	if err := p.Apply(context.Background(), in("up", 0)); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Apply after Close = %v", err)
	}
}

// linuxLikePin behaves as periph's Linux line (gpioioctl.GPIOLine) does
// when an output is read: it turns itself into an input with pull-up and
// reads that.
type linuxLikePin struct {
	*gpiotest.Pin
	isOut bool
}

func (p *linuxLikePin) Out(l pgpio.Level) error {
	p.isOut = true
	return p.Pin.Out(l)
}

func (p *linuxLikePin) Read() pgpio.Level {
	if p.isOut {
		p.isOut = false
		if err := p.Pin.In(pgpio.PullUp, pgpio.NoEdge); err != nil {
			return pgpio.Low
		}
		p.Pin.Lock()
		p.Pin.L = pgpio.High
		p.Pin.Unlock()
	}
	return p.Pin.Read()
}

// An output reconfigured without tx keeps the level it drove, on a line
// that cannot read an output back.
func TestOutputHoldsDrivenLevel(t *testing.T) {
	pin := &linuxLikePin{Pin: newPin()}
	p, err := gpio.New(context.Background(), gpio.Options{Name: "gpio-1", Device: "gpiochip0:5", Pin: pin},
		out(serialcfg.GPIOTx{Enabled: true, Value: 0}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Apply(context.Background(), out(serialcfg.GPIOTx{})); err != nil {
		t.Fatal(err)
	}
	if level(pin.Pin) != pgpio.Low || p.Telemetry().Live != "0" {
		t.Fatalf("output without tx drives %v (live %q), want the low it drove", level(pin.Pin), p.Telemetry().Live)
	}
}

// TestLevelPoint: an input is the one point "level", the debounced level
// as 0 or 1 read moments ago; a glitch shorter than the debounce never
// shows in it; an output has no point.
func TestLevelPoint(t *testing.T) {
	const debounce = 150 * time.Millisecond
	pin := newPin()
	p := open(t, pin, in("down", int(debounce/time.Millisecond)))
	point := func() hw.PointReading {
		t.Helper()
		r := p.ReadPoints()
		if len(r) != 1 || r[0].Name != serialcfg.GPIOLevelPoint || r[0].Err != "" {
			t.Fatalf("ReadPoints = %+v, want the one level point", r)
		}
		return r[0]
	}
	if r := point(); r.Value != 0 || time.Since(r.At) > time.Second {
		t.Fatalf("level %+v, want 0 read just now", r)
	}
	first := point().At
	testwait.Until(t, 3*time.Second, func() string {
		if !point().At.After(first) {
			return "the level point's time does not move while the line is read"
		}
		return ""
	})

	pin.EdgesChan <- pgpio.High
	pin.EdgesChan <- pgpio.Low
	time.Sleep(2 * debounce)
	if r := point(); r.Value != 0 {
		t.Fatalf("a glitch reached the level point: %+v", r)
	}
	pin.EdgesChan <- pgpio.High
	testwait.Value(t, "level 1", 3*time.Second, 2*time.Millisecond, point, func(r hw.PointReading) bool { return r.Value == 1 })

	if err := p.Apply(context.Background(), out(serialcfg.GPIOTx{Enabled: true, Value: 1})); err != nil {
		t.Fatal(err)
	}
	if r := p.ReadPoints(); len(r) != 0 {
		t.Errorf("an output reads points %+v", r)
	}
}

// Package demo_test runs the one-command demo as a newcomer would: `make run`
// in a fresh clone of this repository, then the API with the printed key,
// then Ctrl-C (SIGINT to make's process group), and checks that nothing the
// demo started is left running and that a second `make run` reuses the data.
package demo_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/linewatch"
	"github.com/fleet/fleet/test/rig/testnet"
)

// startTimeout covers a cold build of the relay (cgo SQLite) in the clone.
const startTimeout = 5 * time.Minute

var (
	keyLine      = regexp.MustCompile(`API key: (svc_sk_\S+)`)
	panelLine    = regexp.MustCompile(`^  Panel: (http://\S+/panel/)$`)
	emailLine    = regexp.MustCompile(`^    email: +(\S+@\S+)$`)
	passwordLine = regexp.MustCompile(`^    password: +([A-Za-z0-9]{12,})$`)
)

// demo is one `make run` in its own process group, its output collected line
// by line.
type demo struct {
	t    *testing.T
	cmd  *exec.Cmd
	done chan struct{} // closed when make has exited
	out  *linewatch.Lines
}

// startDemo runs `make run` with args in dir, with this environment's Go
// caches (GOCACHE, GOMODCACHE, GOFLAGS are inherited as they are).
func startDemo(t *testing.T, dir string, args ...string) *demo {
	t.Helper()
	d := &demo{t: t, done: make(chan struct{})}
	d.out = linewatch.New("make run", d.done)
	cmd := exec.Command("make", append([]string{"run"}, args...)...)
	cmd.Dir = dir
	cmd.Env = demoEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = d.out, d.out
	// A process left behind would keep the output pipe open: Wait gives up
	// on it 5 s after make exits (and the test reports the process).
	cmd.WaitDelay = 5 * time.Second
	d.cmd = cmd
	// A process started with SIGINT ignored (a background job of a script)
	// passes that on to make, which could then not be interrupted. While a
	// handler is installed here, the child starts with the default action.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	err := cmd.Start()
	signal.Stop(sig)
	if err != nil {
		t.Fatalf("make run: %v", err)
	}
	go func() {
		cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() { // a failed test still leaves nothing running
		select {
		case <-d.done:
		default:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
		for _, p := range leftovers(dir) {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	return d
}

// demoEnv is this environment without what an enclosing make or a user's
// shell could pass to the inner make.
func demoEnv() []string {
	drop := []string{"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "GNUMAKEFLAGS", "DATA", "BIN", "LISTEN", "SINK_LISTEN", "METRICS_LISTEN", "WATCH_PID", "GO"}
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(drop, k)
	})
}

func (d *demo) output() string { return d.out.String() }

// waitLine returns the first submatches of re in a line of output, waiting
// up to timeout; it fails the test if make exits or time runs out first.
func (d *demo) waitLine(re *regexp.Regexp, timeout time.Duration) []string {
	d.t.Helper()
	return d.out.Wait(d.t, re, timeout)
}

// interrupt sends SIGINT to make's process group, as Ctrl-C does, and waits
// for make to exit.
func (d *demo) interrupt() {
	d.t.Helper()
	if err := syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT); err != nil {
		d.t.Fatalf("SIGINT: %v", err)
	}
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.t.Fatalf("make run still running 30 s after SIGINT:\n%s", d.output())
	}
}

type device struct {
	ID     string `json:"id"`
	Model  string `json:"model"`
	Status string `json:"status"`
}

type telemetry struct {
	At       *time.Time `json:"at"`
	Channels []struct {
		ID   string `json:"id"`
		Live string `json:"live"`
	} `json:"channels"`
}

// get calls the public API with key and decodes {"data": ...} into data.
func get(t *testing.T, base, key, path string, data any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/api/v1/public"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &struct{ Data any }{data}); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
}

// onlineDevices waits until the key lists three devices, two IG-500 and one
// IG-100, all ONLINE, and returns them.
func onlineDevices(t *testing.T, base, key string) []device {
	t.Helper()
	var devs []device
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		devs = nil
		get(t, base, key, "/devices?limit=100", &devs)
		models := map[string]int{}
		online := 0
		for _, d := range devs {
			models[d.Model]++
			if d.Status == "ONLINE" {
				online++
			}
		}
		if len(devs) == 3 && models["IG-500"] == 2 && models["IG-100"] == 1 && online == 3 {
			return devs
		}
		if time.Now().After(deadline) {
			t.Fatalf("devices after 30 s: %+v; want exactly two IG-500 and one IG-100, all ONLINE", devs)
		}
	}
}

// liveValues returns an IG-500's channel values from /serial/telemetry once
// its time differs from after.
func liveValues(t *testing.T, base, key, id string, after time.Time) (time.Time, map[string]string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		var tel telemetry
		get(t, base, key, "/devices/"+id+"/serial/telemetry", &tel)
		if tel.At != nil && !tel.At.Equal(after) {
			live := map[string]string{}
			for _, c := range tel.Channels {
				live[c.ID] = c.Live
			}
			return *tel.At, live
		}
		if time.Now().After(deadline) {
			t.Fatalf("telemetry of %s did not change in 20 s (at %v)", id, tel.At)
		}
	}
}

// point is an entry of GET /devices/{id}/points.
type point struct {
	ID      string     `json:"id"`
	Type    string     `json:"type"`
	Unit    string     `json:"unit"`
	Value   any        `json:"value"`
	Quality string     `json:"quality"`
	Error   string     `json:"error"`
	At      *time.Time `json:"at"`
}

// goodPoints waits until every point of the device is "good" with a value
// read after the one in before (any, for a point not in it), its rs485-1
// and canfd-1 both have points, and returns them by id. A point that did
// not move is recorded again within a minute.
func goodPoints(t *testing.T, base, key, id string, before map[string]point) map[string]point {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		var pts []point
		get(t, base, key, "/devices/"+id+"/points", &pts)
		byID := map[string]point{}
		ready := len(pts) > 0
		channels := map[string]bool{}
		for _, p := range pts {
			byID[p.ID] = p
			channels[strings.SplitN(p.ID, ".", 2)[0]] = true
			ready = ready && p.Quality == "good" && p.Value != nil && p.At != nil && (before[p.ID].At == nil || p.At.After(*before[p.ID].At))
		}
		if ready && channels["rs485-1"] && channels["canfd-1"] {
			return byID
		}
		if time.Now().After(deadline) {
			t.Fatalf("points of %s after 90 s: %+v; want rs485-1's and canfd-1's, every one good with a value read after %+v", id, pts, before)
		}
	}
}

// checkPoints checks the demo's points of an IG-500: the Modbus
// temperature and counter with their types and units, the signals
// imported from demo.dbc, all good; the values move; and the samples route
// answers their history, raw and in buckets.
func checkPoints(t *testing.T, base, key, id string) {
	t.Helper()
	first := goodPoints(t, base, key, id, nil)
	for pid, want := range map[string]point{"rs485-1.boiler_temp": {Type: "f32", Unit: "°C"}, "rs485-1.pulse_count": {Type: "u32"}} {
		p, ok := first[pid]
		if !ok {
			t.Fatalf("no point %s in %+v", pid, first)
		}
		if p.Type != want.Type || p.Unit != want.Unit {
			t.Errorf("%s: type %q unit %q, want %q %q", pid, p.Type, p.Unit, want.Type, want.Unit)
		}
		if _, ok := p.Value.(float64); !ok {
			t.Errorf("%s: value %v, want a number", pid, p.Value)
		}
	}
	second := goodPoints(t, base, key, id, first)
	moved := map[string]bool{}
	for pid, p := range second {
		if p.Value != first[pid].Value {
			moved[strings.SplitN(pid, ".", 2)[0]] = true
		}
	}
	for _, pid := range []string{"rs485-1.boiler_temp", "rs485-1.pulse_count"} {
		if second[pid].Value == first[pid].Value {
			t.Errorf("%s: %v, then %v read later: want a value that moves", pid, first[pid].Value, second[pid].Value)
		}
	}
	if !moved["canfd-1"] {
		t.Errorf("no canfd-1 point moved between two readings: %+v then %+v", first, second)
	}

	// The history of the temperature: raw samples, then one-minute buckets.
	var raw []struct {
		At    time.Time `json:"at"`
		Value any       `json:"value"`
	}
	samples := "/devices/" + id + "/points/rs485-1.boiler_temp/samples"
	get(t, base, key, samples, &raw)
	if len(raw) < 2 {
		t.Fatalf("GET %s: %d samples, want the history of the readings", samples, len(raw))
	}
	for _, s := range raw {
		if _, ok := s.Value.(float64); !ok {
			t.Errorf("GET %s: sample %+v, want a number", samples, s)
		}
	}
	var buckets []struct {
		Min, Max, Avg, Last float64
		Count               int
	}
	get(t, base, key, samples+"?step=1m", &buckets)
	total := 0
	for _, b := range buckets {
		total += b.Count
		if b.Min > b.Avg || b.Avg > b.Max {
			t.Errorf("GET %s?step=1m: bucket %+v, want min ≤ avg ≤ max", samples, b)
		}
	}
	if len(buckets) == 0 || total < len(raw) {
		t.Errorf("GET %s?step=1m: %d buckets of %d samples, want at least the %d raw samples read before", samples, len(buckets), total, len(raw))
	}
}

// process is a process found in /proc.
type process struct {
	pid  int
	desc string
}

// leftovers lists the processes whose executable or working directory is
// inside dir.
func leftovers(dir string) []process {
	entries, _ := os.ReadDir("/proc")
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, link := range []string{"exe", "cwd"} {
			target, err := os.Readlink(filepath.Join("/proc", e.Name(), link))
			if err == nil && (target == dir || strings.HasPrefix(target, dir+"/")) {
				cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
				out = append(out, process{pid, fmt.Sprintf("pid %d (%s %s): %s", pid, link, target, strings.ReplaceAll(string(cmdline), "\x00", " "))})
				break
			}
		}
	}
	return out
}

// assertNothingLeft fails if a process of the clone is still there a few
// seconds after make exited.
func assertNothingLeft(t *testing.T, dir string) {
	t.Helper()
	var left []process
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if left = leftovers(dir); len(left) == 0 {
			return
		}
	}
	var desc []string
	for _, p := range left {
		desc = append(desc, p.desc)
	}
	t.Errorf("processes left behind after make exited:\n%s", strings.Join(desc, "\n"))
}

// cloneRepo clones the repository this test runs in (its HEAD) into a
// temporary folder.
func cloneRepo(t *testing.T) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse (the test runs inside the repository): %v", err)
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(dir, "fleet")
	if out, err := exec.Command("git", "clone", "--quiet", strings.TrimSpace(string(top)), dir).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v: %s", err, out)
	}
	return dir
}

// TestMakeRunInAFreshClone is issue 7's demo test.
func TestMakeRunInAFreshClone(t *testing.T) {
	for _, tool := range []string{"git", "make", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed: %v", tool, err)
		}
	}
	dir := cloneRepo(t)

	// A demo folder from the earlier four-gateway layout is started over.
	old := filepath.Join(dir, ".fleet-demo")
	if err := os.MkdirAll(filepath.Join(old, "agent-4"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "demo.env"), []byte("ORG=x\nKEY=svc_sk_old_old\nDEVICE_4=\"a b IG-100\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "relay.db"), []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}

	port, sinkPort, metricsPort := testnet.FreePort(t), testnet.FreePort(t), testnet.FreePort(t)
	args := []string{fmt.Sprintf("LISTEN=127.0.0.1:%d", port), fmt.Sprintf("SINK_LISTEN=127.0.0.1:%d", sinkPort), fmt.Sprintf("METRICS_LISTEN=127.0.0.1:%d", metricsPort)}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	var key, email, password string
	var ids []string
	t.Run("first run", func(t *testing.T) {
		d := startDemo(t, dir, args...)
		key = d.waitLine(keyLine, startTimeout)[1]
		if !strings.Contains(d.output(), "older demo") {
			t.Errorf("no message about starting the old demo folder over:\n%s", d.output())
		}
		panelURL := d.waitLine(panelLine, time.Second)[1]
		email, password = d.waitLine(emailLine, time.Second)[1], d.waitLine(passwordLine, time.Second)[1]
		if panelURL != base+"/panel/" {
			t.Errorf("panel URL %s, want %s/panel/", panelURL, base)
		}
		signInToPanel(t, base, email, password, "Press line 1", "Packaging line", "Gatehouse")
		devs := onlineDevices(t, base, key)
		var first string
		for _, dv := range devs {
			ids = append(ids, dv.ID)
			if dv.Model == "IG-500" && strings.Contains(d.output(), dv.ID+`  IG-500 "Press line 1"`) {
				first = dv.ID
			}
		}
		if first == "" {
			t.Fatalf("the banner names no IG-500 as Press line 1:\n%s", d.output())
		}

		// Moving signals on the forwarding IG-500: Modbus, CAN-FD and GPIO.
		at1, live1 := liveValues(t, base, key, first, time.Time{})
		_, live2 := liveValues(t, base, key, first, at1)
		for _, ch := range []string{"rs485-1", "rs485-2", "canfd-1"} {
			if live1[ch] == "" || live1[ch] == live2[ch] {
				t.Errorf("%s live %q then %q: want a value that moves", ch, live1[ch], live2[ch])
			}
		}
		for _, ch := range []string{"gpio-1", "gpio-4"} {
			if live2[ch] != "0" && live2[ch] != "1" {
				t.Errorf("%s live %q: want 0 or 1", ch, live2[ch])
			}
		}

		// Named points with their history (issue 26): the temperature
		// and counter read over Modbus, the CAN signals of demo.dbc.
		checkPoints(t, base, key, first)
		if !strings.Contains(d.output(), "/devices/$DEVICE_ID/points") {
			t.Errorf("the banner has no curl line for the points:\n%s", d.output())
		}
		pasteBanner(t, d.output())
		// The relay's metrics where METRICS_LISTEN says.
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("metrics at METRICS_LISTEN: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		if !strings.Contains(d.output(), fmt.Sprintf("Relay metrics: http://127.0.0.1:%d/metrics", metricsPort)) {
			t.Errorf("the banner does not say where the metrics are:\n%s", d.output())
		}

		// Its signals reach the sink, which verified them.
		d.waitLine(regexp.MustCompile(`^sink \| \S+ serial\.signal device `+first+` .*signature ok`), 60*time.Second)
		if strings.Contains(d.output(), "BAD SIGNATURE") {
			t.Errorf("the sink refused a delivery:\n%s", d.output())
		}

		d.interrupt()
		if !strings.Contains(d.output(), "fleet demo: stopped") {
			t.Errorf("no stop message after SIGINT:\n%s", d.output())
		}
		// Ctrl-C is how the demo stops: make reports no error for it.
		if strings.Contains(d.output(), "make: ***") {
			t.Errorf("make reports an error after Ctrl-C:\n%s", d.output())
		}
		assertNothingLeft(t, dir)
	})
	if t.Failed() {
		return
	}

	t.Run("busy port", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		cmd := exec.Command("make", "run", "LISTEN="+ln.Addr().String(), args[1], args[2])
		cmd.Dir, cmd.Env = dir, demoEnv()
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(string(out), ln.Addr().String()+" is already in use") {
			t.Errorf("make run on a busy port: %v, output:\n%s\nwant a failure saying the address is in use", err, out)
		}
		assertNothingLeft(t, dir)
		// The relay's metrics port taken: the same, naming the variable.
		cmd = exec.Command("make", "run", args[0], args[1], "METRICS_LISTEN="+ln.Addr().String())
		cmd.Dir, cmd.Env = dir, demoEnv()
		out, err = cmd.CombinedOutput()
		if !errors.As(err, &exit) || !strings.Contains(string(out), ln.Addr().String()+" (the relay's metrics) is already in use") ||
			!strings.Contains(string(out), "make run METRICS_LISTEN=") {
			t.Errorf("make run with the metrics port taken: %v, output:\n%s\nwant a failure naming the address and METRICS_LISTEN", err, out)
		}
		assertNothingLeft(t, dir)
	})

	t.Run("second run reuses the data", func(t *testing.T) {
		d := startDemo(t, dir, args...)
		if again := d.waitLine(keyLine, startTimeout)[1]; again != key {
			t.Errorf("second run printed key %s, want the first run's %s", again, key)
		}
		if again := d.waitLine(passwordLine, time.Second)[1]; again != password {
			t.Errorf("second run printed panel password %s, want the first run's %s", again, password)
		}
		devs := onlineDevices(t, base, key)
		for _, dv := range devs {
			if !slices.Contains(ids, dv.ID) {
				t.Errorf("device %s is new; the first run made %v", dv.ID, ids)
			}
		}
		if !strings.Contains(d.output(), "reused") {
			t.Errorf("the sink made a new certificate:\n%s", d.output())
		}
		d.waitLine(regexp.MustCompile(`^sink \| .*serial\.signal .*signature ok`), 60*time.Second)
		d.interrupt()
		assertNothingLeft(t, dir)
	})
}

// pasteBanner runs the banner's curl lines as a user pastes them into a
// shell (each must answer 2xx), after checking they name their variables as
// the README's API examples do: KEY, RELAY, DEVICE_ID.
func pasteBanner(t *testing.T, output string) {
	t.Helper()
	m := regexp.MustCompile(`(?s)Paste into another terminal:\n(.*?)\n\n`).FindStringSubmatch(output)
	if m == nil {
		t.Fatalf("no curl lines in the banner:\n%s", output)
	}
	lines := strings.Split(strings.TrimSpace(m[1]), "\n")
	if !regexp.MustCompile(`^KEY=svc_sk_\S+ RELAY=http://\S+ DEVICE_ID=\S+$`).MatchString(strings.TrimSpace(lines[0])) {
		t.Errorf("the banner's first line %q does not set KEY, RELAY and DEVICE_ID", lines[0])
	}
	script := "set -e\n" + strings.TrimSpace(lines[0]) + "\n"
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, `curl -s -H "Authorization: Bearer $KEY" "$RELAY/api/v1/public/`) {
			t.Errorf("banner line %q is not a README-style curl line", l)
		}
		script += strings.Replace(l, "curl -s ", "curl -sf -o /dev/null --max-time 10 ", 1) + "\n"
	}
	if out, err := exec.Command("bash", "-c", script).CombinedOutput(); err != nil {
		t.Errorf("the banner's curl lines, pasted: %v\n%s\n%s", err, script, out)
	}
}

// signInToPanel signs in to the panel at base with email and password, as
// a browser would post the form, and checks the fleet page names each of
// devices.
func signInToPanel(t *testing.T, base, email, password string, devices ...string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := c.PostForm(base+"/panel/login", url.Values{"email": {email}, "password": {password}})
	if err != nil {
		t.Fatalf("panel sign-in: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/panel/" {
		t.Fatalf("panel sign-in as %s: %d at %s", email, resp.StatusCode, resp.Request.URL)
	}
	for _, d := range devices {
		if !strings.Contains(string(body), d) {
			t.Errorf("the panel's fleet page does not show %q", d)
		}
	}
}

// The end-to-end tests run the real binaries, fleet-relay and fleet-agent
// (built by TestMain), as processes talking over loopback: a relay on a
// SQLite file and several agents on simulated hardware. It kills either side
// with SIGKILL and checks what a customer would: every metric sample an
// agent captured is stored exactly once, device status moves as documented,
// and configuration set through the public API reaches the agent.
package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
)

type deviceInfo struct {
	ID    string `json:"id"`
	Token string `json:"token"`
}

// fleet is one relay and its agents.
type fleet struct {
	t       *testing.T
	dir     string
	db      string
	port    int
	relay   *fleetproc.Proc
	relayN  int
	api     *fleetproc.API
	devices []deviceInfo
	agents  []*fleetproc.Proc
	// agentBin is the agent binary run.
	agentBin string
}

func (f *fleet) relayLog() string { return filepath.Join(f.dir, "relay.log") }

func (f *fleet) startRelay() {
	f.t.Helper()
	f.relayN++
	f.relay = fleetproc.Start(f.t, "fleet-relay", f.relayLog(), nil, bins.relay, "serve", "--db", f.db,
		"--listen", fmt.Sprintf("127.0.0.1:%d", f.port), "--rate-limit", "1000000", "--log-level", "info",
		"--agent-orphan-window", "5s")
	want := f.relayN
	fleetproc.Eventually(f.t, 20*time.Second, func() string {
		if n := len(fleetproc.LogLines(f.t, f.relayLog(), "relay listening")); n < want {
			return "relay not listening"
		}
		return ""
	})
}

func (f *fleet) agentLog(i int) string { return filepath.Join(f.dir, fmt.Sprintf("agent-%d.log", i)) }

// startAgent starts agent i on the simulator, or with hw as its hardware
// flags when given (such as --hw linux --port rs485-1=PATH).
func (f *fleet) startAgent(i int, hw ...string) {
	f.t.Helper()
	d := f.devices[i]
	if len(hw) == 0 {
		hw = []string{"--hw", "sim"}
	}
	args := append([]string{"--relay", fmt.Sprintf("http://127.0.0.1:%d", f.port), "--token", d.Token}, hw...)
	f.agents[i] = fleetproc.Start(f.t, fmt.Sprintf("fleet-agent %d", i), f.agentLog(i), nil, f.agentBin, append(args, "--model", "IG-500",
		"--state-dir", filepath.Join(f.dir, fmt.Sprintf("state-%d", i)),
		"--heartbeat", "1s", "--metrics-interval", "1s", "--backoff-min", "200ms", "--backoff-max", "2s",
		"--passthrough-listen", "none", "--dev-root", "none", "--vpn-interface", "none",
		"--name", fmt.Sprintf("gw-%d", i), "--location", "Hall 7", "--firmware-version", "fw-e2e",
		"--log-level", "debug", "--log-format", "json")...)
}

func (f *fleet) status(i int) string {
	var d resource.One[resource.DeviceDetail]
	if code := f.api.Do("GET", "/devices/"+f.devices[i].ID, nil, &d); code != 200 {
		f.t.Fatalf("GET device: %d", code)
	}
	return string(d.Data.Status)
}

func (f *fleet) waitStatus(i int, want string, d time.Duration) {
	f.t.Helper()
	fleetproc.Eventually(f.t, d, func() string {
		if s := f.status(i); s != want {
			return fmt.Sprintf("device %d status %s, want %s", i, s, want)
		}
		return ""
	})
}

func (f *fleet) eventsOf(i int, typ string) []resource.Event {
	var l resource.List[resource.Event]
	if code := f.api.Do("GET", "/devices/"+f.devices[i].ID+"/events?limit=200&type="+typ, nil, &l); code != 200 {
		f.t.Fatalf("GET events: %d", code)
	}
	return l.Data
}

// newFleet starts a relay with devices for agents agents of agentBin.
func newFleet(t *testing.T, agents int, agentBin string) *fleet {
	dir := t.TempDir()
	if d := os.Getenv("FLEET_E2E_KEEP"); d != "" {
		dir = d
	}
	f := &fleet{t: t, dir: dir, db: filepath.Join(dir, "fleet.db"), port: freePort(t), agents: make([]*fleetproc.Proc, agents), agentBin: agentBin}
	var org struct{ ID string }
	fleetproc.Admin(t, bins.relay, nil, &org, "org", "create", "--db", f.db, "--name", "E2E")
	var key struct{ Key string }
	fleetproc.Admin(t, bins.relay, nil, &key, "key", "create", "--db", f.db, "--org", org.ID, "--name", "e2e",
		"--scopes", "devices:read,devices:write,metrics:read,logs:read", "--expires", "never")
	for i := range agents {
		var d deviceInfo
		fleetproc.Admin(t, bins.relay, nil, &d, "device", "add", "--db", f.db, "--org", org.ID, "--name", fmt.Sprintf("gw-%d", i),
			"--serial", fmt.Sprintf("SN-%d", i), "--model", "IG-500")
		f.devices = append(f.devices, d)
	}
	f.startRelay()
	f.api = fleetproc.NewAPI(t, fmt.Sprintf("http://127.0.0.1:%d", f.port), key.Key)
	return f
}

// TestAgentsThroughCrashesAndDroppedLinks is the end-to-end test.
// It runs once with current agents (CBOR after the welcome) and once with
// agents built as those from before CBOR (JSON throughout), against the
// same relay binary.
func TestAgentsThroughCrashesAndDroppedLinks(t *testing.T) {
	t.Run("cbor agents", func(t *testing.T) { testAgentsThroughCrashesAndDroppedLinks(t, bins.agent, "cbor") })
	t.Run("json-only agents", func(t *testing.T) { testAgentsThroughCrashesAndDroppedLinks(t, bins.agentJSON, "json") })
}

func testAgentsThroughCrashesAndDroppedLinks(t *testing.T, agentBin, codec string) {
	const n = 3
	f := newFleet(t, n, agentBin)
	for i := range n {
		if s := f.status(i); s != "PROVISIONING" {
			t.Fatalf("device %d before its agent ran: %s", i, s)
		}
	}
	for i := range n {
		f.startAgent(i)
	}
	for i := range n {
		f.waitStatus(i, "ONLINE", 20*time.Second)
	}
	// What the agents announced is what the API shows.
	var d resource.One[resource.DeviceDetail]
	f.api.Do("GET", "/devices/"+f.devices[0].ID, nil, &d)
	if d.Data.AgentDeviceName != "gw-0" || d.Data.AgentDeviceLocation != "Hall 7" || d.Data.FirmwareVersion != "fw-e2e" || d.Data.LastSeen == nil || d.Data.AgentTimezone == "" {
		t.Errorf("device detail = %+v", d.Data)
	}

	t.Run("configuration reaches the agent within a second", func(t *testing.T) {
		f.testConfig(t, 0)
	})

	time.Sleep(4 * time.Second) // samples accumulate and stream

	// kill -9 the relay while the agents stream samples; restart it on the
	// same database; kill it again right after the first agent is back,
	// in the middle of the backlog flush; restart.
	f.crashRelayTwice(4*time.Second, 500*time.Millisecond)
	for i := range n {
		f.waitStatus(i, "ONLINE", 60*time.Second)
	}

	// An agent killed with kill -9 goes OFFLINE, with a device.offline
	// event, and ONLINE again when it is back.
	f.agents[1].Kill()
	f.waitStatus(1, "OFFLINE", 10*time.Second)
	if evs := f.eventsOf(1, "device.offline"); len(evs) == 0 || evs[0].Severity != resource.SeverityWarning {
		t.Errorf("device.offline events after kill -9 = %+v", evs)
	}
	time.Sleep(time.Second)
	f.startAgent(1)
	f.waitStatus(1, "ONLINE", 30*time.Second)
	if evs := f.eventsOf(1, "device.online"); len(evs) < 2 {
		t.Errorf("device.online events = %d, want one per return", len(evs))
	}

	// A dropped link: the relay's side vanishes (kill -9 again), the agent
	// keeps running and comes back by itself.
	f.relay.Kill()
	time.Sleep(3 * time.Second)
	f.startRelay()
	for i := range n {
		f.waitStatus(i, "ONLINE", 60*time.Second)
	}
	time.Sleep(3 * time.Second)

	// Every sample each agent captured is stored exactly once and in order.
	cutoff := time.Now().Add(-time.Second)
	for i := range n {
		f.checkSamples(t, i, cutoff)
	}

	// Telemetry of the simulated channels is visible.
	var tel resource.One[resource.SerialTelemetry]
	f.api.Do("GET", "/devices/"+f.devices[2].ID+"/serial/telemetry", nil, &tel)
	if tel.Data.At == nil || len(tel.Data.Channels) == 0 {
		t.Errorf("telemetry = %+v", tel.Data)
	}

	// Every session of every agent spoke the codec of its build.
	sessions := fleetproc.LogLines(t, f.relayLog(), "agent online")
	if len(sessions) < 3*n {
		t.Errorf("%d agent online lines in the relay log, want at least %d", len(sessions), 3*n)
	}
	for _, l := range sessions {
		if l["codec"] != codec {
			t.Errorf("relay log: agent online with codec %v, want %s: %v", l["codec"], codec, l)
		}
	}

	// A graceful stop of an agent: the link closes, the device goes OFFLINE.
	f.agents[2].Stop(t, 10*time.Second)
	f.waitStatus(2, "OFFLINE", 10*time.Second)
	f.relay.Stop(t, 30*time.Second)
}

// testConfig changes the configuration through the API and waits for the
// agent's log to show it received and applied it.
func (f *fleet) testConfig(t *testing.T, i int) {
	dev := f.devices[i]
	body := map[string]any{"kind": "rs485", "baudRate": 19200, "dataBits": 8, "parity": "even", "stopBits": 1, "mode": "modbus_rtu_master", "slaveId": 7}
	for _, step := range []struct {
		name, method, path string
		body               any
	}{
		{"PUT channel", "PUT", "/devices/" + dev.ID + "/serial/channels/rs485-1", body},
		{"PATCH serial", "PATCH", "/devices/" + dev.ID + "/serial", map[string]any{"mode": "both"}},
	} {
		before := len(fleetproc.LogLines(t, f.agentLog(i), "configuration received"))
		sent := time.Now()
		if code := f.api.Do(step.method, step.path, step.body, nil); code != 200 {
			t.Fatalf("%s: %d", step.name, code)
		}
		var got map[string]any
		fleetproc.Eventually(t, 10*time.Second, func() string {
			lines := fleetproc.LogLines(t, f.agentLog(i), "configuration received")
			if len(lines) <= before {
				return step.name + ": agent has not received a configuration"
			}
			got = lines[len(lines)-1]
			return ""
		})
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["time"]))
		if err != nil {
			t.Fatalf("agent log time %v: %v", got["time"], err)
		}
		lag := at.Sub(sent)
		t.Logf("%s reached the agent after %s (version %v)", step.name, lag.Round(time.Millisecond), got["version"])
		if lag > time.Second {
			t.Errorf("%s reached the agent after %s, over 1s", step.name, lag)
		}
	}
	// The agent applied the latest version and said so in an event.
	fleetproc.Eventually(t, 10*time.Second, func() string {
		evs := f.eventsOf(i, "serial.config_applied")
		if len(evs) == 0 || !strings.Contains(string(evs[0].Data), `"version":2`) {
			return fmt.Sprintf("config_applied events %v", evs)
		}
		return ""
	})
	var ser resource.One[resource.SerialState]
	f.api.Do("GET", "/devices/"+dev.ID+"/serial", nil, &ser)
	if ser.Data.Mode != "both" {
		t.Errorf("serial mode = %s", ser.Data.Mode)
	}
}

// checkSamples compares the samples agent i logged as captured before
// cutoff with those the relay stored.
func (f *fleet) checkSamples(t *testing.T, i int, cutoff time.Time) {
	t.Helper()
	var captured []int64
	for _, l := range fleetproc.LogLines(t, f.agentLog(i), "metric captured") {
		at, err := resource.ParseTime(fmt.Sprint(l["capturedAt"]))
		if err != nil {
			t.Fatalf("agent %d: capturedAt %v", i, l["capturedAt"])
		}
		if at.Before(cutoff) {
			captured = append(captured, at.UnixMilli())
		}
	}
	if len(captured) < 8 {
		t.Fatalf("agent %d captured only %d samples", i, len(captured))
	}
	if !slices.IsSorted(captured) {
		t.Errorf("agent %d captured samples out of order", i)
	}
	db, err := sqlite.Open(context.Background(), f.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stored []int64
	fleetproc.Eventually(t, 20*time.Second, func() string {
		stored = stored[:0]
		rows, err := db.R.Query(`SELECT captured_at FROM metrics WHERE device_id = ? AND captured_at < ? ORDER BY captured_at`, f.devices[i].ID, cutoff.UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var v int64
			rows.Scan(&v)
			stored = append(stored, v)
		}
		rows.Close()
		if missing := fleetproc.Minus(captured, stored); len(missing) > 0 {
			return fmt.Sprintf("agent %d: %d of %d captured samples not stored (first %s)", i, len(missing), len(captured), time.UnixMilli(missing[0]).UTC().Format(resource.TimeLayout))
		}
		return ""
	})
	// Exactly once: nothing stored that the agent did not capture, except a
	// sample spooled in the instant between its capture and its log line
	// when the agent was killed (at most one per kill).
	extra := fleetproc.Minus(stored, captured)
	kills := 0
	if i == 1 {
		kills = 1
	}
	if len(extra) > kills {
		t.Errorf("agent %d: %d stored samples the agent never logged", i, len(extra))
	}
	var dup int
	db.R.QueryRow(`SELECT COUNT(*) - COUNT(DISTINCT captured_at) FROM metrics WHERE device_id = ?`, f.devices[i].ID).Scan(&dup)
	if dup != 0 {
		t.Errorf("agent %d: %d duplicate samples", i, dup)
	}
	t.Logf("agent %d: %d samples captured and stored exactly once", i, len(captured))
}

package e2e_test

import (
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
)

// TestPointSamplesThroughARelayCrash is issue 26's kill -9 test: points
// configured through the public API on a device whose agent runs on the
// simulator (--hw sim: an rs485 counter moving every second, a slowly
// moving f32 temperature, the gpio inputs' levels), the relay killed with
// SIGKILL twice while the values change, restarted on the same SQLite
// file; then every sample the agent recorded (its debug log's "point
// sample recorded" lines) is returned exactly once, with its value, by
// GET /devices/{id}/points/{pointId}/samples.
func TestPointSamplesThroughARelayCrash(t *testing.T) {
	f := newFleet(t, 1, bins.agent)
	f.startAgent(0)
	f.waitStatus(0, "ONLINE", 20*time.Second)
	dev := f.devices[0]
	rs485 := map[string]any{"kind": "rs485", "baudRate": 19200, "dataBits": 8, "parity": "even", "stopBits": 1, "mode": "modbus_rtu_master", "slaveId": 7,
		"points": []map[string]any{
			{"name": "counter", "function": "holding", "register": 0, "type": "u32"},
			{"name": "boiler_temp", "function": "input", "register": 10, "type": "f32", "order": "CDAB", "unit": "°C"},
		}}
	if code := f.api.Do("PUT", "/devices/"+dev.ID+"/serial/channels/rs485-1", rs485, nil); code != 200 {
		t.Fatalf("PUT rs485-1 with points: %d", code)
	}
	points := []string{"rs485-1.counter", "rs485-1.boiler_temp", "gpio-1.level"}
	recorded := func(cutoff time.Time) map[string]map[int64]float64 {
		out := map[string]map[int64]float64{}
		for _, l := range fleetproc.LogLines(t, f.agentLog(0), "point sample recorded") {
			at, err := resource.ParseTime(fmt.Sprint(l["at"]))
			if err != nil {
				t.Fatalf("agent log: at %v", l["at"])
			}
			id := fmt.Sprint(l["point"])
			if !at.Before(cutoff) || l["error"] != "" {
				continue
			}
			if out[id] == nil {
				out[id] = map[int64]float64{}
			}
			v, _ := l["value"].(float64)
			out[id][at.UnixMilli()] = v
		}
		return out
	}
	fleetproc.Eventually(t, 20*time.Second, func() string {
		got := recorded(time.Now())
		for _, p := range points {
			if len(got[p]) < 2 {
				return fmt.Sprintf("%s: %d samples recorded", p, len(got[p]))
			}
		}
		return ""
	})
	time.Sleep(3 * time.Second)

	// kill -9 while the values change; the agent spools; a restart on the
	// same file, killed again in the middle of the backlog; a restart.
	f.crashRelayTwice(4*time.Second, 2*time.Second)
	f.waitStatus(0, "ONLINE", 60*time.Second)
	time.Sleep(2 * time.Second)

	cutoff := time.Now().Add(-time.Second)
	want := recorded(cutoff)
	for _, p := range points {
		w := want[p]
		if len(w) < 10 {
			t.Fatalf("%s: the agent recorded only %d samples", p, len(w))
		}
		from := time.UnixMilli(slices.Min(mapsKeys(w))).UTC()
		q := url.Values{"from": {resource.FormatTime(from)}, "to": {resource.FormatTime(cutoff)}, "limit": {"10000"}}
		var got resource.PointSamples
		fleetproc.Eventually(t, 20*time.Second, func() string {
			got = resource.PointSamples{}
			if code := f.api.Do("GET", "/devices/"+dev.ID+"/points/"+p+"/samples?"+q.Encode(), nil, &got); code != 200 {
				return fmt.Sprintf("GET %s samples: %d", p, code)
			}
			if len(got.Data) < len(w) {
				return fmt.Sprintf("%s: %d of %d recorded samples stored", p, len(got.Data), len(w))
			}
			return ""
		})
		seen := map[int64]bool{}
		for _, s := range got.Data {
			ms := s.At.UnixMilli()
			if seen[ms] {
				t.Errorf("%s: the sample at %s is stored twice", p, resource.FormatTime(s.At.Time))
			}
			seen[ms] = true
			v, recorded := w[ms]
			if !recorded {
				t.Errorf("%s: a sample at %s the agent never recorded", p, resource.FormatTime(s.At.Time))
				continue
			}
			if b, ok := s.Value.(bool); ok { // a bool point reads as a JSON boolean
				if b != (v == 1) {
					t.Errorf("%s at %s: %v, the agent recorded %v", p, resource.FormatTime(s.At.Time), s.Value, v)
				}
			} else if s.Value != v {
				t.Errorf("%s at %s: %v, the agent recorded %v", p, resource.FormatTime(s.At.Time), s.Value, v)
			}
		}
		for ms := range w {
			if !seen[ms] {
				t.Errorf("%s: the sample recorded at %s is missing", p, resource.FormatTime(time.UnixMilli(ms)))
			}
		}
		t.Logf("%s: %d samples recorded by the agent, each stored once", p, len(w))
	}

	// The points list shows each point with a recent good value.
	var list resource.List[resource.Point]
	if code := f.api.Do("GET", "/devices/"+dev.ID+"/points", nil, &list); code != 200 {
		t.Fatalf("GET points: %d", code)
	}
	for _, p := range list.Data {
		if slices.Contains(points, p.ID) && (p.Quality != "good" || p.Value == nil || p.At == nil) {
			t.Errorf("point %+v", p)
		}
	}
	f.relay.Stop(t, 30*time.Second)
}

// crashRelayTwice kills the relay with SIGKILL, restarts it on the same
// database after down, kills it again right after the first agent is back
// (in the middle of the backlog flush) and restarts it after down2.
func (f *fleet) crashRelayTwice(down, down2 time.Duration) {
	f.t.Helper()
	f.relay.Kill()
	time.Sleep(down) // the agents spool meanwhile
	online := len(fleetproc.LogLines(f.t, f.relayLog(), "agent online"))
	f.startRelay()
	fleetproc.Eventually(f.t, 30*time.Second, func() string {
		if len(fleetproc.LogLines(f.t, f.relayLog(), "agent online")) <= online {
			return "no agent reconnected"
		}
		return ""
	})
	f.relay.Kill()
	time.Sleep(down2)
	f.startRelay()
}

func mapsKeys(m map[int64]float64) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

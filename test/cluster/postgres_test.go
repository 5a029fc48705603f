package cluster_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/pgtest"
)

// TestPostgresCluster is the relay cluster end to end, as issue 13 asks
// for it: PostgreSQL, three relays started together on its empty database,
// the shipped HAProxy configuration in front, 30 simulated agents that
// know only HAProxy's address, an HTTPS webhook receiver checking every
// signature, and an API client polling through HAProxy all along. Under
// that load one relay is killed with SIGKILL, then another together with
// an agent whose socket it held. What a customer would check is asserted:
// every agent ONLINE again through the balancer; every metric sample
// stored exactly once and in order; every webhook delivery in the shared
// outbox delivered under one id, in order per device; exactly one
// device_offline alert and one alert.opened webhook for the killed
// agent's outage, and device_offline alerts only for outages (three
// heartbeat intervals without one stored), one per outage, all resolved
// once the agents are back (checkOfflineAlerts); a configuration
// change made through relay 1 reaching an agent connected to relay 3
// within a second; an API key revoked refused by all three relays at once.
func TestPostgresCluster(t *testing.T) {
	const (
		n          = 30
		forwarding = 5 // devices forwarding their signal changes to the receiver
	)
	dir := t.TempDir()
	env := []string{"FLEET_DB=" + pg.Get(t).CreateDB(t)} // the password stays out of ps
	rc := startReceiver(t)

	// Three relays start at once on an empty database: the migrations run
	// once, under an advisory lock, and every relay becomes ready.
	var relays []*relay
	var addrs []string
	for i := range 3 {
		r := newRelay(t, dir, fmt.Sprintf("relay%d", i+1), env, "--webhook-ca", rc.CAFile, "--webhook-allow-private")
		relays = append(relays, r)
		addrs = append(addrs, r.Addr)
	}
	for _, r := range relays {
		r.waitListening(t)
		if code := readyz(r.URL()); code != 200 {
			t.Fatalf("%s /readyz = %d after it started on the empty database", r.Name, code)
		}
	}

	tenant := fleetproc.Provision(t, bins.Relay, env, "Cluster", n)
	rc.setSecret(tenant.WebhookSecret)
	fleetproc.Admin(t, bins.Relay, env, nil, "org", "set-alert-webhook", "--org", tenant.OrgID, "--url", rc.URL+"/alerts")
	direct := make([]*fleetproc.API, len(relays)) // each relay's own API, bypassing HAProxy
	for i, r := range relays {
		direct[i] = fleetproc.NewAPI(t, r.URL(), tenant.Key)
		if s := direct[i].Status(tenant.Devices[n-1].ID); s != "PROVISIONING" {
			t.Fatalf("%s: a device the admin CLI just added is %q", r.Name, s)
		}
	}

	hp, lb := balance(t, addrs, 20*time.Second)
	api := fleetproc.NewAPI(t, lb, tenant.Key)

	start := time.Now().Add(-time.Second)
	agents, ids := startAgents(t, dir, tenant.Devices, lb)
	api.WaitStatus(ids, "ONLINE", 90*time.Second)
	held := holders(t, relays)
	for i, r := range relays {
		if len(held.on(i)) == 0 {
			t.Fatalf("%s holds no agent: websockets not balanced (%v)", r.Name, held)
		}
	}

	// Signal forwarding: Modbus polling on a few devices (the simulated
	// slaves' registers move every second), their changes to the receiver.
	for _, d := range tenant.Devices[:forwarding] {
		if code := api.Do("PUT", "/devices/"+d.ID+"/serial/channels/rs485-1", modbusPolling(7), nil); code != 200 {
			t.Fatalf("PUT rs485-1: %d", code)
		}
		if code := api.Do("PATCH", "/devices/"+d.ID+"/serial", map[string]any{"webhookUrl": rc.URL + "/signals", "webhookEnabled": true}, nil); code != 200 {
			t.Fatalf("PATCH serial: %d", code)
		}
	}

	t.Run("configuration through relay 1 reaches an agent on relay 3 within a second", func(t *testing.T) {
		on3 := held.on(2)
		a := agents[slices.Index(ids, on3[0])]
		for _, step := range []struct {
			via          int
			method, path string
			body         any
		}{
			{0, "PUT", "/devices/" + a.dev.ID + "/serial/channels/rs485-2", modbusPolling(3)},
			{1, "PATCH", "/devices/" + a.dev.ID + "/serial", map[string]any{"mode": "both"}},
		} {
			lag := configLag(t, a, func() int { return direct[step.via].Do(step.method, step.path, step.body, nil) })
			t.Logf("%s %s through relay%d reached %s on relay3 after %s", step.method, step.path, step.via+1, a.Name, lag.Round(time.Millisecond))
			// The bound is the product's requirement (issue 13: within 1 s
			// wherever the agent is connected), not a guess at this
			// machine's speed: the push is a NOTIFY and one read, tens of
			// milliseconds even on the loaded test machine, far inside it.
			if lag > time.Second {
				t.Errorf("%s through relay%d reached the agent on relay3 after %s, over 1s", step.method, step.via+1, lag)
			}
		}
	})

	t.Run("forwarding switched through another relay takes effect within a second", func(t *testing.T) {
		f := tenant.Devices[0]
		via := direct[(held[f.ID].relay+1)%3]
		patch := func(on bool) time.Time {
			if code := via.Do("PATCH", "/devices/"+f.ID+"/serial", map[string]any{"webhookEnabled": on}, nil); code != 200 {
				t.Fatalf("PATCH serial: %d", code)
			}
			return time.Now()
		}
		signals := func(after time.Time) int {
			hooks, _ := rc.got()
			n := 0
			for _, h := range hooks {
				if h.Event == "serial.signal" && h.Device == f.ID && h.At.After(after) {
					n++
				}
			}
			return n
		}
		// The bound is the product's (a PATCH /serial through any relay
		// applies within 1 s wherever the agent is), not this machine's.
		off := patch(false)
		time.Sleep(4 * time.Second)
		if n := signals(off.Add(time.Second)); n > 0 {
			t.Errorf("%d signals of %s from heartbeats over a second after forwarding was switched off through another relay", n, f.ID)
		}
		on := patch(true)
		fleetproc.Eventually(t, 10*time.Second, func() string {
			if signals(on) == 0 {
				return "no signal since forwarding was switched on again through another relay"
			}
			return ""
		})
	})

	t.Run("a revoked API key is refused by every relay at its next request", func(t *testing.T) {
		var k struct{ ID, Key string }
		fleetproc.Admin(t, bins.Relay, env, &k, "key", "create", "--org", tenant.OrgID, "--name", "to-revoke", "--scopes", "devices:read")
		for _, r := range relays {
			if code := fleetproc.NewAPI(t, r.URL(), k.Key).Do("GET", "/devices?limit=1", nil, nil); code != 200 {
				t.Fatalf("%s: new key answered %d", r.Name, code)
			}
		}
		fleetproc.Admin(t, bins.Relay, env, nil, "key", "revoke", "--id", k.ID)
		for _, r := range relays { // no wait, no retry: the very next request
			if code := fleetproc.NewAPI(t, r.URL(), k.Key).Do("GET", "/devices?limit=1", nil, nil); code != 401 {
				t.Errorf("%s answered %d to the revoked key, want 401", r.Name, code)
			}
		}
	})

	// An API client polling through HAProxy all along.
	poll := startPoller(t, lb, tenant.Key, 50*time.Millisecond)
	time.Sleep(5 * time.Second)

	// kill -9 of relay1 under load: HAProxy takes it out, its agents come
	// back through HAProxy to relay2 and relay3, and stay ONLINE.
	moved := held.on(0)
	kills := []time.Time{time.Now()}
	relays[0].Kill()
	waitStates(t, hp, map[string]string{"relay1": "DOWN"}, 10*time.Second)
	waitMoved(t, relays, moved, 0, 90*time.Second)
	api.WaitStatus(ids, "ONLINE", 60*time.Second)
	time.Sleep(3 * time.Second)

	// kill -9 of an agent, and right after of relay2, which held its
	// socket: relay3 alone finds the device silent, takes it OFFLINE and
	// opens device_offline for that outage, once. relay2's other agents
	// move to relay3.
	held = holders(t, relays)
	on2 := held.on(1)
	if len(on2) < 2 {
		t.Fatalf("relay2 holds %d agents, want at least 2", len(on2))
	}
	victim := agents[slices.Index(ids, on2[0])]
	victim.Kill()
	killed := time.Now()
	kills = append(kills, killed)
	relays[1].Kill()
	waitStates(t, hp, map[string]string{"relay2": "DOWN"}, 10*time.Second)
	others := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == victim.dev.ID })
	waitMoved(t, relays, on2[1:], 1, 90*time.Second)
	api.WaitStatus(others, "ONLINE", 60*time.Second)
	api.WaitStatus([]string{victim.dev.ID}, "OFFLINE", 90*time.Second)
	// The kill's outage is the one whose alert opened after it: on this
	// loaded machine an agent may have been silent for three heartbeat
	// intervals earlier on, an outage of its own with an alert of its own
	// (checkOfflineAlerts).
	outage := func() []offlineAlert {
		return slices.DeleteFunc(offlineAlerts(t, api, victim.dev.ID), func(a offlineAlert) bool { return a.CreatedAt.Before(killed) })
	}
	fleetproc.Eventually(t, 90*time.Second, func() string {
		got := outage()
		if len(got) == 0 {
			return "no device_offline alert for the killed agent"
		}
		if len(rc.opened(got[0].ID)) == 0 {
			return "no alert.opened webhook for the killed agent's alert"
		}
		return ""
	})
	time.Sleep(12 * time.Second) // two more sweeps of the alert engine (every 5 s): nothing opens twice
	got := outage()
	if len(got) != 1 {
		t.Errorf("%d device_offline alerts for the killed agent's outage, want 1: %+v", len(got), got)
	}
	for _, a := range got {
		if !a.LastSeen.Before(killed) {
			t.Errorf("the killed agent's alert %s names a last heartbeat at %s, after the kill at %s", a.ID, resource.FormatTime(a.LastSeen), resource.FormatTime(killed))
		}
		if h := rc.opened(a.ID); len(h) != 1 {
			t.Errorf("%d alert.opened webhooks (distinct delivery ids) for the killed agent's alert %s, want 1: %+v", len(h), a.ID, h)
		}
	}

	// The agent comes back: ONLINE, and no device_offline alert is left
	// open, its own or another device's.
	victim.restart(t)
	api.WaitStatus(ids, "ONLINE", 60*time.Second)
	fleetproc.Eventually(t, 30*time.Second, func() string {
		for _, id := range ids {
			for _, a := range offlineAlerts(t, api, id) {
				if a.State != resource.AlertResolved {
					return fmt.Sprintf("device %s: device_offline alert %s still %s with every agent back", id, a.ID, a.State)
				}
			}
		}
		return ""
	})
	time.Sleep(3 * time.Second)
	cutoff := time.Now().Add(-time.Second)
	for _, d := range tenant.Devices[:forwarding] { // the outbox stops growing: its whole content is compared below
		if code := api.Do("PATCH", "/devices/"+d.ID+"/serial", map[string]any{"webhookEnabled": false}, nil); code != 200 {
			t.Fatalf("PATCH serial: %d", code)
		}
	}
	poll.check(t, "while two relays were killed")

	// Every sample each agent captured is stored exactly once and in order
	// (the killed agent may have spooled one sample it never logged).
	for _, a := range agents {
		spare := 0
		if a == victim {
			spare = 1
		}
		got := fleetproc.CheckSamples(t, api, a.dev.ID, a.Log, start, cutoff, spare)
		if got < 5 {
			t.Errorf("%s captured only %d samples", a.Name, got)
		}
	}

	checkDeliveries(t, env, tenant.OrgID, rc, kills)
	checkOfflineAlerts(t, api, rc, ids, victim.dev.ID)
}

// offlineAlert is a device_offline alert with its payload read: the last
// heartbeat stored before the outage and the device's heartbeat interval.
type offlineAlert struct {
	resource.Alert
	LastSeen  time.Time
	Heartbeat time.Duration
}

// offlineAlerts returns a device's device_offline alerts, in every state.
func offlineAlerts(t *testing.T, api *fleetproc.API, deviceID string) []offlineAlert {
	t.Helper()
	var out []offlineAlert
	for _, a := range alertsOf(t, api, deviceID, "device_offline") {
		var p struct {
			LastSeen            string `json:"lastSeen"`
			HeartbeatIntervalMs int64  `json:"heartbeatIntervalMs"`
		}
		if err := json.Unmarshal(a.Payload, &p); err != nil {
			t.Fatalf("device_offline alert %s: payload %s: %v", a.ID, a.Payload, err)
		}
		last, err := resource.ParseTime(p.LastSeen)
		if err != nil {
			t.Fatalf("device_offline alert %s: lastSeen: %v", a.ID, err)
		}
		out = append(out, offlineAlert{a, last, time.Duration(p.HeartbeatIntervalMs) * time.Millisecond})
	}
	return out
}

// checkOfflineAlerts checks every device_offline alert of the devices ids
// as the rule reads (docs/alerts.md): an alert opens only once its device
// has had no heartbeat stored for three intervals, at most one per outage
// (an outage ends with a stored heartbeat, so two alerts naming the same
// last heartbeat are two for one outage), none with two alert.opened
// webhooks (that they resolve when the agents are back is checked when
// they are). Devices whose relay died but whose agent reconnected within
// three intervals have none; on a loaded machine an agent held up that
// long has an outage of its own, which is logged, not failed: how fast
// agents reconnect is this machine's speed.
func checkOfflineAlerts(t *testing.T, api *fleetproc.API, rc *receiver, ids []string, killed string) {
	t.Helper()
	var own []string
	for _, id := range ids {
		outages := map[time.Time]string{}
		for _, a := range offlineAlerts(t, api, id) {
			if prev, dup := outages[a.LastSeen]; dup {
				t.Errorf("device %s: device_offline alerts %s and %s for one outage (last heartbeat %s)", id, prev, a.ID, resource.FormatTime(a.LastSeen))
			}
			outages[a.LastSeen] = a.ID
			if silent := a.CreatedAt.Sub(a.LastSeen); silent < 3*a.Heartbeat {
				t.Errorf("device %s: device_offline alert %s opened %s after the last heartbeat, under three intervals of %s", id, a.ID, silent, a.Heartbeat)
			}
			if h := rc.opened(a.ID); len(h) > 1 {
				t.Errorf("device %s: %d alert.opened webhooks (distinct delivery ids) for alert %s, want one", id, len(h), a.ID)
			}
			if id != killed {
				own = append(own, fmt.Sprintf("%s (last heartbeat %s, alert %s)", id, resource.FormatTime(a.LastSeen), a.State))
			}
		}
	}
	if len(own) > 0 {
		t.Logf("%d device_offline alerts of agents that were not killed, each an outage of three heartbeat intervals on this loaded machine: %s", len(own), strings.Join(own, ", "))
	}
}

// checkDeliveries compares the shared outbox, as the admin CLI lists it,
// with what the receiver got: every delivery ended delivered, each under
// one id that the receiver saw (a takeover by another relay repeats the
// id, never makes a new one), signal changes in order per device and none
// delivered twice under two ids. A delivery reaches the receiver twice only
// when the relay attempting it was killed (at one of kills) before it
// could record the attempt: live relays never send the same delivery both.
func checkDeliveries(t *testing.T, env []string, orgID string, rc *receiver, kills []time.Time) {
	t.Helper()
	var outbox []cloud.DeliveryInfo
	// A delivery whose relay died mid-attempt waits for its lease (at most
	// 30 s) before another relay takes it.
	fleetproc.Eventually(t, 120*time.Second, func() string {
		fleetproc.Admin(t, bins.Relay, env, &outbox, "webhook", "deliveries", "--org", orgID, "--limit", "1000")
		for _, d := range outbox {
			if d.State != "delivered" {
				return fmt.Sprintf("delivery %s (%s) is %s: %+v", d.ID, d.Event, d.State, d.Attempts)
			}
		}
		return ""
	})
	if len(outbox) == 1000 {
		t.Fatal("the outbox holds 1000 deliveries or more: the test compares it whole and needs fewer")
	}
	hooks, bad := rc.got()
	for _, b := range bad {
		t.Error("receiver:", b)
	}
	first, count := firsts(hooks)
	inOutbox := map[string]cloud.DeliveryInfo{}
	signals := 0
	for _, d := range outbox {
		inOutbox[d.ID] = d
		if count[d.ID] == 0 {
			t.Errorf("delivery %s (%s, device %s) is recorded delivered but never reached the receiver", d.ID, d.Event, d.DeviceID)
		}
		if d.Event == "serial.signal" {
			signals++
		}
	}
	retried := 0
	for _, h := range first {
		if _, ok := inOutbox[h.ID]; !ok {
			t.Errorf("the receiver got delivery %s (%s) that the outbox does not hold", h.ID, h.Event)
		}
		if count[h.ID] == 1 {
			continue
		}
		retried++
		cut := slices.ContainsFunc(kills, func(k time.Time) bool { return !h.Received.After(k) && k.Sub(h.Received) < 2*time.Second })
		if !cut {
			var at []string
			for _, x := range hooks {
				if x.ID == h.ID {
					at = append(at, x.Received.Format("15:04:05.000")+" attempt "+x.Attempt)
				}
			}
			t.Errorf("delivery %s (%s) reached the receiver %d times (%s) though no relay was killed during its first attempt", h.ID, h.Event, count[h.ID], strings.Join(at, ", "))
		}
	}
	if signals < 50 {
		t.Errorf("only %d signal deliveries: the forwarding devices' changes did not flow", signals)
	}
	// Per device, the signal changes arrive in the order they happened,
	// each once.
	last := map[string]time.Time{}
	seen := map[string]string{}
	for _, h := range first {
		if h.Event != "serial.signal" {
			continue
		}
		if h.At.Before(last[h.Device]) {
			t.Errorf("device %s: signal change of %s arrived after one of %s", h.Device, h.At.Format(resource.TimeLayout), last[h.Device].Format(resource.TimeLayout))
		}
		last[h.Device] = h.At
		k := h.Device + " " + h.At.Format(time.RFC3339Nano)
		if prev, dup := seen[k]; dup {
			t.Errorf("device %s: the signal change of %s was delivered under two ids, %s and %s", h.Device, h.At.Format(resource.TimeLayout), prev, h.ID)
		}
		seen[k] = h.ID
	}
	t.Logf("%d deliveries in the shared outbox (%d signal changes), all delivered; %d reached the receiver more than once under their one id", len(outbox), signals, retried)
}

// modbusPolling is a channel configuration polling three holding registers
// of a simulated Modbus slave every second.
func modbusPolling(slave int) map[string]any {
	return map[string]any{"kind": "rs485", "baudRate": 19200, "dataBits": 8, "parity": "even", "stopBits": 1,
		"mode": "modbus_rtu_master", "slaveId": slave,
		"tx":   map[string]any{"enabled": false, "intervalMs": 0, "register": 0, "value": 0},
		"poll": map[string]any{"enabled": true, "intervalMs": 1000, "register": 0, "count": 3, "function": "holding"}}
}

// configLag makes a configuration change with do (which returns the API's
// status) and returns how long after the request went out the agent logged
// "configuration received".
func configLag(t *testing.T, a *agent, do func() int) time.Duration {
	t.Helper()
	before := len(fleetproc.LogLines(t, a.Log, "configuration received"))
	sent := time.Now()
	if code := do(); code != 200 {
		t.Fatalf("configuration change answered %d", code)
	}
	var got map[string]any
	fleetproc.Eventually(t, 10*time.Second, func() string {
		lines := fleetproc.LogLines(t, a.Log, "configuration received")
		if len(lines) <= before {
			return a.Name + " has not received the configuration"
		}
		got = lines[len(lines)-1]
		return ""
	})
	return logTime(t, got).Sub(sent)
}

// logTime is a JSON log line's time.
func logTime(t *testing.T, line map[string]any) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(line["time"]))
	if err != nil {
		t.Fatalf("log line time %v: %v", line["time"], err)
	}
	return at
}

// holding is where each device's agent is connected: the relay (index)
// whose log has the device's latest "agent online" line, and when.
type holding map[string]struct {
	relay int
	at    time.Time
}

// holders reads the relays' logs.
func holders(t *testing.T, relays []*relay) holding {
	t.Helper()
	h := holding{}
	for i, r := range relays {
		for _, l := range fleetproc.LogLines(t, r.Log, "agent online") {
			id, at := fmt.Sprint(l["device"]), logTime(t, l)
			if cur, ok := h[id]; !ok || at.After(cur.at) {
				h[id] = struct {
					relay int
					at    time.Time
				}{i, at}
			}
		}
	}
	return h
}

// on returns the devices held by relay i, sorted.
func (h holding) on(i int) []string {
	var out []string
	for id, x := range h {
		if x.relay == i {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// waitMoved waits until every device in ids is held by a relay other than
// gone (its agent reconnected elsewhere through HAProxy).
func waitMoved(t *testing.T, relays []*relay, ids []string, gone int, d time.Duration) {
	t.Helper()
	fleetproc.Eventually(t, d, func() string {
		h := holders(t, relays)
		var left []string
		for _, id := range ids {
			if h[id].relay == gone {
				left = append(left, id)
			}
		}
		if len(left) > 0 {
			return fmt.Sprintf("%d agents of the killed %s not back on another relay: %s", len(left), relays[gone].Name, strings.Join(left, " "))
		}
		return ""
	})
}

// alertsOf returns a device's alerts of rule, in every state.
func alertsOf(t *testing.T, api *fleetproc.API, deviceID, rule string) []resource.Alert {
	t.Helper()
	var out []resource.Alert
	for _, state := range []string{"ACTIVE", "ACKNOWLEDGED", "RESOLVED"} {
		var l resource.List[resource.Alert]
		if code := api.Do("GET", "/alerts?limit=100&state="+state+"&deviceId="+deviceID, nil, &l); code != 200 {
			t.Fatalf("GET alerts: %d", code)
		}
		for _, a := range l.Data {
			var p struct{ Rule string }
			if json.Unmarshal(a.Payload, &p) == nil && p.Rule == rule {
				out = append(out, a)
			}
		}
	}
	return out
}

// TestPostgresGoesAway stops the relays' PostgreSQL for real (pg_ctl stop,
// connections cut) under two relays and an agent, then starts it again on
// the same port: while it is away both relays' /readyz answer 503 "store
// unreachable" (a balancer takes them out) and the agent keeps its samples
// spooled; once it is back, /readyz answers 200 again by itself, the agent
// is ONLINE and every sample it captured, before, during and after the
// outage, is stored exactly once.
func TestPostgresGoesAway(t *testing.T) {
	srv, err := pgtest.Start() // a server of its own: this test stops it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	env := []string{"FLEET_DB=" + srv.CreateDB(t)}
	tenant := fleetproc.Provision(t, bins.Relay, env, "Outage", 1)
	a := startRelay(t, dir, "relay-a", env)
	b := startRelay(t, dir, "relay-b", env)
	api := fleetproc.NewAPI(t, a.URL(), tenant.Key)
	start := time.Now().Add(-time.Second)
	ag := startAgent(t, dir, 0, tenant.Devices[0], a.URL(), b.URL())
	api.WaitStatus([]string{ag.dev.ID}, "ONLINE", 30*time.Second)
	time.Sleep(3 * time.Second)

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*relay{a, b} {
		fleetproc.Eventually(t, 10*time.Second, func() string {
			if code, body := readyzBody(r.URL()); code != 503 || !strings.Contains(body, `"reason":"store unreachable"`) {
				return fmt.Sprintf("%s /readyz with PostgreSQL stopped: %d %s", r.Name, code, body)
			}
			return ""
		})
	}
	time.Sleep(5 * time.Second) // the agent captures samples meanwhile
	for _, r := range []*relay{a, b} {
		if code, body := readyzBody(r.URL()); code != 503 {
			t.Errorf("%s /readyz while PostgreSQL is still stopped: %d %s", r.Name, code, body)
		}
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*relay{a, b} {
		fleetproc.Eventually(t, 30*time.Second, func() string {
			if code, body := readyzBody(r.URL()); code != 200 {
				return fmt.Sprintf("%s /readyz after PostgreSQL returned: %d %s", r.Name, code, body)
			}
			return ""
		})
	}
	api.WaitStatus([]string{ag.dev.ID}, "ONLINE", 60*time.Second)
	time.Sleep(3 * time.Second)
	got := fleetproc.CheckSamples(t, api, ag.dev.ID, ag.Log, start, time.Now().Add(-time.Second), 0)
	if got < 10 {
		t.Errorf("the agent captured only %d samples", got)
	}
	t.Logf("%d samples captured before, during and after the outage, each stored once", got)
}

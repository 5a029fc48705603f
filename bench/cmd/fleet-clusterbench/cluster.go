package main

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fleet/fleet/bench/apibench"
	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/bench/benchstore"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/haproxytest"
	"github.com/fleet/fleet/test/rig/pgtest"
)

// Targets (DESIGN.md, performance targets: the cluster).
const (
	targetHBRate     = 10000                  // heartbeats stored per second across the relays
	targetHBP99      = 250 * time.Millisecond // heartbeat to stored
	targetAPIRate    = 10000                  // GET /devices through HAProxy, req/s
	targetAPIP99     = 10 * time.Millisecond
	targetDeliveries = 2000 // webhook deliveries per second from the shared outbox
	targetRecovery   = 15 * time.Second
)

// bench is one run: its configuration, its temporary directory and the
// PostgreSQL server.
type bench struct {
	config
	dir   string
	pg    *pgtest.Server
	pgPID int // the postmaster, for the CPU notes
}

func run(ctx context.Context, c config) error {
	dir, err := os.MkdirTemp("", "fleet-clusterbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := pgtest.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	b := &bench{config: c, dir: dir, pg: srv}
	if b.pgPID, err = pidOf("bin/postgres -D", fmt.Sprintf(" -p %d ", srv.Port)); err != nil {
		return err
	}
	fmt.Printf("cluster benchmark: %d CPUs, load average %s at the start (other work on this machine shares them)\n", runtime.NumCPU(), loadAvg())

	// One organization, prepared once through the store contract and
	// copied (CREATE DATABASE ... TEMPLATE) for each run on PostgreSQL.
	tmplURL, _, err := srv.NewDatabase(ctx, "")
	if err != nil {
		return err
	}
	pg, err := b.prepare(ctx, "PostgreSQL", "tokens-pg", func() (cloud.Store, error) { return postgres.Open(ctx, tmplURL) })
	if err != nil {
		return err
	}
	p, _ := url.Parse(tmplURL)
	tmpl := strings.TrimPrefix(p.Path, "/")

	db, _, err := srv.NewDatabase(ctx, tmpl)
	if err != nil {
		return err
	}
	if err := b.cluster(ctx, db, pg.ten, pg.urls, pg.tokens); err != nil {
		return err
	}
	if b.onlyPoints {
		return nil
	}

	if db, _, err = srv.NewDatabase(ctx, tmpl); err != nil {
		return err
	}
	onPG, err := b.single(ctx, "relay-pg", db, pg.ten.Key, pg.urls, pg.tokens)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "single.db")
	lite, err := b.prepare(ctx, "SQLite", "tokens-sqlite", func() (cloud.Store, error) { return sqlite.Open(ctx, path) })
	if err != nil {
		return err
	}
	onSQLite, err := b.single(ctx, "relay-sqlite", path, lite.ten.Key, lite.urls, lite.tokens)
	if err != nil {
		return err
	}
	if err := record(b.singleRows(onPG, onSQLite)...); err != nil {
		return err
	}
	fmt.Printf("load average %s at the end\n", loadAvg())
	return nil
}

// prepared is the benchmark's organization in one store: the tenant, the
// GET /devices paths of the API's clients (listURLs), and the file of the
// agents' tokens.
type prepared struct {
	ten    benchstore.Tenant
	urls   []string
	tokens string
}

// prepare opens a store (kind, for the output), fills it with the
// benchmark's organization through the store contract, closes it and
// writes the agents' tokens to the file tokensName.
func (b *bench) prepare(ctx context.Context, kind, tokensName string, open func() (cloud.Store, error)) (prepared, error) {
	t0 := time.Now()
	st, err := open()
	if err != nil {
		return prepared{}, err
	}
	defer st.Close()
	ten, err := benchstore.Provision(ctx, st, "Bench", b.devices)
	if err != nil {
		return prepared{}, err
	}
	urls, err := listURLs(ctx, st, ten.Org)
	if err != nil {
		return prepared{}, err
	}
	fmt.Printf("prepared %d devices in %s through the store contract in %s\n", b.devices, kind, time.Since(t0).Round(time.Second))
	tokens, err := writeTokens(b.dir, tokensName, ten.Tokens[:b.agents])
	return prepared{ten, urls, tokens}, err
}

// record prints rows, each beside its target, and records them for the
// `make bench` report at once (a later step that fails leaves them).
func record(rows ...benchreport.Row) error {
	for _, r := range rows {
		mark := ""
		if res, _ := r.Evaluate(); res != benchreport.Info {
			mark = " " + string(res)
		}
		target := ""
		if r.Target != nil {
			target = " | " + benchreport.FormatTarget(r.Target, r.Unit)
		}
		fmt.Printf("  %-72s %16s%s%s  %s\n", r.Figure, benchreport.FormatValue(r.Measured, r.Unit), target, mark, r.Error)
	}
	return benchreport.Record(rows...)
}

// cluster runs steps 1 to 4 on db, a copy of the prepared database.
func (b *bench) cluster(ctx context.Context, db string, ten benchstore.Tenant, urls []string, tokens string) error {
	rc, err := startReceiver(b.dir)
	if err != nil {
		return err
	}
	defer rc.srv.Close()
	var relays []*relay
	defer func() {
		for _, r := range relays {
			r.Kill()
		}
	}()
	var addrs []string
	for i := range 3 {
		r, err := startRelay(b.relayBin, b.dir, fmt.Sprintf("relay%d", i+1), db, b.clusterEnv(), "--webhook-ca", rc.caFile, "--webhook-allow-private",
			"--trusted-proxies", "127.0.0.1") // HAProxy, as docs/cluster.md has it
		if err != nil {
			return err
		}
		relays = append(relays, r)
		addrs = append(addrs, r.addr)
	}
	hpDir := filepath.Join(b.dir, "haproxy")
	if err := os.MkdirAll(hpDir, 0o755); err != nil {
		return err
	}
	hp, err := haproxytest.Run(b.haproxyCfg, addrs, hpDir)
	if err != nil {
		return err
	}
	defer hp.Stop()
	if err := waitUp(hp, 30*time.Second); err != nil {
		return err
	}
	var sw *swarm
	defer func() {
		if sw != nil {
			sw.Kill()
		}
	}()
	roots := func() map[int]string {
		m := b.watched(sw)
		m[hp.Pid()] = groupHAProxy
		for _, r := range relays {
			if !r.Exited() {
				m[r.Pid()] = groupRelays
			}
		}
		return m
	}
	cond := fmt.Sprintf("3 relays on PostgreSQL behind HAProxy (the shipped configuration), PostgreSQL and the load generators on %d CPUs shared with other work; %s", runtime.NumCPU(), b.procsNote())
	if b.onlyPoints {
		return b.pointsStep(hp, ten.Tokens, &sw, roots, cond)
	}

	// 1. GET /devices through HAProxy.
	fmt.Println("GET /devices through HAProxy ...")
	c0 := cpuNow(roots())
	api := apibench.Load(ctx, hp.Addr, urls, ten.Key, b.clients, time.Second, b.apiWindow)
	apiNotes := fmt.Sprintf("%s devices, %d clients, %v measured, p50 %.2f ms; %s; %s", num(float64(b.devices), ""), b.clients, b.apiWindow, ms(api.P50), cond, cpuNow(roots()).since(c0))
	if err := record(
		benchreport.Row{Area: "cluster", Figure: "GET /devices (limit 25) through HAProxy, throughput", Unit: "req/s", Measured: api.RPS(),
			Target: &benchreport.Target{Op: benchreport.AtLeast, Value: targetAPIRate}, Notes: apiNotes, Error: apiError(api)},
		benchreport.Row{Area: "cluster", Figure: "GET /devices (limit 25) through HAProxy, p99 latency", Unit: "ms", Measured: ms(api.P99),
			Target: &benchreport.Target{Op: benchreport.Below, Value: ms(targetAPIP99)}, Notes: apiNotes, Error: apiError(api)},
	); err != nil {
		return err
	}

	// 2. Heartbeats through HAProxy.
	fmt.Printf("%d agents through HAProxy, offering %.0f heartbeats/s ...\n", b.agents, b.rate)
	if sw, err = startSwarm(b.loadgenBin, wsURL(hp.Addr), tokens, b.rate); err != nil {
		return err
	}
	w, err := b.window(sw, roots, relays...)
	if err != nil {
		return err
	}
	hbRows := []benchreport.Row{
		{Area: "cluster", Figure: "heartbeats stored per second across 3 relays (agents through HAProxy)", Unit: "heartbeats/s", Measured: w.rate,
			Target: &benchreport.Target{Op: benchreport.AtLeast, Value: targetHBRate},
			Notes: fmt.Sprintf("offered %s (%s agents, %s sent), %v measured after %v of warm-up (%s); relays' read-to-commit p99 %s; %s; %s",
				num(b.rate, "/s"), num(float64(b.agents), ""), num(w.sentRate, "/s"), b.hbWindow, b.warmup, w.caughtUp, num(ms(w.relayP99), "ms"), cond, w.cpu)},
		{Area: "cluster", Figure: "heartbeat-to-stored p99 across 3 relays", Unit: "ms", Measured: w.rep.ProbeP99Ms,
			Target: &benchreport.Target{Op: benchreport.Below, Value: ms(targetHBP99)},
			Notes: fmt.Sprintf("p50 %s over %s probes: a heartbeat sent, then a sample right behind it, timed to the sample's ack (an agent's messages are stored in order: an upper bound); sender lag p99 %s",
				num(w.rep.ProbeP50Ms, "ms"), num(float64(w.rep.Probes), ""), num(w.rep.LagP99Ms, "ms"))},
	}
	if w.rep.Probes == 0 {
		hbRows[1].Error = "no probe answered in the window"
	}
	if err := record(hbRows...); err != nil {
		return err
	}

	// 3. kill -9 of relay1 under that load.
	kill, err := b.killOne(ctx, sw, relays, hp.Addr, db, ten)
	if err != nil {
		return err
	}
	sw = nil // stopped
	if err := record(kill); err != nil {
		return err
	}

	// 4. The shared outbox: once the relays have taken the agents'
	// devices OFFLINE (their queues are idle again), relay1 back,
	// deliveries queued.
	if err := waitFor(2*time.Minute, func() error {
		var l resource.List[resource.Device]
		if err := getJSON(ctx, "http://"+hp.Addr+"/api/v1/public/devices?limit=1&status=ONLINE", ten.Key, &l); err != nil {
			return err
		}
		if len(l.Data) > 0 {
			return fmt.Errorf("devices still ONLINE two minutes after the agents stopped")
		}
		return nil
	}); err != nil {
		return err
	}
	if err := relays[0].restart(); err != nil {
		return err
	}
	if err := waitUp(hp, 30*time.Second); err != nil {
		return err
	}
	row, err := b.outbox(ctx, db, ten, rc, cond, roots)
	if err != nil {
		return err
	}
	if err := record(row); err != nil {
		return err
	}

	// 5. Point samples through HAProxy.
	return b.pointsStep(hp, ten.Tokens, &sw, roots, cond)
}

// waitUp waits until HAProxy sees every relay UP.
func waitUp(hp *haproxytest.Proxy, d time.Duration) error {
	return waitFor(d, func() error {
		st, err := hp.Status()
		if err != nil {
			return err
		}
		for name, s := range st {
			if s != "UP" {
				return fmt.Errorf("HAProxy sees %s %s", name, s)
			}
		}
		return nil
	})
}

// measured is a heartbeat window's figures.
type measured struct {
	rep            windowReport
	rate, sentRate float64 // stored, sent (per second)
	relayP99       time.Duration
	cpu            string
	caughtUp       string // how the warm-up ended
}

// window lets the load warm up, waits (up to a minute) until the relays
// have stored about every heartbeat sent so far, so that the window
// measures the steady state and not the backlog of the connections' first
// heartbeats (each writes every channel), then measures one window.
func (b *bench) window(sw *swarm, roots func() map[int]string, relays ...*relay) (measured, error) {
	var m measured
	time.Sleep(b.warmup)
	slack := int64(b.rate / 10) // a tenth of a second's heartbeats
	t0 := time.Now()
	for {
		var st swarmStatus
		if err := sw.Do("status", &st); err != nil {
			return m, err
		}
		c, err := scrape(relays...)
		if err != nil {
			return m, err
		}
		backlog := st.HeartbeatsSent - int64(c.heartbeats)
		if backlog <= slack {
			m.caughtUp = fmt.Sprintf("the relays caught up with the warm-up's heartbeats %s after it", time.Since(t0).Round(100*time.Millisecond))
			break
		}
		if time.Since(t0) > time.Minute {
			m.caughtUp = fmt.Sprintf("the relays were still %s heartbeats behind a minute after the warm-up: measured anyway (the load is above what they store)", num(float64(backlog), ""))
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	before, err := scrape(relays...)
	if err != nil {
		return m, err
	}
	if m.rep, m.cpu, err = b.measure(sw, roots); err != nil {
		return m, err
	}
	after, err := scrape(relays...)
	if err != nil {
		return m, err
	}
	m.rate = (after.heartbeats - before.heartbeats) / m.rep.Seconds
	m.sentRate = float64(m.rep.HeartbeatsSent) / m.rep.Seconds
	m.relayP99 = after.p99Since(before)
	return m, nil
}

// measure marks a window on the swarm, waits b.hbWindow and returns the
// swarm's report of it with where the machine's CPU went meanwhile.
func (b *bench) measure(sw *swarm, roots func() map[int]string) (windowReport, string, error) {
	c0 := cpuNow(roots())
	if err := sw.Do("mark", &struct{}{}); err != nil {
		return windowReport{}, "", err
	}
	time.Sleep(b.hbWindow)
	var rep windowReport
	if err := sw.Do("report", &rep); err != nil {
		return rep, "", err
	}
	return rep, cpuNow(roots()).since(c0), nil
}

// killOne kills relay1 with SIGKILL under the agents' load, times until
// every agent is connected again, checks through HAProxy that every device
// is ONLINE, stops the agents once every sample they made is acknowledged
// and checks each device holds every sample once.
func (b *bench) killOne(ctx context.Context, sw *swarm, relays []*relay, lb, db string, ten benchstore.Tenant) (benchreport.Row, error) {
	row := benchreport.Row{Area: "cluster", Figure: "kill -9 of one relay under load: every agent connected again", Unit: "s",
		Target: &benchreport.Target{Op: benchreport.Below, Value: targetRecovery.Seconds()}}
	c, err := scrape(relays[0])
	if err != nil {
		return row, err
	}
	held := int64(c.connected)
	var s0, s swarmStatus
	if err := sw.Do("status", &s0); err != nil {
		return row, err
	}
	fmt.Printf("kill -9 of relay1 (holding %d agents) ...\n", held)
	killed := time.Now()
	relays[0].Kill()
	err = waitFor(2*time.Minute, func() error {
		if err := sw.Do("status", &s); err != nil {
			return err
		}
		if s.Up < int64(s.Agents) || s.Reconnects-s0.Reconnects < held {
			return fmt.Errorf("after kill -9 of relay1: %d of %d agents connected, %d of %d reconnected", s.Up, s.Agents, s.Reconnects-s0.Reconnects, held)
		}
		return nil
	})
	if err != nil {
		return row, err
	}
	row.Measured = time.Unix(0, s.LastUpUnixNs).Sub(killed).Seconds()
	notOnline, err := notOnline(ctx, lb, ten.Key)
	if err != nil {
		return row, err
	}
	time.Sleep(5 * time.Second)
	var fin swarmFinal
	if err := sw.Do("stop", &fin); err != nil {
		return row, err
	}
	made, stored, bad, err := countSamples(ctx, db, ten, fin.Samples)
	if err != nil {
		return row, err
	}
	row.Notes = fmt.Sprintf("%d agents of the killed relay back through HAProxy (the agents' jittered backoff: 200 ms to 2 s); %s samples made by the agents, %s stored, each once; devices not ONLINE once every agent was back: %d",
		held, num(float64(made), ""), num(float64(stored), ""), notOnline)
	switch {
	case bad > 0:
		row.Error = fmt.Sprintf("%d devices hold another number of samples than their agent made (%d stored of %d)", bad, stored, made)
	case fin.Unacked > 0:
		row.Error = fmt.Sprintf("%d samples never acknowledged", fin.Unacked)
	case notOnline > 0:
		row.Error = fmt.Sprintf("%d devices not ONLINE once every agent was back", notOnline)
	}
	return row, nil
}

// notOnline counts, through the API at lb, the devices OFFLINE or
// CONNECTING (at most 100 of each).
func notOnline(ctx context.Context, lb, key string) (int, error) {
	n := 0
	for _, status := range []string{"OFFLINE", "CONNECTING"} {
		var l resource.List[resource.Device]
		if err := getJSON(ctx, "http://"+lb+"/api/v1/public/devices?limit=100&status="+status, key, &l); err != nil {
			return 0, err
		}
		n += len(l.Data)
	}
	return n, nil
}

// countSamples counts the samples stored for each agent's device (through
// the store contract) against how many it made, and how many devices
// differ.
func countSamples(ctx context.Context, db string, ten benchstore.Tenant, made []int) (total, stored, bad int, err error) {
	st, err := postgres.Open(ctx, db)
	if err != nil {
		return 0, 0, 0, err
	}
	defer st.Close()
	counts, err := benchstore.CountMetrics(ctx, st.Devices(), ten.Org, ten.Devices[:len(made)], time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	if err != nil {
		return 0, 0, 0, err
	}
	for i, want := range made {
		stored += int(counts[i])
		total += want
		if int(counts[i]) != want {
			bad++
		}
	}
	return total, stored, bad, nil
}

// outbox puts deliveries in the shared outbox through the store contract
// (webhook.Store) and times their delivery by the running relays.
func (b *bench) outbox(ctx context.Context, db string, ten benchstore.Tenant, rc *receiver, cond string, roots func() map[int]string) (benchreport.Row, error) {
	row := benchreport.Row{Area: "cluster", Figure: "webhook deliveries from the shared outbox, 3 relays", Unit: "deliveries/s",
		Target: &benchreport.Target{Op: benchreport.AtLeast, Value: targetDeliveries}}
	fmt.Printf("%d deliveries in the shared outbox ...\n", b.deliveries)
	st, err := postgres.Open(ctx, db)
	if err != nil {
		return row, err
	}
	defer st.Close()
	// Queued as a relay's notifier queues them, by a "relay" that leaves
	// them at once (a lease of a millisecond) to the three running ones.
	outbox := postgres.NewWebhookStore(st, "fleet-clusterbench")
	outbox.SetLease(time.Millisecond)
	all := rc.expect(b.deliveries)
	c0 := cpuNow(roots())
	body := []byte(`{"event":"serial.signal","deviceId":"dev","at":"2026-11-22T03:00:00.000Z","channels":[{"id":"rs485-1","live":"17 42 99","txOn":false,"error":""}]}`)
	start := time.Now()
	for i := 0; i < b.deliveries; i += 1000 {
		batch := make([]*webhook.Delivery, 0, 1000)
		for j := i; j < min(i+1000, b.deliveries); j++ {
			now := time.Now()
			batch = append(batch, &webhook.Delivery{ID: ids.New(), OrgID: ten.Org, DeviceID: ten.Devices[j%b.outboxDevices], Event: webhook.EventSignal,
				URL: rc.srv.URL + "/", Body: body, State: webhook.StatePending, NextAttemptAt: now, CreatedAt: now})
		}
		if err := outbox.WriteOutbox(ctx, batch, nil); err != nil {
			return row, err
		}
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
	}
	n, repeats, last := rc.counts()
	row.Measured = float64(n) / last.Sub(start).Seconds()
	used := cpuNow(roots()).since(c0)
	err = waitFor(2*time.Minute, func() error {
		p, _, err := outbox.Pending(ctx, 0, 1)
		if err == nil && len(p) > 0 {
			err = fmt.Errorf("deliveries still pending in the outbox")
		}
		return err
	})
	row.Notes = fmt.Sprintf("%s deliveries over %s devices queued through the store contract, to an HTTPS receiver on loopback; %d requests repeated a delivery id; %s; %s",
		num(float64(b.deliveries), ""), num(float64(b.outboxDevices), ""), repeats, cond, used)
	switch {
	case n < b.deliveries:
		row.Error = fmt.Sprintf("only %d of %d deliveries arrived within 5 minutes", n, b.deliveries)
	case err != nil:
		row.Error = err.Error()
	case repeats > 0:
		row.Error = fmt.Sprintf("%d requests repeated a delivery another relay (or the same) had sent", repeats)
	}
	return row, nil
}

// single is a one-relay run's figures.
type single struct {
	hbRate, p99, apiRPS, apiP99 float64
	hbErr, apiErr               string
	hbCPU, apiCPU               string // where the CPU went
}

// single runs one relay alone on db (a PostgreSQL URL or a SQLite file):
// GET /devices, then the agents straight to it.
func (b *bench) single(ctx context.Context, name, db, key string, urls []string, tokens string) (single, error) {
	var out single
	fmt.Printf("%s: one relay, GET /devices, then %d agents offering %.0f heartbeats/s ...\n", name, b.agents, b.rate)
	r, err := startRelay(b.relayBin, b.dir, name, db, nil)
	if err != nil {
		return out, err
	}
	defer r.Kill()
	var sw *swarm
	defer func() {
		if sw != nil {
			sw.Kill() // what a saturated relay still holds is not counted
		}
	}()
	roots := func() map[int]string {
		m := b.watched(sw)
		if !strings.HasPrefix(db, "postgres") {
			delete(m, b.pgPID)
		}
		m[r.Pid()] = groupRelays
		return m
	}
	c0 := cpuNow(roots())
	api := apibench.Load(ctx, r.addr, urls, key, b.clients, time.Second, b.apiWindow)
	out.apiRPS, out.apiP99, out.apiErr, out.apiCPU = api.RPS(), ms(api.P99), apiError(api), cpuNow(roots()).since(c0)
	if sw, err = startSwarm(b.loadgenBin, wsURL(r.addr), tokens, b.rate); err != nil {
		return out, err
	}
	w, err := b.window(sw, roots, r)
	if err != nil {
		return out, err
	}
	out.hbRate, out.p99, out.hbCPU = w.rate, w.rep.ProbeP99Ms, w.cpu+"; "+w.caughtUp
	if w.rep.Probes == 0 {
		out.hbErr = "no probe answered in the window"
	}
	return out, nil
}

// singleRows are the one-relay figures, PostgreSQL beside SQLite, with
// their ratios.
func (b *bench) singleRows(pg, lite single) []benchreport.Row {
	hbCond := fmt.Sprintf("for information: one relay alone with %s devices, %s agents straight to it offering %s heartbeats/s (the cluster's load); %d CPUs shared with other work",
		num(float64(b.devices), ""), num(float64(b.agents), ""), num(b.rate, ""), runtime.NumCPU())
	apiCond := fmt.Sprintf("for information: one relay alone with %s devices, %d clients, %v measured; %d CPUs shared with other work",
		num(float64(b.devices), ""), b.clients, b.apiWindow, runtime.NumCPU())
	row := func(fig, unit string, v float64, cond, cpu, err string) benchreport.Row {
		if cpu != "" {
			cond += "; " + cpu
		}
		return benchreport.Row{Area: "cluster", Figure: fig, Unit: unit, Measured: v, Notes: cond, Error: err}
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return math.NaN()
		}
		return a / b
	}
	return []benchreport.Row{
		row("one relay on PostgreSQL: heartbeats stored per second", "heartbeats/s", pg.hbRate, hbCond, pg.hbCPU, pg.hbErr),
		row("one relay on SQLite: heartbeats stored per second", "heartbeats/s", lite.hbRate, hbCond, lite.hbCPU, lite.hbErr),
		row("heartbeats stored, PostgreSQL / SQLite", "×", ratio(pg.hbRate, lite.hbRate), hbCond, "", ""),
		row("one relay on PostgreSQL: heartbeat-to-stored p99", "ms", pg.p99, hbCond, "", pg.hbErr),
		row("one relay on SQLite: heartbeat-to-stored p99", "ms", lite.p99, hbCond, "", lite.hbErr),
		row("one relay on PostgreSQL: GET /devices (limit 25) throughput", "req/s", pg.apiRPS, apiCond, pg.apiCPU, pg.apiErr),
		row("one relay on SQLite: GET /devices (limit 25) throughput", "req/s", lite.apiRPS, apiCond, lite.apiCPU, lite.apiErr),
		row("GET /devices throughput, PostgreSQL / SQLite", "×", ratio(pg.apiRPS, lite.apiRPS), apiCond, "", ""),
		row("one relay on PostgreSQL: GET /devices p99", "ms", pg.apiP99, apiCond, "", pg.apiErr),
		row("one relay on SQLite: GET /devices p99", "ms", lite.apiP99, apiCond, "", lite.apiErr),
	}
}

// watched are the processes every CPU reading groups besides the relays
// and HAProxy: PostgreSQL's postmaster, this process and the load
// generator (nil: none).
func (b *bench) watched(sw *swarm) map[int]string {
	m := map[int]string{os.Getpid(): groupSelf, b.pgPID: groupPG}
	if sw != nil {
		m[sw.Pid()] = groupAgents
	}
	return m
}

func apiError(r apibench.Result) string {
	if r.Errors > 0 {
		return fmt.Sprintf("%d of %d requests failed", r.Errors, r.Requests+r.Errors)
	}
	if r.Requests == 0 {
		return "no request answered"
	}
	return ""
}

func loadAvg() string {
	if bs, err := os.ReadFile("/proc/loadavg"); err == nil {
		return strings.Join(strings.Fields(string(bs))[:3], " ")
	}
	return "?"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func num(v float64, unit string) string { return benchreport.FormatValue(v, unit) }

// clusterEnv is the cluster's relays' environment: GOMAXPROCS set to
// their share of the machine's CPUs (--relay-gomaxprocs), as for
// relays sharing a machine in production (docs/cluster.md, sizing).
func (b *bench) clusterEnv() []string {
	if b.relayProcs <= 0 {
		return nil
	}
	return []string{fmt.Sprintf("GOMAXPROCS=%d", b.relayProcs)}
}

// procsNote says how the cluster's relays share the CPUs, for the notes.
func (b *bench) procsNote() string {
	if b.relayProcs <= 0 {
		return "each relay's Go runtime schedules over every CPU (GOMAXPROCS default)"
	}
	return fmt.Sprintf("each relay with GOMAXPROCS=%d, its share of the CPUs", b.relayProcs)
}

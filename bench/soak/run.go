package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/fleet/fleet/bench/benchstore"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/test/rig/logbuf"
)

type deviceCred struct{ id, token string }

// Run runs a soak as cfg says and reports what it found. The error is for
// a soak that could not run; losses are in the Report (see Failed).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	raiseFileLimit()
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "fleet-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	rep := &Report{Agents: cfg.Agents, Duration: cfg.Duration, DeliveriesByState: map[string]int{}}

	// The database's filesystem: a size-limited tmpfs when we may mount one.
	dbDir := filepath.Join(dir, "db")
	if err := os.MkdirAll(dbDir, 0o700); err != nil {
		return nil, err
	}
	if err := mountTmpfs(dbDir, cfg.DBSize); err != nil {
		rep.DiskFull.How = "not run: " + err.Error()
		rep.Notes = append(rep.Notes, "disk-full phase skipped: "+err.Error())
		cfg.DiskFullFor = 0
	} else {
		rep.DiskFull.How = fmt.Sprintf("tmpfs of %d MiB", cfg.DBSize>>20)
		defer unmount(dbDir)
	}
	dbPath := filepath.Join(dbDir, "relay.db")

	rcv, err := startReceiver(filepath.Join(dir, "receiver-ca.pem"))
	if err != nil {
		return nil, err
	}
	defer rcv.srv.Close()

	logf("soak: registering %d devices", cfg.Agents)
	key, creds, orgID, err := provision(ctx, dbPath, cfg.Agents, cfg.Forwarding, rcv.url())
	if err != nil {
		return nil, err
	}

	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	relayLog := &logbuf.Buffer{Max: 4 << 20} // the tail goes into a failure report
	rl := &relay{bin: cfg.Relay, db: dbPath, listen: listen, metrics: metricsAddr, caFile: rcv.caFile, log: relayLog}
	if err := rl.start(ctx); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, relayLog.Tail(20))
	}
	superCtx, stopSuper := context.WithCancel(ctx)
	defer stopSuper()
	superDone := make(chan struct{})
	go func() { rl.supervise(superCtx, logf); close(superDone) }()

	proxyAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	px, err := startProxy(proxyAddr, listen)
	if err != nil {
		return nil, err
	}
	defer px.stop()

	logf("soak: %d agents through the proxy %s to the relay %s", cfg.Agents, proxyAddr, listen)
	agentCtx, stopAgents := context.WithCancel(context.Background())
	defer stopAgents()
	fleet, err := startAgents(agentCtx, filepath.Join(dir, "agents"), "http://"+proxyAddr, creds, cfg.Forwarding, cfg.Heartbeat, cfg.MetricsEvery)
	if err != nil {
		return nil, err
	}
	defer fleet.close()

	start := time.Now()
	stopFlap := make(chan struct{})
	go rcv.flap(cfg.FlapEvery, cfg.FlapDown, stopFlap)

	faultT := time.NewTicker(cfg.FaultEvery)
	sampleT := time.NewTicker(cfg.SampleEvery)
	var killC <-chan time.Time
	if cfg.KillEvery > 0 {
		kt := time.NewTicker(cfg.KillEvery)
		defer kt.Stop()
		killC = kt.C
	}
	var diskC <-chan time.Time
	if cfg.DiskFullFor > 0 {
		diskC = time.After(cfg.DiskFullAt)
	}
	end := time.After(cfg.Duration)
	steady := time.After(time.Duration(float64(cfg.Duration) * cfg.FaultPhase))
	nextFault := 0
	var lastKill time.Duration
	var faultOn bool
	var faultOff <-chan time.Time
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-end:
			break loop
		case <-sampleT.C:
			if gen, rss, g, ok := rl.sample(); ok {
				rep.Samples = append(rep.Samples, Sample{At: time.Since(start), Generation: gen, RSS: rss, Goroutines: g})
			}
		case <-steady:
			// From here on nothing is done to the relay: the steady window.
			faultT.Stop()
			px.clear()
			faultOn, faultOff = false, nil
			close(stopFlap)
			stopFlap = nil
			rep.SteadyFrom = time.Since(start)
			logf("soak: steady: no more faults, kills or flapping")
		case <-faultT.C:
			if faultOn || stopFlap == nil {
				continue
			}
			f := faults[nextFault%len(faults)]
			nextFault++
			if err := px.apply(f); err != nil {
				logf("soak: %v", err)
				continue
			}
			faultOn, faultOff = true, time.After(cfg.FaultFor)
			rep.Faults = append(rep.Faults, fmt.Sprintf("%s at %s", f.name, time.Since(start).Round(time.Second)))
			logf("soak: fault: %s", f.name)
		case <-faultOff:
			px.clear()
			faultOn, faultOff = false, nil
		case <-killC:
			if stopFlap == nil {
				continue
			}
			logf("soak: kill -9 of the relay")
			rl.kill9()
			lastKill = time.Since(start)
		case <-diskC:
			diskFull(ctx, rep, dbDir, listen, key, creds, cfg.DiskFullFor, logf)
		}
	}
	faultT.Stop()
	sampleT.Stop()
	px.clear()
	if stopFlap != nil {
		close(stopFlap)
	}
	rep.SteadyFrom = max(rep.SteadyFrom, lastKill) + cfg.WarmUp

	// Drain: nothing new is offered; everything spooled reaches the relay
	// and every recorded delivery the receiver.
	fleet.stopSampling()
	logf("soak: draining")
	// The store is read through its contract to the end, even once ctx
	// is done (the soak was interrupted): the report counts what it has.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	st, err := sqlite.Open(rctx, dbPath)
	if err != nil {
		return rep, err
	}
	defer st.Close()
	drainDeadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(drainDeadline) {
		pending, _ := fleet.pending()
		waiting, err := deliveriesWaiting(rctx, st, orgID)
		if pending == 0 && err == nil && waiting == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	stopAgents()
	fleet.wait()
	stopSuper()
	<-superDone
	rl.stop()
	rl.mu.Lock()
	rep.Kills, rep.Restarts, rep.UnexpectedExit = rl.kills, rl.restarts, rl.unexpected
	rl.mu.Unlock()
	if rep.UnexpectedExit > 0 {
		rep.Notes = append(rep.Notes, "the relay exited on its own; last log lines:\n"+relayLog.Tail(10))
	}

	if err := count(rctx, rep, st, orgID, fleet, rcv); err != nil {
		return rep, err
	}
	growth(rep)
	return rep, nil
}

// provision makes the organization, an API key and the devices through the
// store contract (cloud.Admin), and turns on forwarding of the first
// forwarding devices' signals to url (cloud.SerialService, as PATCH
// /devices/{id}/serial does).
func provision(ctx context.Context, path string, n, forwarding int, url string) (string, []deviceCred, string, error) {
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return "", nil, "", err
	}
	defer st.Close()
	ten, err := benchstore.Provision(ctx, st, "Soak", n)
	if err != nil {
		return "", nil, "", err
	}
	on := true
	creds := make([]deviceCred, n)
	for i := range n {
		if i < forwarding {
			if _, err := st.Serial().PatchSerial(ctx, ten.Org, ten.Devices[i], cloud.SerialPatch{WebhookURL: &url, WebhookEnabled: &on}); err != nil {
				return "", nil, "", err
			}
		}
		creds[i] = deviceCred{ten.Devices[i], ten.Tokens[i]}
	}
	return ten.Key, creds, ten.Org, nil
}

// diskFull fills the database's filesystem for d, writing through the API
// meanwhile (each must answer 503 service_unavailable in the error
// envelope), then gives the space back and waits for a write to succeed.
func diskFull(ctx context.Context, rep *Report, dbDir, listen, key string, creds []deviceCred, d time.Duration, logf func(string, ...any)) {
	logf("soak: filling the database's filesystem for %s", d)
	rep.DiskFull.Ran = true
	rep.DiskFull.APIOther = map[int]int{}
	filler, err := fill(dbDir)
	if err != nil {
		rep.Notes = append(rep.Notes, "filling the disk: "+err.Error())
	}
	client := &http.Client{Timeout: 10 * time.Second}
	write := func(i int) int {
		body := fmt.Sprintf(`{"webhookUrl":"https://hooks.example.com/%d/%s"}`, i, bytes.Repeat([]byte("x"), 1000))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, "http://"+listen+"/api/v1/public/devices/"+creds[len(creds)-1].id+"/serial", bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&env)
		if resp.StatusCode == http.StatusServiceUnavailable && env.Error.Code == cloud.ESERVICEUNAVAILABLE && env.Error.Message != "" {
			return 503
		}
		return resp.StatusCode
	}
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline); i++ {
		switch s := write(i); s {
		case 503:
			rep.DiskFull.API503++
		default:
			rep.DiskFull.APIOther[s]++
		}
		time.Sleep(250 * time.Millisecond)
	}
	os.Remove(filler)
	freed := time.Now()
	for i := 0; time.Since(freed) < time.Minute; i++ {
		if write(1000+i) == http.StatusOK {
			rep.DiskFull.Resumed, rep.DiskFull.ResumedAfter = true, time.Since(freed)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	logf("soak: disk space back; the API took a write again after %s", rep.DiskFull.ResumedAfter.Round(time.Millisecond))
}

// deliveriesWaiting counts the organization's webhook deliveries not yet
// ended, through the store contract (cloud.Admin).
func deliveriesWaiting(ctx context.Context, st cloud.Admin, orgID string) (int, error) {
	counts, err := st.WebhookDeliveryCounts(ctx, orgID)
	return counts[string(webhook.StatePending)], err
}

// count compares what the agents offered with what the relay stored, and
// the deliveries the relay recorded with those the receiver got, reading
// the store through its contract: each device's samples through the public
// API's service, the deliveries by state through cloud.Admin. Every
// delivery the receiver sees is one the outbox recorded first, under the
// same id, so a recorded delivery is lost when the recorded ones outnumber
// the distinct ids received.
func count(ctx context.Context, rep *Report, st cloud.Store, orgID string, fleet *fleetOfAgents, rcv *receiver) error {
	ids := make([]string, len(fleet.agents))
	for i, a := range fleet.agents {
		ids[i] = a.id
	}
	stored, err := benchstore.CountMetrics(ctx, st.Devices(), orgID, ids, time.Unix(0, 0), time.Now().Add(24*time.Hour))
	if err != nil {
		return fmt.Errorf("count metrics: %w", err)
	}
	for i, a := range fleet.agents {
		off, got := a.offered.Load(), stored[i]
		rep.SamplesOffered += off
		rep.SamplesStored += got
		if got < off {
			rep.SamplesLost += off - got
		} else {
			rep.SamplesDuplicated += got - off
		}
	}
	counts, err := st.WebhookDeliveryCounts(ctx, orgID)
	if err != nil {
		return fmt.Errorf("count deliveries: %w", err)
	}
	for state, n := range counts {
		rep.DeliveriesExpected += n
		rep.DeliveriesByState[state] += n
	}
	rep.DeliveriesReceived = min(len(rcv.received()), rep.DeliveriesExpected)
	rep.DeliveriesLost = rep.DeliveriesExpected - rep.DeliveriesReceived
	if extra := len(rcv.received()) - rep.DeliveriesExpected; extra > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the receiver got %d delivery ids more than the outbox recorded", extra))
	}
	return nil
}

// growth compares the relay's RSS and goroutines at the start and the end
// of the steady window (the last relay process, after its warm-up): the
// mean of the first and of the last quarter of its samples.
func growth(rep *Report) {
	var steady []Sample
	last := -1
	for _, s := range rep.Samples {
		last = max(last, s.Generation)
	}
	for _, s := range rep.Samples {
		if s.Generation == last && s.At >= rep.SteadyFrom {
			steady = append(steady, s)
		}
	}
	if len(steady) < 8 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("only %d samples in the steady window: growth not measured", len(steady)))
		return
	}
	sort.Slice(steady, func(i, j int) bool { return steady[i].At < steady[j].At })
	q := len(steady) / 4
	mean := func(ss []Sample, f func(Sample) float64) float64 {
		var t float64
		for _, s := range ss {
			t += f(s)
		}
		return t / float64(len(ss))
	}
	rss := func(s Sample) float64 { return float64(s.RSS) }
	gor := func(s Sample) float64 { return float64(s.Goroutines) }
	if a := mean(steady[:q], rss); a > 0 {
		rep.RSSGrowth = mean(steady[len(steady)-q:], rss)/a - 1
	}
	if a := mean(steady[:q], gor); a > 0 {
		rep.GoroutineGrowth = mean(steady[len(steady)-q:], gor)/a - 1
	}
}

// raiseFileLimit lifts the soft open-file limit to the hard one: every
// agent holds a connection, and the proxy two.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"

	"github.com/fleet/fleet/bench/loadgenproc"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/testnet"
)

// listURLs returns the GET /devices paths apibench's clients take in turn:
// the first 40 pages of 25, so that cursors are read too.
func listURLs(ctx context.Context, st cloud.Store, org string) ([]string, error) {
	urls := []string{"/api/v1/public/devices?limit=25"}
	cursor := ""
	for range 39 {
		l, err := st.Devices().ListDevices(ctx, org, cloud.DeviceFilter{Page: cloud.Page{Limit: 25, Cursor: cursor}})
		if err != nil {
			return nil, err
		}
		if !l.Pagination.HasMore {
			break
		}
		cursor = *l.Pagination.NextCursor
		urls = append(urls, "/api/v1/public/devices?limit=25&cursor="+cursor)
	}
	return urls, nil
}

// writeTokens writes tokens to a file in dir, one a line, for
// fleet-loadgen.
func writeTokens(dir, name string, tokens []string) (string, error) {
	p := filepath.Join(dir, name)
	return p, os.WriteFile(p, []byte(strings.Join(tokens, "\n")+"\n"), 0o600)
}

// waitFor retries f until it returns nil or d passes, then returns f's
// last error.
func waitFor(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// getJSON GETs url with the API key and decodes a 200 answer into v.
func getJSON(ctx context.Context, url, key string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// relay is one fleet-relay serve process.
type relay struct {
	*fleetproc.Proc
	addr    string
	metrics string // its /metrics listener (host:port)
	env     []string
	args    []string
	bin     string
}

func (r *relay) url() string { return "http://" + r.addr }

// startRelay runs fleet-relay serve on db (in the environment, as a
// deployment passes it) with its log in dir, and waits until /readyz
// answers 200.
func startRelay(bin, dir, name, db string, env []string, extra ...string) (*relay, error) {
	r := &relay{env: append([]string{"FLEET_DB=" + db}, env...), bin: bin}
	var err error
	if r.addr, err = testnet.Addr(); err != nil {
		return nil, err
	}
	if r.metrics, err = testnet.Addr(); err != nil {
		return nil, err
	}
	r.args = append([]string{"serve", "--listen", r.addr, "--metrics-listen", r.metrics, "--rate-limit", "1000000000"}, extra...)
	r.Proc = &fleetproc.Proc{Name: name, Log: filepath.Join(dir, name+".log")}
	return r, r.restart()
}

// restart starts the relay (again, on its port) and waits until it is
// ready.
func (r *relay) restart() error {
	p, err := fleetproc.Run(r.Name, r.Log, r.env, r.bin, r.args...)
	if err != nil {
		return err
	}
	r.Proc = p
	c := http.Client{Timeout: 2 * time.Second}
	return waitFor(2*time.Minute, func() error {
		if r.Exited() {
			return fmt.Errorf("%s exited; see %s", r.Name, r.Log)
		}
		resp, err := c.Get(r.url() + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s /readyz: %d", r.Name, resp.StatusCode)
		}
		return nil
	})
}

// linkCounters are the agent endpoint's figures of one or more relays.
type linkCounters struct {
	connected, heartbeats float64
	latency               map[float64]uint64 // cumulative counts by upper bound (read to commit)
	count                 uint64
}

// scrape sums the agent endpoint's metrics (/metrics) over relays.
func scrape(relays ...*relay) (linkCounters, error) {
	c := linkCounters{latency: map[float64]uint64{}}
	hc := http.Client{Timeout: 10 * time.Second}
	for _, r := range relays {
		resp, err := hc.Get("http://" + r.metrics + "/metrics")
		if err != nil {
			return c, fmt.Errorf("%s /metrics: %w", r.Name, err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			return c, fmt.Errorf("%s /metrics: %w", r.Name, err)
		}
		c.connected += value(fams["fleet_relay_agents_connected"])
		c.heartbeats += value(fams["fleet_relay_heartbeats_stored_total"])
		if f := fams["fleet_relay_heartbeat_store_latency_seconds"]; f != nil && len(f.Metric) > 0 {
			h := f.Metric[0].GetHistogram()
			c.count += h.GetSampleCount()
			for _, bk := range h.Bucket {
				c.latency[bk.GetUpperBound()] += bk.GetCumulativeCount()
			}
		}
	}
	return c, nil
}

// value is an unlabelled gauge's or counter's value.
func value(f *dto.MetricFamily) float64 {
	if f == nil || len(f.Metric) == 0 {
		return 0
	}
	if g := f.Metric[0].GetGauge(); g != nil {
		return g.GetValue()
	}
	return f.Metric[0].GetCounter().GetValue()
}

// p99Since is the 99th percentile of the read-to-commit latency between
// two scrapes: the upper bound of the histogram bucket that holds it.
func (c linkCounters) p99Since(before linkCounters) time.Duration {
	total := c.count - before.count
	if total == 0 {
		return 0
	}
	want := uint64(float64(total) * 0.99)
	best := -1.0
	for ub, n := range c.latency {
		if n-before.latency[ub] >= want && (best < 0 || ub < best) {
			best = ub
		}
	}
	if best < 0 {
		return agentlink.LatencyBucket(63)
	}
	return time.Duration(best * float64(time.Second))
}

// swarm is a fleet-loadgen agents process (bench/loadgenproc).
type swarm = loadgenproc.Swarm

// startSwarm runs fleet-loadgen agents and waits until every agent is
// connected.
var startSwarm = loadgenproc.Start

// The load generator's answers (bench/cmd/fleet-loadgen/agents.go).
type (
	windowReport struct {
		Seconds        float64 `json:"seconds"`
		HeartbeatsSent int64   `json:"heartbeatsSent"`
		Skipped        int64   `json:"skipped"`
		Probes         int     `json:"probes"`
		ProbeP50Ms     float64 `json:"probeP50Ms"`
		ProbeP99Ms     float64 `json:"probeP99Ms"`
		LagP99Ms       float64 `json:"lagP99Ms"`
		PointsSent     int64   `json:"pointsSent"`
		PointsAcked    int64   `json:"pointsAcked"`
		PointP50Ms     float64 `json:"pointP50Ms"`
		PointP99Ms     float64 `json:"pointP99Ms"`
		PointLagP99Ms  float64 `json:"pointLagP99Ms"`
	}
	swarmStatus struct {
		Agents         int   `json:"agents"`
		Up             int64 `json:"up"`
		Reconnects     int64 `json:"reconnects"`
		LastUpUnixNs   int64 `json:"lastUpUnixNs"`
		HeartbeatsSent int64 `json:"heartbeatsSent"`
		PointsSent     int64 `json:"pointsSent"`
		PointsAcked    int64 `json:"pointsAcked"`
	}
	swarmFinal struct {
		Samples []int `json:"samples"`
		Unacked int   `json:"unacked"`
	}
)

// receiver is a fast HTTPS webhook receiver counting distinct delivery
// ids (and requests that repeat one).
type receiver struct {
	srv    *httptest.Server
	caFile string

	mu       sync.Mutex
	seen     map[string]bool
	repeats  int
	all      chan struct{} // closed once want distinct ids arrived
	want     int
	lastSeen time.Time
}

func startReceiver(dir string) (*receiver, error) {
	rc := &receiver{seen: map[string]bool{}}
	rc.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		id := r.Header.Get(webhook.HeaderDeliveryID)
		rc.mu.Lock()
		if rc.seen[id] {
			rc.repeats++
		} else {
			rc.seen[id] = true
			rc.lastSeen = time.Now()
			if rc.all != nil && len(rc.seen) == rc.want {
				close(rc.all)
			}
		}
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	rc.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rc.srv.StartTLS()
	rc.caFile = filepath.Join(dir, "receiver.pem")
	if err := os.WriteFile(rc.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rc.srv.Certificate().Raw}), 0o644); err != nil {
		rc.srv.Close()
		return nil, err
	}
	return rc, nil
}

// expect resets the counts and returns a channel closed once n distinct
// deliveries arrived.
func (rc *receiver) expect(n int) <-chan struct{} {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.seen, rc.repeats, rc.want, rc.all = map[string]bool{}, 0, n, make(chan struct{})
	return rc.all
}

func (rc *receiver) counts() (distinct, repeats int, last time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.seen), rc.repeats, rc.lastSeen
}

// wsURL is the agent endpoint at an HTTP address.
func wsURL(addr string) string { return "ws://" + addr + protocol.Path }

// cpuUse is the CPU time used so far: by each watched process (pid ->
// group and seconds) and by the whole machine (busy seconds, all CPUs).
type cpuUse struct {
	at    time.Time
	procs map[int]procCPU
	busy  float64
}

type procCPU struct {
	group   string
	seconds float64
}

// The groups of the benchmark's processes, as the notes list them: a
// process belongs to the group of its own pid or of its parent's
// (PostgreSQL's backends are its postmaster's children). Other engineers'
// processes on the machine are "everything else".
const (
	groupPG      = "PostgreSQL"
	groupRelays  = "relays"
	groupHAProxy = "HAProxy"
	groupAgents  = "fleet-loadgen"
	groupSelf    = "this process (API clients, receiver)"
)

var cpuGroupOrder = []string{groupPG, groupRelays, groupHAProxy, groupAgents, groupSelf}

// cpuNow reads /proc, grouping the processes of roots (pid -> group) and
// their children.
func cpuNow(roots map[int]string) cpuUse {
	u := cpuUse{at: time.Now(), procs: map[int]procCPU{}}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return u
	}
	if st, err := fs.Stat(); err == nil {
		c := st.CPUTotal
		u.busy = c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return u
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue
		}
		g, ok := roots[p.PID]
		if !ok {
			g, ok = roots[st.PPID]
		}
		if ok {
			u.procs[p.PID] = procCPU{g, st.CPUTime()}
		}
	}
	return u
}

// since says in cores (CPU seconds per second) where the machine's CPU went
// between an earlier reading and this one.
func (u cpuUse) since(before cpuUse) string {
	wall := u.at.Sub(before.at).Seconds()
	if wall <= 0 {
		return ""
	}
	by := map[string]float64{}
	known := 0.0
	for pid, p := range u.procs {
		if b, ok := before.procs[pid]; ok && b.group == p.group {
			by[p.group] += p.seconds - b.seconds
			known += p.seconds - b.seconds
		}
	}
	var parts []string
	for _, g := range cpuGroupOrder {
		if v, ok := by[g]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", g, v/wall))
		}
	}
	if u.busy > 0 {
		parts = append(parts, fmt.Sprintf("everything else on the machine %.2f", max(0, u.busy-before.busy-known)/wall))
	}
	return fmt.Sprintf("CPU used, in cores of %d: %s", runtime.NumCPU(), strings.Join(parts, ", "))
}

// pidOf returns the pid of the process whose command line holds every one
// of words: the postmaster of a pgtest server (by its port).
func pidOf(words ...string) (int, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		args, err := p.CmdLine()
		if err != nil {
			continue
		}
		line := " " + strings.Join(args, " ") + " "
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return p.PID, nil
		}
	}
	return 0, errors.New("no process with " + strings.Join(words, " "))
}

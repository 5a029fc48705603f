// Package livebench measures the panel's live updates (issue 29) on one
// real relay: the fleet-relay binary on a SQLite file, signed-in panel
// sessions over real HTTP on loopback each holding open live streams (GET
// /panel/live, Server-Sent Events), and devices whose heartbeats another
// process stores in the same file (as agents connected to another relay,
// or the admin CLI, would). It reports the relay's memory per open
// stream, its CPU per pushed change, and how long a stored change takes to
// reach every open stream.
package livebench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"

	"github.com/fleet/fleet/bench/benchstore"
	"github.com/fleet/fleet/bench/panelbench"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/password"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Config is one run.
type Config struct {
	Relay    string // path of the fleet-relay binary
	Streams  int    // open live streams
	Sessions int    // signed-in sessions holding them (at most 8 streams each)
	Devices  int    // devices of the organization
	Rounds   int    // rounds of changes, one a second
	PerRound int    // devices whose heartbeat each round stores
	Settle   time.Duration
	Dir      string // where the database goes ("" for a temporary folder)
	Log      *slog.Logger
}

// Result is the run's figures.
type Result struct {
	Streams int
	// RSSBefore and RSSAfter are the relay's resident memory with the
	// sessions signed in, before and after the streams opened; Before and
	// After where its Go runtime says the bytes are.
	RSSBefore, RSSAfter int64
	Before, After       Runtime
	// IdleCPU is the relay's CPU over Window with every stream open and no
	// change; ChangeCPU over Window while the rounds ran.
	IdleCPU, ChangeCPU time.Duration
	Window             time.Duration
	Changes            int // device changes stored (Rounds × PerRound)
	Delivered          int // (round, stream) pairs that arrived
	Expected           int // Rounds × Streams
	P50, P99, Max      time.Duration
}

// Runtime is what the relay's Go runtime reports of its memory
// (/metrics).
type Runtime struct {
	HeapInuse, StackInuse, Goroutines float64
}

const pw = "live bench password"

// Run prepares the data, starts the relay, opens the streams and makes the
// changes.
func Run(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	if cfg.Sessions*8 < cfg.Streams {
		return res, fmt.Errorf("%d sessions hold at most %d streams (8 each)", cfg.Sessions, cfg.Sessions*8)
	}
	dir, cleanup, err := benchstore.WorkDir(cfg.Dir, "fleet-livebench-")
	if err != nil {
		return res, err
	}
	defer cleanup()
	path := filepath.Join(dir, "bench.db")
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		return res, err
	}
	defer db.Close()
	email, devs, err := prepare(ctx, db, cfg)
	if err != nil {
		return res, fmt.Errorf("prepare: %w", err)
	}
	agents, err := sqlite.NewAgentStore(db, nil)
	if err != nil {
		return res, err
	}
	defer agents.Close()
	sessions, err := connect(ctx, agents, devs)
	if err != nil {
		return res, fmt.Errorf("connect devices: %w", err)
	}

	addr, err := panelbench.FreeAddr()
	if err != nil {
		return res, err
	}
	metrics, err := panelbench.FreeAddr()
	if err != nil {
		return res, err
	}
	base := "http://" + addr
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	// The sessions sign in through a first relay process; the measured one
	// starts afresh on the same address and file, where they are stored,
	// so its memory holds nothing of the sign-ins' password hashing.
	relayArgs := []string{"--metrics-listen", metrics, "--panel-live-max-per-org", strconv.Itoa(cfg.Streams)}
	_, stop, err := panelbench.StartRelay(ctx, cfg.Relay, addr, path, dir, relayArgs...)
	if err != nil {
		return res, err
	}
	clients := make([]*http.Client, cfg.Sessions)
	for i := range clients {
		if clients[i], err = panelbench.SignIn(tr, base, email, pw); err != nil {
			stop()
			return res, fmt.Errorf("sign in %d: %w", i+1, err)
		}
	}
	stop()
	tr.CloseIdleConnections()
	cfg.Log.Info("signed in", "sessions", cfg.Sessions)
	pid, stop, err := panelbench.StartRelay(ctx, cfg.Relay, addr, path, dir, relayArgs...)
	if err != nil {
		return res, err
	}
	defer stop()
	time.Sleep(cfg.Settle)
	if res.RSSBefore, err = rss(pid); err != nil {
		return res, err
	}
	if res.Before, err = runtimeOf(metrics); err != nil {
		return res, err
	}

	rec := newRecorder()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	opened := make(chan error, cfg.Streams)
	for i := range cfg.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec.read(sctx, clients[i%cfg.Sessions], base+"/panel/live", i, opened)
		}()
	}
	for range cfg.Streams {
		if err := <-opened; err != nil {
			return res, fmt.Errorf("open a stream: %w", err)
		}
	}
	res.Streams = cfg.Streams
	cfg.Log.Info("streams open", "streams", cfg.Streams)
	time.Sleep(cfg.Settle)
	if res.RSSAfter, err = rss(pid); err != nil {
		return res, err
	}
	if res.After, err = runtimeOf(metrics); err != nil {
		return res, err
	}

	// Idle: every stream open, nothing changes.
	res.Window = time.Duration(cfg.Rounds) * time.Second
	c0, err := cpu(pid)
	if err != nil {
		return res, err
	}
	time.Sleep(res.Window)
	c1, err := cpu(pid)
	if err != nil {
		return res, err
	}
	res.IdleCPU = c1 - c0

	// Changes: each second PerRound devices' heartbeats, last seen at a
	// time that names the round.
	start := time.Now().Truncate(time.Second).Add(time.Hour)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	c0, _ = cpu(pid)
	for r := range cfg.Rounds {
		at := start.Add(time.Duration(r) * time.Second)
		for k := range cfg.PerRound {
			i := (r*cfg.PerRound + k) % len(devs)
			if err := heartbeat(ctx, agents, devs[i], sessions[i], at); err != nil {
				return res, err
			}
		}
		rec.stored(at, time.Now())
		res.Changes += cfg.PerRound
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
	}
	time.Sleep(2 * time.Second) // the last round's events
	c1, _ = cpu(pid)
	res.ChangeCPU = c1 - c0 - 2*time.Second*res.IdleCPU/res.Window
	cancel()
	wg.Wait()

	lat := rec.latencies()
	res.Expected, res.Delivered = cfg.Rounds*cfg.Streams, len(lat)
	if len(lat) == 0 {
		return res, errors.New("no change reached a stream")
	}
	slices.Sort(lat)
	res.P50, res.P99, res.Max = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	return res, nil
}

// prepare makes the organization, its devices and a VIEWER.
func prepare(ctx context.Context, db *sqlite.DB, cfg Config) (string, []agentlink.Device, error) {
	org, err := db.CreateOrg(ctx, "Live Bench")
	if err != nil {
		return "", nil, err
	}
	devs := make([]agentlink.Device, cfg.Devices)
	for i := range devs {
		d, _, err := db.AddDevice(ctx, cloud.NewDevice{OrgID: org.ID, Name: fmt.Sprintf("gateway-%04d", i), SerialNumber: fmt.Sprintf("LB-%06d", i), Model: "IG-500"})
		if err != nil {
			return "", nil, err
		}
		devs[i] = agentlink.Device{ID: d.ID, OrgID: org.ID, Model: "IG-500"}
	}
	hash, err := password.NewHasher(password.Default, 1).Hash(ctx, pw)
	if err != nil {
		return "", nil, err
	}
	email := "viewer@livebench.example"
	_, err = sqlite.NewPanelStore(db).CreateUser(ctx, cloud.NewUser{OrgID: org.ID, Email: email, Role: cloud.RoleViewer, PasswordHash: hash})
	return email, devs, err
}

// connect connects every device as an agent with an hour's deadline.
func connect(ctx context.Context, a *sqlite.AgentStore, devs []agentlink.Device) ([]string, error) {
	sessions := make([]string, len(devs))
	now := time.Now()
	for i, d := range devs {
		sessions[i] = ids.New()
		if _, err := a.Connect(ctx, d, sessions[i], now, now.Add(time.Hour)); err != nil {
			return nil, err
		}
		if _, err := a.Hello(ctx, agentlink.HelloIn{Device: d, Session: sessions[i], At: now, HeartbeatInterval: 20 * time.Minute,
			Hello: protocol.Hello{AgentVersion: "1.0.0", Model: d.Model}, Deadline: now.Add(time.Hour)}); err != nil {
			return nil, err
		}
	}
	return sessions, nil
}

// heartbeat stores one heartbeat of d at at and waits for it.
func heartbeat(ctx context.Context, a *sqlite.AgentStore, d agentlink.Device, session string, at time.Time) error {
	done := make(chan error, 1)
	in := agentlink.HeartbeatIn{Device: d, Session: session, At: at, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline, IPAddress: "10.0.0.1"}
	if err := a.Heartbeat(ctx, in, func(_ agentlink.HeartbeatOut, err error) { done <- err }); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("a heartbeat was not stored within 30 s")
	}
}

// recorder keeps when each round was stored and when each stream heard it.
type recorder struct {
	mu     sync.Mutex
	rounds map[int64]time.Time             // last seen (Unix ms) → stored at
	heard  map[int]map[int64]time.Duration // stream → round → latency
}

func newRecorder() *recorder {
	return &recorder{rounds: map[int64]time.Time{}, heard: map[int]map[int64]time.Duration{}}
}

func (r *recorder) stored(at, when time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rounds[at.UnixMilli()] = when
}

func (r *recorder) arrived(stream int, seen []int64, when time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.heard[stream]
	if h == nil {
		h = map[int64]time.Duration{}
		r.heard[stream] = h
	}
	for _, ms := range seen {
		if stored, ok := r.rounds[ms]; ok {
			if _, dup := h[ms]; !dup {
				h[ms] = when.Sub(stored)
			}
		}
	}
}

func (r *recorder) latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for _, h := range r.heard {
		for _, d := range h {
			out = append(out, d)
		}
	}
	return out
}

// read opens one stream and records the rounds its fleet events carry
// until ctx ends; it reports the opening on opened.
func (r *recorder) read(ctx context.Context, c *http.Client, u string, stream int, opened chan<- error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := c.Do(req)
	if err != nil {
		opened <- err
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		opened <- fmt.Errorf("status %d", resp.StatusCode)
		return
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "retry:") {
		opened <- fmt.Errorf("first line %q: %v", line, err)
		return
	}
	opened <- nil
	fleet := false
	var v struct {
		Devices []struct {
			LastSeen *time.Time `json:"lastSeen"`
		} `json:"devices"`
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		switch {
		case line == "event: fleet\n":
			fleet = true
		case fleet && strings.HasPrefix(line, "data: "):
			when := time.Now()
			fleet = false
			v.Devices = v.Devices[:0]
			if json.Unmarshal([]byte(line[len("data: "):]), &v) != nil {
				continue
			}
			seen := make([]int64, 0, len(v.Devices))
			for _, d := range v.Devices {
				if d.LastSeen != nil {
					seen = append(seen, d.LastSeen.UnixMilli())
				}
			}
			r.arrived(stream, seen, when)
		case line == "\n":
			fleet = false
		}
	}
}

// runtimeOf reads the relay's Go memory figures from its /metrics.
func runtimeOf(addr string) (Runtime, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		return Runtime{}, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return Runtime{}, fmt.Errorf("/metrics: %w", err)
	}
	gauge := func(name string) float64 {
		if f := fams[name]; f != nil && len(f.Metric) > 0 {
			return f.Metric[0].GetGauge().GetValue()
		}
		return 0
	}
	return Runtime{HeapInuse: gauge("go_memstats_heap_inuse_bytes"), StackInuse: gauge("go_memstats_stack_inuse_bytes"), Goroutines: gauge("go_goroutines")}, nil
}

// rss is the process's resident memory in bytes.
func rss(pid int) (int64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.NewStatus()
	return int64(st.VmRSS), err
}

// cpu is the process's CPU time (user + system).
func cpu(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	return time.Duration(st.CPUTime() * float64(time.Second)), err
}

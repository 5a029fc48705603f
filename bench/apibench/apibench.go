// Package apibench measures the public API end to end: a relay API server on
// a real loopback listener over a real SQLite file, driven by concurrent
// HTTP clients with an API key. It reports requests per second and latency
// percentiles for GET /devices and GET /alerts, and the cost of a brand-new
// key's first request (bcrypt) against its steady state, and GET
// /devices?limit=25 against a bare net/http server answering the same bytes
// and headers, alternated in one run (the API's distance from the
// net/http ceiling).
package apibench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet/fleet/bench/benchstore"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/relaymetrics"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// Config selects the workload.
type Config struct {
	Devices  int           // devices in the organization (10,000)
	Alerts   int           // ACTIVE alerts in the organization
	Clients  int           // concurrent clients (16)
	Duration time.Duration // measured time per endpoint
	Warmup   time.Duration // unmeasured time before each measurement
	Dir      string        // where the database file goes ("" for a temp dir)
	// Writes, when above 0, adds a run of GET /devices while a writer
	// commits that many device status changes per second (as agents'
	// heartbeats and status changes do): every commit invalidates the
	// server's page and key caches, so this run measures the store path.
	Writes int
	// Alternations, when above 0, adds the ceiling comparison: GET
	// /devices?limit=25 from the relay's API, then from a bare net/http
	// server answering the bytes and headers the API answered, each for
	// Duration, this many times in turn (Report.Ceiling).
	Alternations int
	// CeilingOnly skips the other measurements (the endpoints, the new
	// key) and runs only the ceiling comparison.
	CeilingOnly bool
	Log         *slog.Logger // progress; nil discards
}

// Result is one endpoint's measurement.
type Result struct {
	Name     string
	Commits  int // commits by the background writer during the measurement
	Requests int
	Errors   int
	Elapsed  time.Duration
	P50, P99 time.Duration
	// CPU is the process's CPU time (server and the light load generator)
	// per measured request; 0 where not measured.
	CPU time.Duration
}

// RPS is requests per second.
func (r Result) RPS() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// Report is the whole run.
type Report struct {
	Results []Result
	// FirstRequest is the latency of a brand-new key's first request
	// (bcrypt verification); Steady the median of its next requests.
	FirstRequest, Steady time.Duration
	// FirstBcrypts and SteadyBcrypts count the bcrypt comparisons the
	// first request and the next ones ran (1 and 0: once per key).
	FirstBcrypts, SteadyBcrypts int64
	// LoadAvg is /proc/loadavg's first three fields after the run ("" where
	// unavailable): the figures mean little on a machine busy with others.
	LoadAvg string
	// Ceiling is the comparison with a bare net/http server (Config.Alternations).
	Ceiling Ceiling
}

// Run seeds a database, starts the API on loopback and measures.
func Run(ctx context.Context, cfg Config) (Report, error) {
	var rep Report
	logger := cfg.Log
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.Log = logger
	dir, cleanup, err := benchstore.WorkDir(cfg.Dir, "fleet-apibench-")
	if err != nil {
		return rep, err
	}
	defer cleanup()
	dbPath := filepath.Join(dir, "bench.db")
	logger.Info("seeding", "devices", cfg.Devices, "alerts", cfg.Alerts)
	org, devs, key, err := seedFile(ctx, dbPath, cfg.Devices, cfg.Alerts)
	if err != nil {
		return rep, err
	}
	db, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		return rep, err
	}
	defer db.Close()
	agents, err := sqlite.NewAgentStore(db, logger)
	if err != nil {
		return rep, err
	}
	defer agents.Close()

	// The server as the relay runs it: one write per response
	// (api.Listener), the access log formatted (to a discarding writer),
	// requests counted for /metrics; the rate limit is out of the way.
	auth := apikey.NewAuthenticator(db, time.Now, 10_000)
	srv := api.NewServer(api.Config{
		Requests:  relaymetrics.New().Requests(),
		Devices:   db.Devices(),
		Serial:    db.Serial(),
		Alerts:    db.Alerts(),
		Auth:      auth,
		Versioner: db,
		RateLimit: 1 << 30,
		Logger:    slog.New(slog.NewJSONHandler(io.Discard, nil)),
		// The request lines written as fleet-relay serve writes them.
		AccessLogTo: io.Discard,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return rep, err
	}
	newServer := func(h http.Handler) *http.Server {
		return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	}
	hs := newServer(srv)
	hs.ConnContext = api.ConnContext
	go hs.Serve(api.Listener(ln))
	defer hs.Close()
	base := "http://" + ln.Addr().String() + api.Prefix
	path := api.Prefix

	tr := &http.Transport{MaxIdleConns: cfg.Clients * 2, MaxIdleConnsPerHost: cfg.Clients * 2, IdleConnTimeout: time.Minute, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	// Sanity: the endpoints answer what they should.
	if err := check(client, base+"/devices", key, 25); err != nil {
		return rep, err
	}
	if cfg.Alerts > 0 {
		if err := check(client, base+"/alerts", key, min(25, cfg.Alerts)); err != nil {
			return rep, err
		}
	}

	if cfg.Alternations > 0 {
		if rep.Ceiling, err = runCeiling(ctx, cfg, ln.Addr().String(), path+"/devices?limit=25", key, newServer); err != nil {
			return rep, fmt.Errorf("ceiling: %w", err)
		}
	}
	if cfg.CeilingOnly {
		rep.LoadAvg = loadAvg()
		return rep, nil
	}

	// First request of a brand-new key, then its steady state.
	_, fresh, err := db.CreateKey(ctx, org, "fresh", []string{cloud.ScopeDevicesRead}, 0)
	if err != nil {
		return rep, err
	}
	runs := auth.BcryptRuns()
	if rep.FirstRequest, err = timeOne(client, base+"/devices", fresh); err != nil {
		return rep, err
	}
	rep.FirstBcrypts, runs = auth.BcryptRuns()-runs, auth.BcryptRuns()
	var steady []time.Duration
	for i := 0; i < 200; i++ {
		d, err := timeOne(client, base+"/devices", fresh)
		if err != nil {
			return rep, err
		}
		steady = append(steady, d)
	}
	sort.Slice(steady, func(i, j int) bool { return steady[i] < steady[j] })
	rep.Steady = steady[len(steady)/2]
	rep.SteadyBcrypts = auth.BcryptRuns() - runs

	// Pages beyond the first: clients walk cursors of the device list so
	// the keyset path is measured too.
	cursors := []string{""}
	for i := 1; i < 40 && i*25 < len(devs); i++ {
		cursors = append(cursors, devs[i*25-1])
	}
	endpoints := []struct {
		name   string
		urls   []string
		writes int
	}{
		{"GET /devices (limit 25)", urlsWith(path+"/devices?limit=25", cursors), 0},
		{"GET /alerts", []string{path + "/alerts"}, 0},
	}
	if cfg.Writes > 0 {
		endpoints = append(endpoints, struct {
			name   string
			urls   []string
			writes int
		}{fmt.Sprintf("GET /devices, %d commits/s", cfg.Writes), urlsWith(path+"/devices?limit=25", cursors), cfg.Writes})
	}
	for _, ep := range endpoints {
		logger.Info("measuring", "endpoint", ep.name)
		var commits atomic.Int64
		wctx, stopWriter := context.WithCancel(ctx)
		writerDone := make(chan error, 1)
		if ep.writes > 0 {
			go func() { writerDone <- writer(wctx, agents, org, devs, ep.writes, cfg.Warmup, &commits) }()
		} else {
			writerDone <- nil
		}
		r := Load(ctx, ln.Addr().String(), ep.urls, key, cfg.Clients, cfg.Warmup, cfg.Duration)
		stopWriter()
		if err := <-writerDone; err != nil {
			return rep, fmt.Errorf("writer: %w", err)
		}
		r.Name = ep.name
		r.Commits = int(commits.Load())
		rep.Results = append(rep.Results, r)
	}
	rep.LoadAvg = loadAvg()
	return rep, nil
}

// loadAvg is /proc/loadavg's first three fields, or "".
func loadAvg() string {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			return strings.Join(f[:3], " ")
		}
	}
	return ""
}

// writer changes a device's status perSec times a second until ctx ends,
// as agents do (a connect, CONNECTING, then a disconnect, OFFLINE: one
// commit each), counting the commits made after warmup.
func writer(ctx context.Context, agents agentlink.Store, orgID string, devs []string, perSec int, warmup time.Duration, commits *atomic.Int64) error {
	tick := time.NewTicker(time.Second / time.Duration(perSec))
	defer tick.Stop()
	measureFrom := time.Now().Add(warmup)
	session := ""
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		dev := agentlink.Device{ID: devs[(i/2)%len(devs)], OrgID: orgID, Model: "IG-500"}
		var err error
		if now := time.Now(); i%2 == 0 {
			session = ids.New()
			_, err = agents.Connect(ctx, dev, session, now, now.Add(time.Minute))
		} else {
			_, _, err = agents.Disconnect(ctx, dev, session, now, "bench")
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if time.Now().After(measureFrom) {
			commits.Add(1)
		}
	}
}

func urlsWith(u string, cursors []string) []string {
	out := make([]string, len(cursors))
	for i, c := range cursors {
		out[i] = u
		if c != "" {
			out[i] += "&cursor=" + c
		}
	}
	return out
}

// seedFile seeds the store at path (an organization, n devices, alerts
// ACTIVE alerts and an API key with every scope) and closes it: the last
// connection's close folds the thousands of seeding transactions from the
// WAL into the database file, as a running relay's checkpoints would have.
func seedFile(ctx context.Context, path string, n, alerts int) (org string, devs []string, key string, err error) {
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		return "", nil, "", err
	}
	defer func() {
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}()
	o, err := db.CreateOrg(ctx, "bench")
	if err != nil {
		return "", nil, "", err
	}
	if devs, err = seed(ctx, db, o.ID, n, alerts); err != nil {
		return "", nil, "", err
	}
	_, key, err = db.CreateKey(ctx, o.ID, "bench", cloud.AllScopes, 0)
	return o.ID, devs, key, err
}

// seed adds n devices (sorted by creation) and alerts ACTIVE alerts spread
// over them and the default rules.
func seed(ctx context.Context, db *sqlite.DB, orgID string, n, alerts int) ([]string, error) {
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		d, _, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: orgID, Name: fmt.Sprintf("gateway-%05d", i), SerialNumber: fmt.Sprintf("SN-%06d", i), Model: "IG-500", Location: "Plant 3, hall B"})
		if err != nil {
			return nil, err
		}
		ids = append(ids, d.ID)
	}
	// Same ordering as the list: created_at then id. The alerts open as
	// the alert engine opens them.
	engine := sqlite.NewAlertEngineStore(db)
	rules, err := engine.Rules(ctx, orgID)
	if err != nil {
		return nil, err
	}
	for i := 0; i < alerts && i < n*len(rules); i++ {
		_, _, err := engine.OpenAlert(ctx, alert.Opening{OrgID: orgID, DeviceID: ids[i%n], Rule: rules[(i/n)%len(rules)], Message: "CPU above 90 % for 3 samples",
			Payload: json.RawMessage(`{"metric":"cpuPct","value":97.2,"threshold":90}`), At: time.Now(), WithEvent: true})
		if err != nil {
			return nil, err
		}
	}
	var out []string
	var page resource.List[resource.Device]
	cursor := ""
	svc := db.Devices()
	for {
		var err error
		page, err = svc.ListDevices(ctx, orgID, cloud.DeviceFilter{Page: cloud.Page{Limit: 100, Cursor: cursor}})
		if err != nil {
			return nil, err
		}
		for _, d := range page.Data {
			out = append(out, d.ID)
		}
		if !page.Pagination.HasMore {
			return out, nil
		}
		cursor = *page.Pagination.NextCursor
	}
}

func check(c *http.Client, url, key string, want int) error {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var l struct {
		Data []json.RawMessage `json:"data"`
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("%s: %d %s", url, res.StatusCode, b)
	}
	if err := json.NewDecoder(res.Body).Decode(&l); err != nil {
		return err
	}
	if len(l.Data) != want {
		return fmt.Errorf("%s: %d items, want %d", url, len(l.Data), want)
	}
	return nil
}

func timeOne(c *http.Client, url, key string) (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	d := time.Since(start)
	if err == nil && res.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: status %d", url, res.StatusCode)
	}
	return d, err
}

// Load runs clients goroutines, each on its own keep-alive connection to
// addr (host:port: this package's own server, or any other, such as a load
// balancer in front of relays), issuing GET requests for urls (paths with
// their query, taken in turn) with the API key back to back for warmup +
// dur, and measures the requests that started within dur. A request
// answered other than 200 counts as an error. The clients speak HTTP/1.1 directly (prebuilt
// request bytes, responses read by Content-Length): on a 2-core machine the
// load generator shares the CPU with the server, and net/http's client
// would cost about as much as the server it measures.
func Load(ctx context.Context, addr string, urls []string, key string, clients int, warmup, dur time.Duration) Result {
	var mu sync.Mutex
	var all []time.Duration
	errs := 0
	var wg sync.WaitGroup
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(dur)
	var cpu0 atomic.Int64
	cpuTimer := time.AfterFunc(warmup, func() { cpu0.Store(int64(processCPU())) })
	reqs := make([][]byte, len(urls))
	for j, u := range urls {
		reqs[j] = []byte("GET " + u + " HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + key + "\r\nUser-Agent: fleet-apibench\r\n\r\n")
	}
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1<<16)
			nerr := 0
			var c *rawConn
			for n := i; ; n++ {
				t0 := time.Now()
				if !t0.Before(end) || ctx.Err() != nil {
					break
				}
				var err error
				if c == nil {
					c, err = dialRaw(addr)
				}
				if err == nil {
					err = c.do(reqs[n%len(reqs)])
					if err != nil {
						c.close()
						c = nil
					}
				}
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					nerr++
					continue
				}
				lat = append(lat, time.Since(t0))
			}
			if c != nil {
				c.close()
			}
			mu.Lock()
			all = append(all, lat...)
			errs += nerr
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(measureFrom)
	cpuTimer.Stop()
	cpu := processCPU() - time.Duration(cpu0.Load())
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := Result{Requests: len(all), Errors: errs, Elapsed: elapsed}
	if cpu0.Load() > 0 && len(all) > 0 {
		r.CPU = cpu / time.Duration(len(all))
	}
	if len(all) > 0 {
		r.P50 = all[len(all)*50/100]
		r.P99 = all[len(all)*99/100]
	}
	return r
}

// rawConn is one keep-alive HTTP/1.1 connection.
type rawConn struct {
	nc  net.Conn
	br  *bufio.Reader
	buf []byte
}

func dialRaw(addr string) (*rawConn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &rawConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), buf: make([]byte, 64<<10)}, nil
}

func (c *rawConn) close() { c.nc.Close() }

// do sends req and reads one response, which must be 200 with a
// Content-Length.
func (c *rawConn) do(req []byte) error {
	_ = c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(req); err != nil {
		return err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) < 12 || string(line[9:12]) != "200" {
		return fmt.Errorf("status line %q", line)
	}
	length := -1
	for {
		h, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(h) <= 2 {
			break
		}
		const cl = "content-length:"
		if len(h) > len(cl) && strings.EqualFold(string(h[:len(cl)]), cl) {
			length, err = strconv.Atoi(strings.TrimSpace(string(h[len(cl):])))
			if err != nil {
				return fmt.Errorf("content-length %q", h)
			}
		}
	}
	if length < 0 {
		return errors.New("response without Content-Length")
	}
	for length > 0 {
		n := min(length, len(c.buf))
		if _, err := io.ReadFull(c.br, c.buf[:n]); err != nil {
			return err
		}
		length -= n
	}
	return nil
}

// Print writes the report with each figure beside its target.
func Print(w io.Writer, cfg Config, rep Report) {
	fmt.Fprintf(w, "API benchmark: %d devices in the organization, %d clients on loopback, %s per endpoint\n", cfg.Devices, cfg.Clients, cfg.Duration)
	for _, r := range rep.Results {
		fmt.Fprintf(w, "  %-24s %8.0f req/s (target >= 15000)  p50 %6.2f ms  p99 %6.2f ms (target < 5 ms)  errors %d\n",
			r.Name, r.RPS(), ms(r.P50), ms(r.P99), r.Errors)
		if r.Commits > 0 {
			fmt.Fprintf(w, "  %-24s %d commits during the measurement: every one invalidates the page and key caches\n", "", r.Commits)
		}
		if r.CPU > 0 {
			fmt.Fprintf(w, "  %-24s CPU %.0f µs per request (server + load generator) = at most %.0f req/s on %d idle CPUs\n",
				"", float64(r.CPU)/float64(time.Microsecond), float64(runtime.NumCPU())*float64(time.Second)/float64(r.CPU), runtime.NumCPU())
		}
	}
	if rep.FirstRequest > 0 {
		fmt.Fprintf(w, "  new key: first request %.1f ms (bcrypt, once per key), steady state %.2f ms (no bcrypt)\n", ms(rep.FirstRequest), ms(rep.Steady))
	}
	printCeiling(w, rep.Ceiling)
	if rep.LoadAvg != "" {
		fmt.Fprintf(w, "  machine load average (1, 5, 15 min) after the run: %s on %d CPUs: other processes share these cores\n", rep.LoadAvg, runtime.NumCPU())
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

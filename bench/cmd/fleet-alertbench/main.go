// Command fleet-alertbench is the alert rules' end-to-end benchmark (`make
// bench-alerts`, DESIGN.md "Performance targets": a threshold crossed at
// the agent to the e-mail accepted by the SMTP server on loopback, p99
// under 2 s). Everything is real and runs on this machine: one fleet-relay
// serve process on SQLite, its e-mail sent to Mailpit (a real SMTP server,
// test/rig/mailpit's pinned version) through --smtp-url
// smtp+insecure://127.0.0.1:PORT given in FLEET_SMTP_URL, and fleet-loadgen
// agents as a process: --agents agents each sending --points point samples
// every --points-interval, the first of them crossing a threshold up and
// down every --cross-every rounds, each agent at a phase of its own
// (fleet-loadgen agents --cross-every), heartbeats every 30 s.
//
// The organization has one e-mail channel and one rule, "point
// rs485-1.p00 > 500 for 0s" notifying it, made through the store contract
// and the public API as a user would (the point is in the serial
// configuration of the first device, put through the API). Each crossing
// up opens an alert (its payload's capturedAt is the sample's capture time
// at the agent) whose e-mail links to /panel/alerts/<id>; each crossing
// down resolves it and sends a second e-mail (load, not measured). After
// the load stopped and the outbox drained, the figure is, for every alert
// whose crossing was captured in the measured window, the time from that
// capture to Mailpit's Created for its e-mail; an alert without an e-mail
// counts as a miss beyond every other. It prints p50 and p99 beside the
// target and records them for the `make bench` report (bench/benchreport).
//
//	fleet-alertbench [--relay bin/fleet-relay] [--loadgen bin/fleet-loadgen] [--agents 2000] [--duration 60s] ...
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/bench/benchstore"
	"github.com/fleet/fleet/bench/loadgenproc"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
	"github.com/fleet/fleet/test/rig/mailpit"
	"github.com/fleet/fleet/test/rig/testnet"
)

// target is DESIGN.md's: a threshold crossed at the agent to the e-mail
// accepted by the SMTP server, p99.
const target = 2 * time.Second

// Rule and point of the benchmark: fleet-loadgen's crossing point is 1000
// while high and 8 to 12 otherwise.
const (
	pointName = "p00"
	ruleValue = 500
)

// config is the workload.
type config struct {
	relayBin, loadgenBin string
	agents, points       int
	pointsInterval       time.Duration
	crossEvery           int
	heartbeat            time.Duration
	warmup, duration     time.Duration
	keep                 bool
}

func main() {
	var c config
	fs := flag.NewFlagSet("fleet-alertbench", flag.ExitOnError)
	fs.StringVar(&c.relayBin, "relay", "bin/fleet-relay", "fleet-relay binary")
	fs.StringVar(&c.loadgenBin, "loadgen", "bin/fleet-loadgen", "fleet-loadgen binary")
	fs.IntVar(&c.agents, "agents", 2000, "agents (devices), each sending point samples")
	fs.IntVar(&c.points, "points", 10, "point samples each agent sends a round")
	fs.DurationVar(&c.pointsInterval, "points-interval", time.Second, "each agent's sampling round")
	fs.IntVar(&c.crossEvery, "cross-every", 30, "rounds the crossing point stays high, then low: every agent opens and resolves one alert each 2 × this many rounds")
	fs.DurationVar(&c.heartbeat, "heartbeat", 30*time.Second, "each agent's heartbeat period")
	fs.DurationVar(&c.warmup, "warmup", 15*time.Second, "load before the measured window (once the rule exists)")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "measured window: alerts whose crossing was captured in it")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory (logs, database)")
	fs.Parse(os.Args[1:])
	if c.agents < 1 || c.points < 1 || c.crossEvery < 1 || c.pointsInterval <= 0 || c.heartbeat <= 0 || c.duration <= 0 {
		fmt.Fprintln(os.Stderr, "fleet-alertbench: --agents, --points, --cross-every, --points-interval, --heartbeat and --duration must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-alertbench:", err)
		if rerr := benchreport.Record(benchreport.Row{Area: "rules", Figure: figP99, Unit: "s", Target: targetRow(), Error: err.Error()}); rerr != nil {
			fmt.Fprintln(os.Stderr, "fleet-alertbench:", rerr)
		}
		os.Exit(1)
	}
}

// Figure names of the rows.
const (
	figP99 = "threshold crossed at the agent to e-mail accepted by the SMTP server, p99"
	figP50 = "threshold crossed at the agent to e-mail accepted by the SMTP server, p50"
)

func targetRow() *benchreport.Target {
	return &benchreport.Target{Op: benchreport.Below, Value: target.Seconds()}
}

func run(ctx context.Context, c config) error {
	dir, err := os.MkdirTemp("", "fleet-alertbench-")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Println("temp dir:", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	// Mailpit, on its own loopback ports, keeping every message.
	mp, err := startMailpit(dir)
	if err != nil {
		return err
	}
	defer mp.proc.Shutdown(5 * time.Second)

	// The organization, its devices, the e-mail channel: through the store
	// contract, before the relay opens the database.
	dbPath := filepath.Join(dir, "fleet.db")
	ten, chID, err := prepare(ctx, dbPath, c.agents)
	if err != nil {
		return err
	}

	addr, err := testnet.Addr()
	if err != nil {
		return err
	}
	env := []string{"FLEET_DB=" + dbPath, "FLEET_SMTP_URL=smtp+insecure://" + mp.smtp}
	relay, err := fleetproc.Run("fleet-relay", filepath.Join(dir, "relay.log"), env, c.relayBin, "serve", "--listen", addr,
		"--rate-limit", "1000000000", "--public-url", "https://fleet.bench.example", "--smtp-from", "fleet@bench.example")
	if err != nil {
		return err
	}
	defer relay.Shutdown(20 * time.Second)
	root := &apiClient{base: "http://" + addr}
	api := &apiClient{base: root.base + "/api/v1/public", key: ten.Key}
	if err := waitFor(2*time.Minute, func() error {
		if relay.Exited() {
			return errStop{fmt.Errorf("fleet-relay exited; see %s", relay.Log)}
		}
		return root.do(ctx, "GET", "/readyz", nil, nil)
	}); err != nil {
		return err
	}

	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(strings.Join(ten.Tokens, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	rate := float64(c.agents) / c.heartbeat.Seconds()
	t0 := time.Now()
	sw, err := loadgenproc.Start(c.loadgenBin, "ws://"+addr+protocol.Path, tokens, rate, "--sample-every", "1000000",
		"--points", fmt.Sprint(c.points), "--points-interval", c.pointsInterval.String(), "--cross-every", fmt.Sprint(c.crossEvery))
	if err != nil {
		return err
	}
	defer sw.Kill()
	fmt.Printf("agents: %d connected in %s\n", c.agents, time.Since(t0).Round(time.Millisecond))

	// The point in the first device's serial configuration (its channel is
	// available once its first heartbeat is stored), then the rule.
	rs485 := map[string]any{"kind": "rs485", "baudRate": 115200, "dataBits": 8, "parity": "even", "stopBits": 1,
		"mode": "modbus_rtu_master", "slaveId": 1, "points": []map[string]any{
			{"name": pointName, "function": "holding", "register": 0, "type": "u16", "unit": "°C", "intervalMs": int(c.pointsInterval.Milliseconds())}}}
	if err := waitFor(c.heartbeat+time.Minute, func() error {
		return api.do(ctx, "PUT", "/devices/"+ten.Devices[0]+"/serial/channels/rs485-1", rs485, nil)
	}); err != nil {
		return fmt.Errorf("configure rs485-1 of the first device: %w", err)
	}
	rule := map[string]any{"name": "Crossing", "severity": "ERROR", "notify": []string{chID},
		"condition": map[string]any{"kind": "threshold", "source": "point.rs485-1." + pointName, "op": ">", "value": ruleValue, "for": "0s"}}
	var made resource.One[resource.AlertRule]
	if err := api.do(ctx, "POST", "/alert-rules", rule, &made); err != nil {
		return fmt.Errorf("create the rule: %w", err)
	}

	if err := sleep(ctx, c.warmup); err != nil {
		return err
	}
	if err := sw.Do("mark", &struct{}{}); err != nil {
		return err
	}
	w0 := time.Now()
	load0 := loadAvg()
	if err := sleep(ctx, c.duration); err != nil {
		return err
	}
	w1 := time.Now()
	load1 := loadAvg()
	var ingest struct {
		PointsAcked int64   `json:"pointsAcked"`
		PointP50Ms  float64 `json:"pointP50Ms"`
		PointP99Ms  float64 `json:"pointP99Ms"`
	}
	if err := sw.Do("report", &ingest); err != nil {
		return err
	}
	stopped := time.Now()
	if err := sw.Do("stop", &struct{}{}); err != nil {
		return err
	}
	fmt.Printf("load stopped; every sample acknowledged %s later\n", time.Since(stopped).Round(time.Millisecond))

	// The outbox drained: Mailpit's count has not moved for 5 s.
	drained, err := mp.settle(ctx, 5*time.Second, 3*time.Minute)
	if err != nil {
		return err
	}
	alerts, err := api.alerts(ctx, made.Data.ID)
	if err != nil {
		return err
	}
	mails, err := mp.all(ctx)
	if err != nil {
		return err
	}
	f, err := measure(ctx, mp, alerts, mails, w0, w1)
	if err != nil {
		return err
	}
	f.agents, f.points, f.every, f.cross, f.heartbeat, f.window, f.drained = c.agents, c.points, c.pointsInterval, c.crossEvery, c.heartbeat, w1.Sub(w0), drained
	f.load0, f.load1 = load0, load1
	f.ackP50, f.ackP99 = time.Duration(ingest.PointP50Ms*float64(time.Millisecond)), time.Duration(ingest.PointP99Ms*float64(time.Millisecond))
	f.stored = float64(ingest.PointsAcked) / w1.Sub(w0).Seconds()
	f.print()
	return f.record()
}

// errStop ends waitFor at once.
type errStop struct{ error }

// waitFor retries f every 200 ms until it returns nil, an errStop, or d
// passes, then returns f's last error.
func waitFor(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		var stop errStop
		if err == nil || errors.As(err, &stop) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// prepare creates the organization with n devices and its e-mail channel
// in a new SQLite database at path.
func prepare(ctx context.Context, path string, n int) (benchstore.Tenant, string, error) {
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return benchstore.Tenant{}, "", err
	}
	defer st.Close()
	ten, err := benchstore.Provision(ctx, st, "Alert bench", n)
	if err != nil {
		return ten, "", err
	}
	ch, err := st.Rules().CreateChannel(ctx, cloud.NewChannel{OrgID: ten.Org, Name: "Ops mail", Kind: resource.ChannelEmail, Target: "ops@bench.example"})
	if err != nil {
		return ten, "", fmt.Errorf("create the e-mail channel: %w", err)
	}
	return ten, ch.ID, nil
}

// apiClient calls the relay at base (its public API's with an API key).
type apiClient struct {
	base, key string
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// do sends a request with body as JSON and decodes a 2xx answer into out.
func (a *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	if err != nil {
		return err
	}
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%s %s: %s %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// opened is an alert of the benchmark's rule: the capture time of its
// crossing at the agent (its payload's capturedAt) and its creation by the
// relay.
type opened struct {
	captured, created time.Time
}

// alerts returns each alert of the rule (open or resolved) by id, read
// through GET /alerts.
func (a *apiClient) alerts(ctx context.Context, ruleID string) (map[string]opened, error) {
	out := map[string]opened{}
	for _, state := range []string{"ACTIVE", "ACKNOWLEDGED", "RESOLVED"} {
		cursor := ""
		for {
			q := url.Values{"state": {state}, "limit": {"100"}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			var page resource.List[resource.Alert]
			if err := a.do(ctx, "GET", "/alerts?"+q.Encode(), nil, &page); err != nil {
				return nil, err
			}
			for _, al := range page.Data {
				var p struct {
					RuleID     string        `json:"ruleId"`
					CapturedAt resource.Time `json:"capturedAt"`
				}
				if json.Unmarshal(al.Payload, &p) == nil && p.RuleID == ruleID && !p.CapturedAt.IsZero() {
					out[al.ID] = opened{captured: p.CapturedAt.Time, created: al.CreatedAt.Time}
				}
			}
			if !page.Pagination.HasMore || page.Pagination.NextCursor == nil {
				break
			}
			cursor = *page.Pagination.NextCursor
		}
	}
	return out, nil
}

// mailServer is the Mailpit process.
type mailServer struct {
	proc      *fleetproc.Proc
	smtp, api string
}

func startMailpit(dir string) (*mailServer, error) {
	bin, err := mailpit.Binary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		m := &mailServer{}
		if m.smtp, err = testnet.Addr(); err != nil {
			return nil, err
		}
		if m.api, err = testnet.Addr(); err != nil {
			return nil, err
		}
		m.proc, err = fleetproc.Run("mailpit", filepath.Join(dir, "mailpit.log"), nil, bin, "--smtp", m.smtp, "--listen", m.api,
			"--database", filepath.Join(dir, "mailpit.db"), "--max", "0", "--smtp-auth-accept-any", "--smtp-auth-allow-insecure",
			"--smtp-disable-rdns", "--disable-version-check")
		if err != nil {
			return nil, err
		}
		lastErr = waitFor(20*time.Second, func() error {
			if m.proc.Exited() {
				return errStop{fmt.Errorf("mailpit exited; see %s", m.proc.Log)}
			}
			_, err := m.count(context.Background())
			return err
		})
		if lastErr == nil {
			return m, nil
		}
		m.proc.Kill()
	}
	return nil, fmt.Errorf("mailpit: %w", lastErr)
}

func (m *mailServer) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+m.api+path, nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("mailpit GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// count is the number of messages received.
func (m *mailServer) count(ctx context.Context) (int, error) {
	var page struct {
		Total int `json:"total"`
	}
	err := m.getJSON(ctx, "/api/v1/messages?limit=1", &page)
	return page.Total, err
}

// settle waits until no message arrived for quiet (up to d) and says when
// the last one did.
func (m *mailServer) settle(ctx context.Context, quiet, d time.Duration) (string, error) {
	t0 := time.Now()
	last, changed := -1, time.Now()
	for {
		n, err := m.count(ctx)
		if err != nil {
			return "", err
		}
		if n != last {
			last, changed = n, time.Now()
		}
		if time.Since(changed) >= quiet {
			if changed.Sub(t0) < 250*time.Millisecond {
				return fmt.Sprintf("%d e-mails in all, every one there when the load stopped", n), nil
			}
			return fmt.Sprintf("%d e-mails in all, the last %s after the load stopped", n, changed.Sub(t0).Round(100*time.Millisecond)), nil
		}
		if time.Since(t0) > d {
			return fmt.Sprintf("%d e-mails in all, still arriving %s after the load stopped", n, time.Since(t0).Round(time.Second)), nil
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return "", err
		}
	}
}

// mail is a received message as Mailpit lists it.
type mail struct {
	ID      string    `json:"ID"`
	Subject string    `json:"Subject"`
	Created time.Time `json:"Created"`
}

// all lists every message received.
func (m *mailServer) all(ctx context.Context) ([]mail, error) {
	var out []mail
	for start := 0; ; {
		var page struct {
			Total    int    `json:"total"`
			Messages []mail `json:"messages"`
		}
		if err := m.getJSON(ctx, fmt.Sprintf("/api/v1/messages?start=%d&limit=1000", start), &page); err != nil {
			return nil, err
		}
		out = append(out, page.Messages...)
		start += len(page.Messages)
		if len(page.Messages) == 0 || start >= page.Total {
			return out, nil
		}
	}
}

// alertLink finds the alert's id in an e-mail's text.
var alertLink = regexp.MustCompile(`/panel/alerts/([A-Za-z0-9_-]+)`)

// text returns a message's text body.
func (m *mailServer) text(ctx context.Context, id string) (string, error) {
	var full struct {
		Text string `json:"Text"`
	}
	err := m.getJSON(ctx, "/api/v1/message/"+url.PathEscape(id), &full)
	return full.Text, err
}

// figures are what a run measured.
type figures struct {
	agents, points, cross int
	every, heartbeat      time.Duration
	window                time.Duration
	opened                int // alerts whose crossing was captured in the window
	mailed                int // of which an e-mail arrived
	opening, resolving    int // e-mails of openings and resolutions received in the window
	p50, p99, max         time.Duration
	openP99, mailP99      time.Duration // crossing to the alert's creation, creation to its e-mail
	ackP50, ackP99        time.Duration // the agents' point batches, send to ack (the ingest's share)
	stored                float64       // point samples acknowledged per second in the window
	drained               string
	load0, load1          string
}

// measure pairs each alert opened in [w0, w1) with its e-mail (the first
// that links to it and is not a resolution's).
func measure(ctx context.Context, mp *mailServer, alerts map[string]opened, mails []mail, w0, w1 time.Time) (figures, error) {
	var f figures
	arrived := map[string]time.Time{}
	var mu sync.Mutex
	var firstErr error
	work := make(chan mail)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range work {
				txt, err := mp.text(ctx, m.ID)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if id := alertLink.FindStringSubmatch(txt); id != nil {
					if t, ok := arrived[id[1]]; !ok || m.Created.Before(t) {
						arrived[id[1]] = m.Created
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, m := range mails {
		inWindow := !m.Created.Before(w0) && m.Created.Before(w1)
		if strings.HasPrefix(m.Subject, "[Fleet RESOLVED]") {
			if inWindow {
				f.resolving++
			}
			continue
		}
		if inWindow {
			f.opening++
		}
		work <- m
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return f, firstErr
	}
	var lat, toOpen, toMail []time.Duration
	missed := 0
	for id, al := range alerts {
		if al.captured.Before(w0) || !al.captured.Before(w1) {
			continue
		}
		f.opened++
		toOpen = append(toOpen, al.created.Sub(al.captured))
		got, ok := arrived[id]
		if !ok {
			missed++
			continue
		}
		f.mailed++
		lat = append(lat, got.Sub(al.captured))
		toMail = append(toMail, got.Sub(al.created))
	}
	if f.opened == 0 {
		return f, errors.New("no alert opened in the measured window")
	}
	slices.Sort(lat)
	// An alert without its e-mail is a miss beyond every other.
	q := func(p float64) time.Duration {
		i := int(p*float64(f.opened)+0.5) - 1
		i = max(0, min(i, f.opened-1))
		if i >= len(lat) {
			return time.Duration(1<<63 - 1)
		}
		return lat[i]
	}
	f.p50, f.p99 = q(0.50), q(0.99)
	f.openP99, f.mailP99 = quantile(toOpen, 0.99), quantile(toMail, 0.99)
	if len(lat) > 0 {
		f.max = lat[len(lat)-1]
	}
	if missed > 0 {
		f.max = time.Duration(1<<63 - 1)
	}
	return f, nil
}

// quantile is the p-quantile of ds (sorted here), 0 when empty.
func quantile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[max(0, min(int(p*float64(len(ds))+0.5)-1, len(ds)-1))]
}

// load describes the agents' load.
func (f figures) load() string {
	perRound := float64(f.agents) / float64(2*f.cross) / f.every.Seconds()
	return fmt.Sprintf("%s agents (fleet-loadgen) × %d point samples every %v (%s samples/s), heartbeats every %v; each agent's first point crosses the threshold up and down every %d rounds, at a phase of its own: about %.1f crossings up/s, as many down",
		num(float64(f.agents)), f.points, f.every, num(float64(f.agents*f.points)/f.every.Seconds()), f.heartbeat, 2*f.cross, perRound)
}

func (f figures) print() {
	fmt.Println()
	fmt.Println("alert benchmark: threshold crossed at the agent to e-mail accepted by the SMTP server (figure | target)")
	fmt.Printf("  p99 %8s | < %v%s\n", dur(f.p99), target, mark(f.p99 < target))
	fmt.Printf("  p50 %8s |\n", dur(f.p50))
	fmt.Printf("    crossing to alert opened p99 %s, alert opened to e-mail accepted p99 %s\n", dur(f.openP99), dur(f.mailP99))
	fmt.Printf("    point batch send-to-ack p99 %s (p50 %s), %.0f samples/s stored\n", dur(f.ackP99), dur(f.ackP50), f.stored)
	fmt.Printf("  alerts opened in the %v window: %d, e-mailed: %d (slowest %s)\n", f.window.Round(time.Second), f.opened, f.mailed, dur(f.max))
	fmt.Printf("  e-mails accepted in the window: %d of openings, %d of resolutions (%.1f /s)\n", f.opening, f.resolving, float64(f.opening+f.resolving)/f.window.Seconds())
	fmt.Printf("  load: %s\n", f.load())
	fmt.Printf("  outbox: %s\n", f.drained)
	fmt.Printf("  box load average: %s at the window's start, %s at its end\n", f.load0, f.load1)
}

func dur(d time.Duration) string {
	if d == time.Duration(1<<63-1) {
		return "never"
	}
	return d.Round(time.Millisecond).String()
}

func mark(ok bool) string {
	if ok {
		return "  OK"
	}
	return "  MISS"
}

// record writes the rows for the report.
func (f figures) record() error {
	notes := fmt.Sprintf("%s alerts opened by crossings captured in a %v window, %s e-mailed (an alert without its e-mail counts as a miss); %s; %.1f e-mails/s accepted (openings and resolutions); one fleet-relay on SQLite, e-mail to Mailpit %s on loopback (smtp+insecure), the end is Mailpit's Created; relay, Mailpit and agents share the machine",
		num(float64(f.opened)), f.window.Round(time.Second), num(float64(f.mailed)), f.load(), float64(f.opening+f.resolving)/f.window.Seconds(), mailpit.Version)
	rows := []benchreport.Row{
		{Area: "rules", Figure: figP99, Unit: "s", Measured: sec(f.p99), Target: targetRow(),
			Notes: fmt.Sprintf("p50 %s; crossing to the alert opened (ingest and engine) p99 %s, alert opened to e-mail accepted (outbox and SMTP) p99 %s; the agents' point batches, send to ack, p99 %s, %s samples/s stored; %s",
				dur(f.p50), dur(f.openP99), dur(f.mailP99), dur(f.ackP99), num(f.stored), notes)},
		{Area: "rules", Figure: figP50, Unit: "s", Measured: sec(f.p50), Notes: "for information: the same run"},
	}
	if f.mailed == 0 {
		rows[0].Error = "no e-mail arrived"
	}
	return benchreport.Record(rows...)
}

// num prints a rate as a whole number with thousands separators.
func num(v float64) string { return benchreport.FormatValue(v, "") }

func sec(d time.Duration) float64 {
	if d == time.Duration(1<<63-1) {
		return 1e9
	}
	return d.Seconds()
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

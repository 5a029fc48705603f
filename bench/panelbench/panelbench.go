// Package panelbench measures how fast the relay renders the panel's two
// heaviest pages (DESIGN.md's target: p99 under 50 ms each): the fleet page
// of an organization with 10,000 devices, tagged, each at a glance (latest
// metrics, some OFFLINE, some with open alerts), unfiltered, worst first
// and filtered by two tags, and a device page with 7 days of metrics (2,016 samples of each of the five series). It prepares a SQLite
// file through the store's interfaces, starts the real fleet-relay binary
// on it, signs in as a panel user over HTTP and times sequential page loads
// on loopback.
package panelbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/bench/benchstore"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/password"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Config is one run.
type Config struct {
	Relay    string // path of the fleet-relay binary
	Devices  int    // devices in the organization
	Samples  int    // metric samples of the charted device, 5 minutes apart
	Requests int    // measured loads of each page
	Warmup   int    // unmeasured loads of each page first
	Dir      string // where the database goes ("" for a temporary folder)
	Log      *slog.Logger
}

// Result is one page's figures.
type Result struct {
	Name     string
	Requests int
	P50, P99 time.Duration
	Bytes    int // size of one page
	// CPU is the relay's CPU time (user and system) per load, warm-up
	// included; 0 where /proc cannot tell.
	CPU time.Duration
}

const pw = "panel bench password"

// Run prepares the data, starts the relay and measures both pages.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	dir, cleanup, err := benchstore.WorkDir(cfg.Dir, "fleet-panelbench-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	path := filepath.Join(dir, "bench.db")
	start := time.Now()
	email, charted, err := prepare(ctx, path, cfg)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	cfg.Log.Info("data ready", "devices", cfg.Devices, "samples", cfg.Samples, "took", time.Since(start).Round(time.Millisecond))

	addr, stop, pid, err := startRelay(ctx, cfg.Relay, path, dir)
	if err != nil {
		return nil, err
	}
	defer stop()
	base := "http://" + addr
	c, err := signIn(base, email)
	if err != nil {
		return nil, err
	}
	pages := []struct {
		name, path, want string
	}{
		{fmt.Sprintf("fleet page, %s devices", thousands(cfg.Devices)), "/panel/", fmt.Sprintf("Devices 1–50 of %d", cfg.Devices)},
		{fmt.Sprintf("fleet page worst first, %s devices", thousands(cfg.Devices)), "/panel/?sort=worst", fmt.Sprintf("Devices 1–50 of %d, worst first", cfg.Devices)},
		{fmt.Sprintf("fleet page filtered by two tags, %s devices", thousands(cfg.Devices)), "/panel/?tag=line-3,plant-3", fmt.Sprintf(" of %d</caption>", onLine3(cfg.Devices))},
		{fmt.Sprintf("device page, 7 days of metrics (%s samples × 5 series)", thousands(cfg.Samples)), "/panel/devices/" + charted + "?range=7d", fmt.Sprintf("%d samples in the last 7d.", cfg.Samples)},
	}
	var out []Result
	for _, p := range pages {
		cpu0 := cpuTime(pid)
		r, err := measure(c, base+p.path, p.want, cfg.Warmup, cfg.Requests)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		if cpu0 >= 0 {
			r.CPU = (cpuTime(pid) - cpu0) / time.Duration(cfg.Warmup+cfg.Requests)
		}
		r.Name = p.name
		out = append(out, r)
	}
	return out, nil
}

// onLine3 is how many of n devices prepare tags line-3.
func onLine3(n int) int { return (n + 6) / 10 }

// prepare makes the organization, its devices (each tagged plant-3 and
// line-<i mod 10>), the charted device's samples and a VIEWER, through the
// store.
func prepare(ctx context.Context, path string, cfg Config) (email, charted string, err error) {
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		return "", "", err
	}
	defer db.Close()
	org, err := db.CreateOrg(ctx, "Bench Industries")
	if err != nil {
		return "", "", err
	}
	var ids []string
	for i := 0; i < cfg.Devices; i++ {
		d, _, err := db.AddDevice(ctx, cloud.NewDevice{OrgID: org.ID, Name: fmt.Sprintf("gateway-%05d", i), SerialNumber: fmt.Sprintf("SN-%06d", i), Model: "IG-500", Location: "Plant 3, hall B"})
		if err != nil {
			return "", "", err
		}
		if i == 0 {
			charted = d.ID
		}
		ids = append(ids, d.ID)
		if err := db.SetDeviceTags(ctx, d.ID, []string{"plant-3", fmt.Sprintf("line-%d", i%10)}); err != nil {
			return "", "", err
		}
	}
	now := time.Now().UTC().Truncate(time.Second)
	samples := make([]resource.MetricSample, cfg.Samples)
	for i := range samples {
		at := now.Add(-time.Duration(cfg.Samples-1-i) * 5 * time.Minute)
		f := float64(i % 100)
		samples[i] = resource.MetricSample{CapturedAt: resource.T(at), CPUPct: 20 + f/2, MemPct: 40 + f/5, DiskUsedPct: 61.5, TempCPU: 45 + f/10, LoadAvg1: 0.5 + f/100}
	}
	// As the charted device's agent sends them: one batch of records.
	agents, err := sqlite.NewAgentStore(db, nil)
	if err != nil {
		return "", "", err
	}
	records := make([]protocol.Record, len(samples))
	for i := range samples {
		records[i] = protocol.Record{Seq: uint64(i + 1), Metric: &samples[i]}
	}
	_, err = agents.Records(ctx, agentlink.RecordsIn{Device: agentlink.Device{ID: charted, OrgID: org.ID, Model: "IG-500"}, Session: "bench", Items: records})
	if err == nil {
		err = atAGlance(ctx, db, agents, org.ID, ids[1:], now)
	}
	agents.Close()
	if err != nil {
		return "", "", err
	}
	hash, err := password.NewHasher(password.Default, 1).Hash(ctx, pw)
	if err != nil {
		return "", "", err
	}
	email = "viewer@bench.example"
	_, err = sqlite.NewPanelStore(db).CreateUser(ctx, cloud.NewUser{OrgID: org.ID, Email: email, Role: cloud.RoleViewer, PasswordHash: hash})
	return email, charted, err
}

// atAGlance gives the fleet page's columns something to show: each of
// devs three metric samples (the last a minute before now), every 50th
// device OFFLINE since an hour ago, and every 20th an open alert (every
// 60th a second one), of rules of each severity.
func atAGlance(ctx context.Context, db *sqlite.DB, agents agentlink.Store, orgID string, devs []string, now time.Time) error {
	eng := sqlite.NewAlertEngineStore(db)
	rules, err := eng.Rules(ctx, orgID)
	if err != nil {
		return err
	}
	byName := map[string]alert.Rule{}
	for _, r := range rules {
		byName[r.Name] = r
	}
	for i, id := range devs {
		dev := agentlink.Device{ID: id, OrgID: orgID, Model: "IG-500"}
		items := make([]protocol.Record, 3)
		for j := range items {
			f := float64((i*7 + j) % 100)
			items[j] = protocol.Record{Seq: uint64(j + 1), Metric: &resource.MetricSample{CapturedAt: resource.T(now.Add(-time.Duration(3-j) * time.Minute)),
				CPUPct: f, MemPct: 30 + f/2, DiskUsedPct: 50 + f/3, TempCPU: 45, LoadAvg1: 0.5}}
		}
		if _, err := agents.Records(ctx, agentlink.RecordsIn{Device: dev, Session: "bench", Items: items}); err != nil {
			return err
		}
		if i%50 == 0 {
			session := fmt.Sprintf("bench-%d", i)
			at := now.Add(-time.Hour)
			if _, err := agents.Connect(ctx, dev, session, at, at.Add(time.Minute)); err != nil {
				return err
			}
			if _, _, err := agents.Disconnect(ctx, dev, session, at, "bench"); err != nil {
				return err
			}
		}
		for k, name := range []string{"high_cpu", "disk_full"} {
			if i%(20*(1+2*k)) != 0 {
				continue
			}
			r := byName[name]
			r.Severity = resource.Severities[(i/20+k)%len(resource.Severities)]
			if _, _, err := eng.OpenAlert(ctx, alert.Opening{OrgID: orgID, DeviceID: id, Rule: r, Message: name, At: now}); err != nil {
				return err
			}
		}
	}
	return nil
}

func startRelay(ctx context.Context, relay, db, dir string) (string, func(), int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return "", nil, 0, err
	}
	pid, stop, err := StartRelay(ctx, relay, addr, db, dir)
	return addr, stop, pid, err
}

func signIn(base, email string) (*http.Client, error) { return SignIn(nil, base, email, pw) }

// measure loads url warmup times, checks the page holds want, then times n
// sequential loads (request sent to body read).
func measure(c *http.Client, url, want string, warmup, n int) (Result, error) {
	var r Result
	times := make([]time.Duration, 0, n)
	for i := 0; i < warmup+n; i++ {
		t := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			return r, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(t)
		if err != nil {
			return r, err
		}
		if resp.StatusCode != http.StatusOK {
			return r, fmt.Errorf("status %d", resp.StatusCode)
		}
		if i == 0 && !strings.Contains(string(body), want) {
			return r, fmt.Errorf("the page does not say %q", want)
		}
		r.Bytes = len(body)
		if i >= warmup {
			times = append(times, d)
		}
	}
	slices.Sort(times)
	r.Requests = n
	r.P50 = times[n/2]
	r.P99 = times[min(n-1, n*99/100)]
	return r, nil
}

// cpuTime is the process's CPU time so far (user and system, from
// /proc/PID/stat in clock ticks, taken as 100 a second), or -1 where it
// cannot be read.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command's closing parenthesis: state is the
	// first, utime the 12th and stime the 13th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	var user, sys int64
	if _, err := fmt.Sscan(f[11]+" "+f[12], &user, &sys); err != nil {
		return -1
	}
	return time.Duration(user+sys) * 10 * time.Millisecond
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

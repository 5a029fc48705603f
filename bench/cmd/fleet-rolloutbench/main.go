// Command fleet-rolloutbench measures agent rollouts (issue 28, DESIGN.md
// "Performance targets": 1,000 simulated agents updated in three waves,
// each agent's binary swapped and healthy, in < 5 minutes plus the health
// windows; a bad release stopped after maxFailures). It runs the real
// fleet-relay on a SQLite file with --agents devices, adds a release (the
// --release file, bin/fleet-agent by default, signed with minisign as an
// operator does) and the same file signed by another key, and connects one
// simulated agent per device that answers update commands as fleet-agent
// does: it downloads the release from the relay over HTTP with its device
// token (size and SHA-256 checked; a 503 from a relay serving as many
// downloads as it allows is asked again after its Retry-After), verifies
// the minisign signature
// (github.com/jedisct1/go-minisign), swaps the file into its own directory
// keeping the previous one, reconnects announcing the new version, and
// reports healthy after the order's healthFor.
//
// Two rollouts run: the good release to every device in --waves, timed
// from POST /rollouts to completed, printed less the health windows
// (one per wave) with the download throughput of the relay; then the
// badly signed release with --max-failures, which must stop within its
// first wave. The figures are printed as Go benchmark results for
// `fleet-benchreport gotest --set rollout` (`make bench-rollout`).
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/jedisct1/go-minisign"

	"github.com/fleet/fleet/bench/benchstore"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/fleetproc"
)

func main() {
	var o options
	flag.StringVar(&o.relay, "relay", "bin/fleet-relay", "fleet-relay binary")
	flag.StringVar(&o.release, "release", "bin/fleet-agent", "file rolled out as the release")
	flag.IntVar(&o.agents, "agents", 1000, "simulated agents (one device each)")
	waves := flag.String("waves", "1,10,100", "the good rollout's cumulative waves (percent)")
	flag.DurationVar(&o.healthFor, "health-for", 10*time.Second, "the rollouts' healthFor")
	flag.IntVar(&o.maxFailures, "max-failures", 5, "the bad rollout's maxFailures")
	flag.StringVar(&o.dir, "dir", "", "work directory (default: a temporary one, removed after)")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "give up after this long")
	flag.DurationVar(&o.retryCap, "retry-cap", 0, "wait at most this long before asking again after a 503 (0: the relay's Retry-After), to see what a shorter Retry-After would give")
	flag.Parse()
	for _, w := range strings.Split(*waves, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet-rolloutbench: --waves:", err)
			os.Exit(2)
		}
		o.waves = append(o.waves, p)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-rolloutbench:", err)
		os.Exit(1)
	}
}

type options struct {
	relay, release, dir string
	agents, maxFailures int
	waves               []int
	healthFor, timeout  time.Duration
	retryCap            time.Duration
}

const (
	fromVersion = "1.0.0"
	goodVersion = "2.0.0"
	badVersion  = "2.0.1"
)

func run(o options) error {
	dir, cleanup, err := benchstore.WorkDir(o.dir, "fleet-rolloutbench-")
	if err != nil {
		return err
	}
	defer cleanup()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	db := filepath.Join(dir, "fleet.db")
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		return err
	}
	ten, err := benchstore.Provision(ctx, st, "Rollouts", o.agents)
	st.Close()
	if err != nil {
		return err
	}
	good, err := newKey(dir, "good")
	if err != nil {
		return err
	}
	other, err := newKey(dir, "other")
	if err != nil {
		return err
	}
	if _, err := os.Stat(o.release); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	for _, r := range []struct {
		version string
		key     key
	}{{goodVersion, good}, {badVersion, other}} {
		sig, err := r.key.sign(o.release, filepath.Join(dir, r.version+".minisig"))
		if err != nil {
			return err
		}
		if out, err := exec.Command(o.relay, "release", "add", "--db", db, "--org", ten.Org, "--version", r.version,
			"--arch", fleetproc.HostArch(), "--file", o.release, "--sig", sig).CombinedOutput(); err != nil {
			return fmt.Errorf("fleet-relay release add %s: %v\n%s", r.version, err, out)
		}
	}

	addr, err := freeAddr()
	if err != nil {
		return err
	}
	relayLog := filepath.Join(dir, "relay.log")
	relay, err := fleetproc.Run("fleet-relay", relayLog, []string{"FLEET_DB=" + db}, o.relay, "serve", "--listen", addr,
		"--rate-limit", "1000000", "--log-level", "warn")
	if err != nil {
		return err
	}
	defer relay.Shutdown(30 * time.Second)
	base := "http://" + addr
	if err := waitReady(ctx, base, relay); err != nil {
		return fmt.Errorf("%w (see %s)", err, relayLog)
	}

	pub, err := minisign.NewPublicKeyFromFile(good.pub)
	if err != nil {
		return err
	}
	sw := &swarm{base: base, pub: pub, healthFor: o.healthFor, retryCap: o.retryCap, verify: make(chan struct{}, 4),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 0}}}
	for i, tok := range ten.Tokens {
		d := filepath.Join(dir, "agents", strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "fleet-agent"), []byte(fromVersion), 0o755); err != nil {
			return err
		}
		sw.agents = append(sw.agents, &simAgent{sw: sw, idx: i, token: tok, dir: d, version: fromVersion, cmds: map[string]*protocol.CommandStatus{}})
	}
	t0 := time.Now()
	if err := sw.connectAll(ctx, 64); err != nil {
		return err
	}
	defer sw.closeAll()
	go sw.heartbeats(ctx)
	fmt.Fprintf(os.Stderr, "rollout bench: %d agents connected in %s\n", o.agents, time.Since(t0).Round(time.Millisecond))
	api := &apiClient{base: base, key: ten.Key, c: &http.Client{Timeout: 30 * time.Second}}

	// The good release, in waves.
	start := time.Now()
	id, err := api.createRollout(ctx, resource.NewRollout{Version: goodVersion, Waves: o.waves, MaxFailures: ptr(0), HealthFor: o.healthFor.String()})
	if err != nil {
		return err
	}
	r, err := api.waitEnd(ctx, id)
	if err != nil {
		return err
	}
	total := time.Since(start)
	if r.State != resource.RolloutCompleted || r.Counts[resource.RolloutDeviceHealthy] != o.agents {
		return fmt.Errorf("the rollout of %s ended %s (%v), want completed with %d healthy; reason %v", goodVersion, r.State, r.Counts, o.agents, deref(r.Reason))
	}
	for _, a := range sw.agents {
		if v := a.onDisk(); v != "swapped" {
			return fmt.Errorf("agent %d: its binary was not swapped (%s)", a.idx, v)
		}
	}
	windows := time.Duration(len(o.waves)) * o.healthFor
	bytesDown, busy := sw.downloads()
	mbps := float64(bytesDown) / 1e6 / busy.Seconds()
	fmt.Fprintf(os.Stderr, "rollout bench: %s to %d agents in %d waves: %s (%s less %d health windows of %s); %.0f MB downloaded at %.1f MB/s over %s of downloading; %d downloads answered 503 and asked again\n",
		goodVersion, o.agents, len(o.waves), total.Round(time.Millisecond), (total - windows).Round(time.Millisecond), len(o.waves), o.healthFor,
		float64(bytesDown)/1e6, mbps, busy.Round(time.Millisecond), sw.busy.Load())

	// The bad release: refused by every agent it reaches (signed by
	// another key); stopped after maxFailures.
	sw.resetDownloads()
	start = time.Now()
	id, err = api.createRollout(ctx, resource.NewRollout{Version: badVersion, Waves: o.waves, MaxFailures: ptr(o.maxFailures), HealthFor: o.healthFor.String()})
	if err != nil {
		return err
	}
	bad, err := api.waitEnd(ctx, id)
	if err != nil {
		return err
	}
	stopIn := time.Since(start)
	reached := bad.Total - bad.Counts[resource.RolloutDevicePending] - bad.Counts[resource.RolloutDeviceSkipped]
	failures := bad.Counts[resource.RolloutDeviceFailed] + bad.Counts[resource.RolloutDeviceRolledBack]
	firstWave := (o.waves[0]*o.agents + 99) / 100
	fmt.Fprintf(os.Stderr, "rollout bench: bad release %s: %s in %s after %d failures (maxFailures %d), %d devices reached (first wave %d); reason %s\n",
		badVersion, bad.State, stopIn.Round(time.Millisecond), failures, o.maxFailures, reached, firstWave, deref(bad.Reason))
	if bad.State != resource.RolloutStopped {
		return fmt.Errorf("the rollout of the badly signed %s ended %s, want stopped", badVersion, bad.State)
	}
	for _, a := range sw.agents {
		if v := a.running(); v != goodVersion {
			return fmt.Errorf("agent %d runs %s after the bad release, want %s", a.idx, v, goodVersion)
		}
	}

	// go test's benchmark lines: name, iterations and values, tab-separated.
	fmt.Printf("BenchmarkRollout\t1\t%d ns/op\t%.3f less-health-s\t%.3f total-s\t%.2f download-MB/s\t%d agents\t%d waves\t%.0f health-s\t%d busy-503\n",
		total.Nanoseconds(), (total - windows).Seconds(), total.Seconds(), mbps, o.agents, len(o.waves), windows.Seconds(), sw.busy.Load())
	fmt.Printf("BenchmarkRolloutBadRelease\t1\t%d ns/op\t%d reached\t%d first-wave\t%d failures\t%d max-failures\t%.3f stop-s\n",
		stopIn.Nanoseconds(), reached, firstWave, failures, o.maxFailures, stopIn.Seconds())
	return nil
}

func ptr[T any](v T) *T { return &v }

func deref(s *string) string {
	if s == nil {
		return "(none)"
	}
	return *s
}

// key is a minisign key pair made with Debian's minisign (the secret key
// unencrypted, -W).
type key struct{ pub, sec string }

func newKey(dir, name string) (key, error) {
	k := key{pub: filepath.Join(dir, name+".pub"), sec: filepath.Join(dir, name+".key")}
	if out, err := exec.Command("minisign", "-G", "-W", "-p", k.pub, "-s", k.sec).CombinedOutput(); err != nil {
		return k, fmt.Errorf("minisign -G (make minisign installs it): %v\n%s", err, out)
	}
	return k, nil
}

func (k key) sign(file, sig string) (string, error) {
	if out, err := exec.Command("minisign", "-S", "-s", k.sec, "-m", file, "-x", sig, "-t", "fleet-agent rollout bench").CombinedOutput(); err != nil {
		return "", fmt.Errorf("minisign -S: %v\n%s", err, out)
	}
	return sig, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitReady(ctx context.Context, base string, p *fleetproc.Proc) error {
	for {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if p.Exited() {
			return errors.New("fleet-relay exited")
		}
		select {
		case <-ctx.Done():
			return errors.New("fleet-relay not ready")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// apiClient is the public API's client for the rollouts.
type apiClient struct {
	base, key string
	c         *http.Client
}

func (a *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+"/api/v1/public"+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}

func (a *apiClient) createRollout(ctx context.Context, nr resource.NewRollout) (string, error) {
	var r resource.One[resource.Rollout]
	if err := a.do(ctx, "POST", "/rollouts", nr, &r); err != nil {
		return "", err
	}
	return r.Data.ID, nil
}

// waitEnd polls the rollout until it is no longer running.
func (a *apiClient) waitEnd(ctx context.Context, id string) (resource.RolloutDetail, error) {
	for {
		var r resource.One[resource.Rollout]
		if err := a.do(ctx, "GET", "/rollouts/"+id, nil, &r); err != nil {
			return resource.RolloutDetail{}, err
		}
		if r.Data.State != resource.RolloutRunning {
			return resource.RolloutDetail{Rollout: r.Data}, nil
		}
		select {
		case <-ctx.Done():
			return resource.RolloutDetail{}, fmt.Errorf("rollout %s still running (%v): %w", id, r.Data.Counts, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// swarm is the simulated agents.
type swarm struct {
	base      string
	pub       minisign.PublicKey
	healthFor time.Duration
	retryCap  time.Duration // with a 503, wait at most this long (0: Retry-After)
	http      *http.Client
	verify    chan struct{} // bounds the signatures verified at once (each reads the file whole)
	agents    []*simAgent
	busy      atomic.Int64 // downloads answered 503 (the relay at its limit), asked again

	mu    sync.Mutex
	spans []span // downloads
}

// span is one download: when and how many bytes.
type span struct {
	from, to time.Time
	bytes    int64
}

func (s *swarm) connectAll(ctx context.Context, conc int) error {
	sem := make(chan struct{}, conc)
	errc := make(chan error, len(s.agents))
	var wg sync.WaitGroup
	for _, a := range s.agents {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := a.connect(ctx); err != nil {
				errc <- fmt.Errorf("agent %d: %w", a.idx, err)
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

func (s *swarm) closeAll() {
	for _, a := range s.agents {
		a.mu.Lock()
		a.closing = true
		if a.ws != nil {
			a.ws.Close(websocket.StatusNormalClosure, "bench done")
		}
		a.mu.Unlock()
	}
}

// heartbeats sends each agent's heartbeat every 30 s (the interval its
// hello announces), spread over the interval.
func (s *swarm) heartbeats(ctx context.Context) {
	const every = 30 * time.Second
	tick := time.NewTicker(every / time.Duration(len(s.agents)))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % len(s.agents) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.agents[i].heartbeat()
	}
}

func (s *swarm) addSpan(sp span) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, sp)
}

func (s *swarm) resetDownloads() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = nil
}

// downloads returns the bytes downloaded and the time during which at
// least one download ran (the union of the downloads' spans).
func (s *swarm) downloads() (int64, time.Duration) {
	s.mu.Lock()
	spans := slices.Clone(s.spans)
	s.mu.Unlock()
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	var n int64
	var busy time.Duration
	var end time.Time
	for _, sp := range spans {
		n += sp.bytes
		switch {
		case sp.from.After(end):
			busy += sp.to.Sub(sp.from)
			end = sp.to
		case sp.to.After(end):
			busy += sp.to.Sub(end)
			end = sp.to
		}
	}
	return n, busy
}

// simAgent is one simulated agent: the link, and updates as fleet-agent
// runs them (each command id taken once; its last status kept).
type simAgent struct {
	sw    *swarm
	idx   int
	token string
	dir   string

	mu       sync.Mutex
	ws       *websocket.Conn
	closing  bool
	version  string
	updating bool
	cmds     map[string]*protocol.CommandStatus
}

// connect opens the agent's link: hello with its version, welcome.
func (a *simAgent) connect(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(a.sw.base, "http") + protocol.Path
	ws, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + a.token}},
		Subprotocols: []string{protocol.Subprotocol},
	})
	if err != nil {
		return err
	}
	ws.SetReadLimit(protocol.MaxMessageBytes)
	a.mu.Lock()
	version := a.version
	a.mu.Unlock()
	hello := protocol.Hello{AgentVersion: version, Arch: fleetproc.HostArch(), FirmwareVersion: "fw-1", Model: "IG-500",
		DeviceName: fmt.Sprintf("gw-%05d", a.idx), Timezone: "UTC", Codecs: []protocol.Codec{protocol.CBOR},
		HeartbeatInterval: protocol.Duration{Duration: 30 * time.Second}, MetricsInterval: protocol.Duration{Duration: 5 * time.Minute}}
	if err := write(dctx, ws, protocol.JSON, protocol.Message{Type: protocol.TypeHello, Hello: &hello}); err != nil {
		ws.CloseNow()
		return err
	}
	m, err := read(dctx, ws)
	if err != nil || m.Type != protocol.TypeWelcome {
		ws.CloseNow()
		return fmt.Errorf("no welcome: %v %v", m.Type, err)
	}
	a.mu.Lock()
	a.ws = ws
	a.mu.Unlock()
	go a.readLoop(ws)
	return nil
}

// readLoop answers the relay's commands until the link ends, then
// reconnects unless the agent closed it itself.
func (a *simAgent) readLoop(ws *websocket.Conn) {
	for {
		m, err := read(context.Background(), ws)
		if err != nil {
			break
		}
		if m.Type == protocol.TypeCommand && m.Command != nil {
			a.command(*m.Command)
		}
	}
	ws.CloseNow()
	a.mu.Lock()
	mine := a.ws == ws
	if mine {
		a.ws = nil
	}
	closing := a.closing
	a.mu.Unlock()
	if mine && !closing {
		a.reconnect()
	}
}

func (a *simAgent) reconnect() {
	for wait := 200 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		a.mu.Lock()
		closing := a.closing
		a.mu.Unlock()
		if closing || a.connect(context.Background()) == nil {
			return
		}
		time.Sleep(wait)
	}
}

// command takes a command once; a command sent again is answered with its
// current status.
func (a *simAgent) command(c protocol.Command) {
	a.mu.Lock()
	if st, ok := a.cmds[c.ID]; ok {
		cur := *st
		a.mu.Unlock()
		a.send(cur)
		return
	}
	st := &protocol.CommandStatus{ID: c.ID, State: protocol.CommandAccepted, Version: a.version}
	a.cmds[c.ID] = st
	a.mu.Unlock()
	if c.Kind != protocol.CommandUpdate || c.Update == nil {
		a.report(c.ID, protocol.CommandFailed, "the simulated agent only updates")
		return
	}
	go a.update(c.ID, *c.Update)
}

// report records a command's status and sends it.
func (a *simAgent) report(id, state, msg string) {
	a.mu.Lock()
	st := a.cmds[id]
	st.State, st.Error, st.Version = state, msg, a.version
	a.updating = state == protocol.CommandDownloading || state == protocol.CommandInstalling
	cur := *st
	a.mu.Unlock()
	a.send(cur)
}

func (a *simAgent) send(st protocol.CommandStatus) {
	a.mu.Lock()
	ws := a.ws
	a.mu.Unlock()
	if ws == nil {
		return // sent again when the relay resends the command after the welcome
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	write(ctx, ws, protocol.CBOR, protocol.Message{Type: protocol.TypeCommandStatus, CommandStatus: &st})
}

func (a *simAgent) heartbeat() {
	a.mu.Lock()
	ws := a.ws
	status := resource.StatusOnline
	if a.updating {
		status = resource.StatusUpdating
	}
	a.mu.Unlock()
	if ws == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	write(ctx, ws, protocol.CBOR, protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{
		At: resource.T(time.Now()), Status: status, Channels: []protocol.ChannelState{}}})
}

// update runs an update as fleet-agent does: download (bounded, checked),
// signature, swap, the new version's link, healthy after healthFor.
func (a *simAgent) update(id string, o protocol.UpdateOrder) {
	a.report(id, protocol.CommandDownloading, "")
	next := filepath.Join(a.dir, "fleet-agent.new")
	if err := a.download(o, next); err != nil {
		a.report(id, protocol.CommandFailed, "download: "+err.Error())
		return
	}
	if err := a.verify(next, o.Signature); err != nil {
		os.Remove(next)
		a.report(id, protocol.CommandFailed, err.Error())
		return
	}
	a.report(id, protocol.CommandInstalling, "")
	bin := filepath.Join(a.dir, "fleet-agent")
	if err := os.Rename(bin, filepath.Join(a.dir, "previous")); err != nil {
		a.report(id, protocol.CommandFailed, err.Error())
		return
	}
	if err := os.Rename(next, bin); err != nil {
		a.report(id, protocol.CommandFailed, err.Error())
		return
	}
	// The new binary runs: a new link announcing the new version.
	a.mu.Lock()
	a.version = o.Version
	ws := a.ws
	a.ws = nil
	a.mu.Unlock()
	if ws != nil {
		ws.Close(websocket.StatusGoingAway, "update")
	}
	a.reconnect()
	time.Sleep(o.HealthFor.Duration)
	a.report(id, protocol.CommandHealthy, "")
}

// download fetches the release into to. A relay serving as many downloads
// as it allows answers 503 with Retry-After: the agent waits that long
// and asks again, for as long as cloud.RolloutDownloadGrace.
func (a *simAgent) download(o protocol.UpdateOrder, to string) error {
	if o.Size <= 0 || o.Size > cloud.MaxReleaseBytes {
		return fmt.Errorf("size %d out of bounds", o.Size)
	}
	give := time.Now().Add(cloud.RolloutDownloadGrace)
	var resp *http.Response
	for {
		req, err := http.NewRequest("GET", a.sw.base+o.Path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+a.token)
		resp, err = a.sw.http.Do(req)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(give) {
			break
		}
		resp.Body.Close()
		a.sw.busy.Add(1)
		wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || wait < 1 {
			wait = 1
		}
		d := time.Duration(wait)*time.Second + time.Duration(rand.IntN(1000))*time.Millisecond
		if a.sw.retryCap > 0 {
			d = min(d, a.sw.retryCap+time.Duration(rand.IntN(1000))*time.Millisecond)
		}
		time.Sleep(d)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", o.Path, resp.Status)
	}
	from := time.Now()
	f, err := os.Create(to)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, o.Size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	a.sw.addSpan(span{from: from, to: time.Now(), bytes: n})
	if n != o.Size {
		return fmt.Errorf("%d bytes, want %d", n, o.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != o.SHA256 {
		return fmt.Errorf("sha256 %s, want %s", got, o.SHA256)
	}
	return nil
}

func (a *simAgent) verify(file, sigText string) error {
	sig, err := minisign.DecodeSignature(sigText)
	if err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	a.sw.verify <- struct{}{}
	defer func() { <-a.sw.verify }()
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if ok, err := a.sw.pub.Verify(b, sig); !ok {
		return fmt.Errorf("signature does not verify against the update key: %v", err)
	}
	return nil
}

// running is the version the agent runs.
func (a *simAgent) running() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.version
}

// onDisk says whether the agent's binary was swapped for the release.
func (a *simAgent) onDisk() string {
	fi, err := os.Stat(filepath.Join(a.dir, "fleet-agent"))
	if err != nil {
		return err.Error()
	}
	if fi.Size() == int64(len(fromVersion)) {
		return "still the old one"
	}
	return "swapped"
}

func write(ctx context.Context, ws *websocket.Conn, codec protocol.Codec, m protocol.Message) error {
	b, err := codec.Marshal(&m)
	if err != nil {
		return err
	}
	typ := websocket.MessageText
	if codec.Binary() {
		typ = websocket.MessageBinary
	}
	return ws.Write(ctx, typ, b)
}

func read(ctx context.Context, ws *websocket.Conn) (protocol.Message, error) {
	var m protocol.Message
	typ, b, err := ws.Read(ctx)
	if err != nil {
		return m, err
	}
	codec := protocol.JSON
	if typ == websocket.MessageBinary {
		codec = protocol.CBOR
	}
	return m, codec.Unmarshal(b, &m)
}

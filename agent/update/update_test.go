package update_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/agent/update"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/minisign"
)

// builds holds the test program (testdata/updatee) built once per
// version and behaviour, by TestMain.
var builds string

// The versions built: the one installed, and the releases.
const (
	vOld      = "1.0.0"
	vGood     = "2.0.0"
	vExit     = "2.1.0" // exits at once
	vNoLink   = "2.2.0" // never connects
	vNewFail  = "2.3.0" // a point that read before reads with an error
	vHang     = "2.4.0" // hangs before anything
	healthFor = 2 * time.Second
	token     = "device-token-for-the-test"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleet-update-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	builds = dir
	code := func() int {
		defer os.RemoveAll(dir)
		var wg sync.WaitGroup
		errs := make(chan string, 6)
		for v, b := range map[string]string{vOld: "good", vGood: "good", vExit: "exit", vNoLink: "noconnect", vNewFail: "newfail", vHang: "hang"} {
			wg.Go(func() {
				cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+v+" -X main.behavior="+b,
					"-o", filepath.Join(dir, "updatee-"+v), "./testdata/updatee")
				cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
				if out, err := cmd.CombinedOutput(); err != nil {
					errs <- fmt.Sprintf("go build updatee %s: %v\n%s", v, err, out)
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			fmt.Fprintln(os.Stderr, e)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// relay serves releases as the relay's agent endpoint does: GET with the
// device token, Range honoured (http.ServeContent) unless ignoreRange; cut
// drops the connection after that many bytes of the first response.
type relay struct {
	*httptest.Server
	mu          sync.Mutex
	files       map[string][]byte
	ranges      []string
	ignoreRange bool
	cut         int
	busy        int // answer that many requests 503 with Retry-After: 1
}

func newRelay(t *testing.T) *relay {
	r := &relay{files: map[string][]byte{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		r.mu.Lock()
		b, ok := r.files[req.URL.Path]
		r.ranges = append(r.ranges, req.Header.Get("Range"))
		cut := r.cut
		r.cut = 0
		busy := r.busy > 0
		if busy {
			r.busy--
		}
		ignore := r.ignoreRange
		r.mu.Unlock()
		if !ok {
			http.NotFound(w, req)
			return
		}
		if busy { // as the relay answers with every download slot taken
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		if cut > 0 {
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b[:cut])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		if ignore {
			req.Header.Del("Range")
		}
		http.ServeContent(w, req, "fleet-agent", time.Time{}, strings.NewReader(string(b)))
	}))
	t.Cleanup(r.Close)
	return r
}

// release publishes the build of version v signed by key and returns the
// update command for it.
func (r *relay) release(t *testing.T, v string, key minisign.Key) protocol.Command {
	t.Helper()
	src := filepath.Join(builds, "updatee-"+v)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	signed := filepath.Join(t.TempDir(), "fleet-agent")
	if err := os.WriteFile(signed, b, 0o755); err != nil {
		t.Fatal(err)
	}
	_, sig := key.Sign(t, signed, "fleet-agent "+v)
	sum := sha256.Sum256(b)
	id := "rel" + strings.ReplaceAll(v, ".", "")
	r.mu.Lock()
	r.files[protocol.ReleasePath(id)] = b
	r.mu.Unlock()
	return protocol.Command{ID: "cmd-" + id, Kind: protocol.CommandUpdate, Update: &protocol.UpdateOrder{
		RolloutID: "ro1", ReleaseID: id, Version: v, Path: protocol.ReleasePath(id), Size: int64(len(b)),
		SHA256: hex.EncodeToString(sum[:]), Signature: sig, HealthFor: protocol.Duration{Duration: healthFor},
	}}
}

// gateway is an installed agent: its binary (a copy of the old version in
// a folder of its own) and its state directory.
type gateway struct {
	t            *testing.T
	bin, state   string
	relay, key   string
	mu           sync.Mutex
	pgids        []int
	stopSupervis chan struct{}
	supervised   sync.WaitGroup
}

func newGateway(t *testing.T, r *relay, key string) *gateway {
	t.Helper()
	dir := t.TempDir()
	g := &gateway{t: t, bin: filepath.Join(dir, "lib", "fleet-agent"), state: filepath.Join(dir, "state"), relay: r.URL, key: key}
	for _, d := range []string{filepath.Dir(g.bin), g.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(builds, "updatee-"+vOld))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.kill)
	return g
}

// order leaves the command for the agent's next start.
func (g *gateway) order(cmd protocol.Command) {
	b, _ := json.Marshal(cmd)
	if err := os.WriteFile(filepath.Join(g.state, "order.json"), b, 0o600); err != nil {
		g.t.Fatal(err)
	}
}

// start starts the agent in a process group of its own (the guard and
// what it starts stay in it), with extra environment.
func (g *gateway) start(env ...string) *exec.Cmd {
	g.t.Helper()
	cmd := exec.Command(g.bin, "--state", g.state, "--relay", g.relay, "--key", g.key)
	cmd.Env = append(append(os.Environ(), "FLEET_TOKEN="+token), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.mu.Lock()
	g.pgids = append(g.pgids, cmd.Process.Pid)
	g.mu.Unlock()
	return cmd
}

// supervise runs the agent as systemd's Restart=always does: when the
// main process ends, its whole group is killed (the control group) and
// the binary path started again, without the first start's environment.
func (g *gateway) supervise(env ...string) {
	stop := make(chan struct{})
	g.stopSupervis = stop
	g.supervised.Add(1)
	go func() {
		defer g.supervised.Done()
		for first := true; ; first = false {
			var cmd *exec.Cmd
			if first {
				cmd = g.start(env...)
			} else {
				cmd = g.start()
			}
			cmd.Wait()
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

// kill ends every process the gateway started.
func (g *gateway) kill() {
	if g.stopSupervis != nil {
		close(g.stopSupervis)
		g.stopSupervis = nil
	}
	killAll := func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, p := range g.pgids {
			syscall.Kill(-p, syscall.SIGKILL)
		}
	}
	killAll()
	g.supervised.Wait()
	killAll()
}

// reports returns the statuses reported for command id.
func (g *gateway) reports(id string) []protocol.CommandStatus {
	b, _ := os.ReadFile(filepath.Join(g.state, "reports.jsonl"))
	var out []protocol.CommandStatus
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		var st protocol.CommandStatus
		if json.Unmarshal(sc.Bytes(), &st) == nil && st.ID == id {
			out = append(out, st)
		}
	}
	return out
}

// final waits for the command's last state (healthy, failed, rolled_back)
// and for the journal to be cleared.
func (g *gateway) final(id string, within time.Duration) protocol.CommandStatus {
	g.t.Helper()
	deadline := time.Now().Add(within)
	for {
		rs := g.reports(id)
		if n := len(rs); n > 0 {
			switch last := rs[n-1]; last.State {
			case protocol.CommandHealthy, protocol.CommandFailed, protocol.CommandRolledBack:
				if _, err := os.Stat(filepath.Join(g.state, "update", "journal.json")); os.IsNotExist(err) {
					return last
				}
			}
		}
		if time.Now().After(deadline) {
			j, _ := os.ReadFile(filepath.Join(g.state, "update", "journal.json"))
			g.t.Fatalf("no final state for %s within %v: reports %+v, journal %s", id, within, rs, j)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// onDisk is the version the binary path holds (`fleet-agent --version`).
func (g *gateway) onDisk() string {
	g.t.Helper()
	out, err := exec.Command(g.bin, "--version").Output()
	if err != nil {
		g.t.Fatalf("%s --version: %v", g.bin, err)
	}
	return strings.TrimSpace(string(out))
}

// running waits until the last agent started is alive for a while with
// version v (and no later one starts).
func (g *gateway) running(v string) {
	g.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(g.state, "starts.log"))
		lines := strings.Fields(strings.ReplaceAll(string(b), "\n", " "))
		if n := len(lines); n >= 2 && lines[n-2] == v {
			pid, _ := strconv.Atoi(lines[n-1])
			time.Sleep(500 * time.Millisecond)
			b2, _ := os.ReadFile(filepath.Join(g.state, "starts.log"))
			if string(b2) == string(b) && syscall.Kill(pid, 0) == nil && procExe(pid) != "" {
				return
			}
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("no agent %s running; starts:\n%s", v, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// procExe is the binary a process runs ("" when it is gone or a zombie).
func procExe(pid int) string {
	p, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return p
}

// endsOn waits for the command's final state and checks that the
// gateway ends on one working version: the state reported on version
// (with errorPart in its error), that version on disk and running, and
// nothing of the update left behind.
func (g *gateway) endsOn(id, state, version, errorPart string, within time.Duration) {
	g.t.Helper()
	st := g.final(id, within)
	if st.State != state || st.Version != version || !strings.Contains(st.Error, errorPart) {
		g.t.Fatalf("final %+v, want %s on %s saying %q", st, state, version, errorPart)
	}
	if v := g.onDisk(); v != version {
		g.t.Errorf("binary on disk is %s, want %s", v, version)
	}
	g.running(version)
	for _, p := range []string{g.bin + ".new", g.bin + ".new.tmp", filepath.Join(g.state, "update", "journal.json")} {
		if _, err := os.Stat(p); err == nil {
			g.t.Errorf("left behind: %s", p)
		}
	}
}

// updating makes a relay, a key, a gateway on the old version and the
// command that updates it to v, left for the gateway's next start.
func updating(t *testing.T, v string) (*relay, *gateway, protocol.Command) {
	r := newRelay(t)
	key := minisign.NewKey(t)
	g := newGateway(t, r, key.Pub)
	cmd := r.release(t, v, key)
	g.order(cmd)
	return r, g, cmd
}

func TestGoodUpdateIsKept(t *testing.T) {
	t.Parallel()
	_, g, cmd := updating(t, vGood)
	g.start()
	g.endsOn(cmd.ID, protocol.CommandHealthy, vGood, "", 30*time.Second)
	var states []string
	for _, s := range g.reports(cmd.ID) {
		states = append(states, s.State)
	}
	if got := strings.Join(states, " "); got != "downloading installing healthy" {
		t.Errorf("reported %q", got)
	}
	prev := filepath.Join(g.state, "update", "previous")
	if out, err := exec.Command(prev, "--version").Output(); err != nil || strings.TrimSpace(string(out)) != vOld {
		t.Errorf("%s --version: %q %v, want %s", prev, out, err, vOld)
	}
}

// TestRefusedUpdates: a signature of another key, a signature of another
// file, a checksum that does not match and an agent with no key each fail
// the command with a clear error, and nothing new ever runs.
func TestRefusedUpdates(t *testing.T) {
	for _, tt := range []struct {
		name  string
		edit  func(t *testing.T, r *relay, cmd *protocol.Command, key *string)
		error string
	}{
		{"another key", func(t *testing.T, r *relay, cmd *protocol.Command, key *string) {
			other := minisign.NewKey(t)
			*cmd = r.release(t, vGood, other)
		}, "does not verify against the update key"},
		{"signature of another file", func(t *testing.T, r *relay, cmd *protocol.Command, key *string) {
			cmd.Update.Signature = r.release(t, vExit, minisign.Key{Pub: *key, Sec: filepath.Join(filepath.Dir(*key), "update.key")}).Update.Signature
		}, "does not verify against the update key"},
		{"checksum", func(t *testing.T, r *relay, cmd *protocol.Command, key *string) {
			cmd.Update.SHA256 = strings.Repeat("ab", 32)
		}, "SHA-256"},
		{"no key", func(t *testing.T, r *relay, cmd *protocol.Command, key *string) { *key = "" }, "no update key"},
		{"no signature", func(t *testing.T, r *relay, cmd *protocol.Command, key *string) { cmd.Update.Signature = "" }, "no signature"},
		{"larger than announced", func(t *testing.T, r *relay, cmd *protocol.Command, key *string) { cmd.Update.Size -= 100 }, "larger than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRelay(t)
			key := minisign.NewKey(t)
			cmd := r.release(t, vGood, key)
			pub := key.Pub
			tt.edit(t, r, &cmd, &pub)
			g := newGateway(t, r, pub)
			g.order(cmd)
			g.start()
			g.endsOn(cmd.ID, protocol.CommandFailed, vOld, tt.error, 30*time.Second)
			b, _ := os.ReadFile(filepath.Join(g.state, "starts.log"))
			if strings.Count(string(b), "\n") != 1 {
				t.Errorf("something else started:\n%s", b)
			}
		})
	}
}

// TestBadReleasesRollBack: a release that exits at once, one that never
// connects, one whose field bus reads break, and one that hangs are each
// rolled back with the reason, the old binary on disk and running again,
// with no supervisor at all (the guard restarts the old binary).
func TestBadReleasesRollBack(t *testing.T) {
	for _, tt := range []struct {
		version, reason string
		within          time.Duration
	}{
		{vExit, "stopped 3 times during its trial", 30 * time.Second},
		{vNoLink, "never connected to a relay within healthFor 2s", 30 * time.Second},
		{vNewFail, "reads with errors what read before the update: rs485-1.temp", 30 * time.Second},
		{vHang, "gave no verdict within healthFor", 60 * time.Second},
	} {
		t.Run(tt.version, func(t *testing.T) {
			t.Parallel()
			_, g, cmd := updating(t, tt.version)
			g.start()
			g.endsOn(cmd.ID, protocol.CommandRolledBack, vOld, tt.reason, tt.within)
		})
	}
}

// TestBadReleaseUnderSupervisor: the same as systemd runs it (the control
// group killed with the main process, the binary path restarted).
func TestBadReleaseUnderSupervisor(t *testing.T) {
	t.Parallel()
	_, g, cmd := updating(t, vExit)
	g.supervise()
	g.endsOn(cmd.ID, protocol.CommandRolledBack, vOld, "stopped 3 times", 30*time.Second)
}

// TestResumedDownload: a transfer cut in the middle resumes with Range
// from what the part file holds; a relay that ignores Range is read from
// the start again.
func TestResumedDownload(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignoreRange=%v", ignore), func(t *testing.T) {
			t.Parallel()
			r, g, cmd := updating(t, vGood)
			r.mu.Lock()
			r.cut, r.ignoreRange = int(cmd.Update.Size/2), ignore
			r.mu.Unlock()
			g.start()
			g.endsOn(cmd.ID, protocol.CommandHealthy, vGood, "", 30*time.Second)
			r.mu.Lock()
			defer r.mu.Unlock()
			want := fmt.Sprintf("bytes=%d-", cmd.Update.Size/2)
			if len(r.ranges) != 2 || r.ranges[0] != "" || r.ranges[1] != want {
				t.Errorf("requests' ranges %q, want none then %q", r.ranges, want)
			}
		})
	}
}

// TestBusyRelayWaitedFor: a relay that answers 503 with Retry-After (all
// its download slots taken) more times than a broken transfer is retried
// is waited for, and the update goes through.
func TestBusyRelayWaitedFor(t *testing.T) {
	r, g, cmd := updating(t, vGood)
	r.mu.Lock()
	r.busy = 7
	r.mu.Unlock()
	g.start()
	g.endsOn(cmd.ID, protocol.CommandHealthy, vGood, "", 60*time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ranges) != 8 {
		t.Errorf("%d requests, want 7 refused and 1 served", len(r.ranges))
	}
}

// TestKilledAtEachStep: the agent killed with SIGKILL right after each
// step (FLEET_UPDATE_FAULT) and started again as systemd does ends on one
// working version, consistently: the good release kept, or, for the
// rollback's own step, the old one back.
func TestKilledAtEachStep(t *testing.T) {
	for _, step := range update.FaultSteps() {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			v, state, want := vGood, protocol.CommandHealthy, vGood
			if step == "rolled-back" {
				v, state, want = vNoLink, protocol.CommandRolledBack, vOld
			}
			_, g, cmd := updating(t, v)
			g.supervise(update.FaultEnv + "=" + step)
			g.endsOn(cmd.ID, state, want, "", 45*time.Second)
			// Without the kill every start is in the one process (exec keeps
			// the PID); the kill makes the supervisor start another.
			b, _ := os.ReadFile(filepath.Join(g.state, "starts.log"))
			pids := map[string]bool{}
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if f := strings.Fields(l); len(f) == 2 {
					pids[f[1]] = true
				}
			}
			if len(pids) < 2 {
				t.Errorf("every start in one process: was the agent killed?\n%s", b)
			}
		})
	}
}

// TestKilledWithoutSupervisor: the agent killed after each step from the
// guard's start on, with nothing to start it again but the guard. The
// fault stays in the environment the guard restarts with, so a step
// passed again kills again: the counters end the loop, on one working
// version.
func TestKilledWithoutSupervisor(t *testing.T) {
	for _, tt := range []struct {
		step, release, state, version string
	}{
		{"guard-started", vGood, protocol.CommandFailed, vOld},
		{"trial-journaled", vGood, protocol.CommandRolledBack, vOld},
		{"trial-started", vGood, protocol.CommandRolledBack, vOld},
		{"committing", vGood, protocol.CommandHealthy, vGood},
		{"committed", vGood, protocol.CommandHealthy, vGood},
		{"rolled-back", vNoLink, protocol.CommandRolledBack, vOld},
	} {
		t.Run(tt.step, func(t *testing.T) {
			t.Parallel()
			_, g, cmd := updating(t, tt.release)
			g.start(update.FaultEnv + "=" + tt.step)
			g.endsOn(cmd.ID, tt.state, tt.version, "", 45*time.Second)
		})
	}
}

// TestTrialInProcess: a process on trial (the journal says so and its
// version is the order's) ignores its own command sent again, refuses
// another one, reports UPDATING through Active and Trial, and commits
// once healthFor has passed healthy.
func TestTrialInProcess(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fleet-agent")
	for p, body := range map[string]string{bin: "old", bin + ".new": "new"} {
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(dir, "state")
	cmd := protocol.Command{ID: "c1", Kind: protocol.CommandUpdate, Update: &protocol.UpdateOrder{
		ReleaseID: "r1", Version: "2.0.0", Path: protocol.ReleasePath("r1"), Size: 3, SHA256: strings.Repeat("0", 64),
		Signature: "x", HealthFor: protocol.Duration{Duration: time.Second}}}
	j, _ := json.Marshal(map[string]any{"step": "trial", "command": cmd, "binary": bin, "fromVersion": "1.0.0",
		"failingBefore": []string{"rs485-2"}, "attempts": 1, "trials": 1})
	if err := os.MkdirAll(filepath.Join(state, "update"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "update", "journal.json"), j, 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports []protocol.CommandStatus
	u, err := update.Boot(update.Options{StateDir: state, Binary: bin + ".new", Version: "2.0.0",
		Health: func() update.Health {
			return update.Health{LinkUp: true, ConfigApplied: true, Failing: []string{"rs485-2"}}
		},
		Report: func(st protocol.CommandStatus) { mu.Lock(); reports = append(reports, st); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if !u.Trial() || !u.Active() {
		t.Fatalf("Trial %v Active %v, want both", u.Trial(), u.Active())
	}
	u.Handle(t.Context(), cmd)
	other := cmd
	other.ID = "c2"
	u.Handle(t.Context(), other)
	if err := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		go func() {
			for u.Trial() {
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
		}()
		return u.Run(ctx)
	}(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []protocol.CommandStatus{
		{ID: "c2", State: protocol.CommandFailed, Error: "another update is under way", Version: "2.0.0"},
		{ID: "c1", State: protocol.CommandHealthy, Version: "2.0.0"},
	}
	if fmt.Sprint(reports) != fmt.Sprint(want) {
		t.Errorf("reports %+v, want %+v", reports, want)
	}
	if b, _ := os.ReadFile(bin); string(b) != "new" || u.Trial() || u.Active() {
		t.Errorf("binary %q, Trial %v, Active %v: want the new one committed, no trial", b, u.Trial(), u.Active())
	}
	if _, err := os.Stat(filepath.Join(state, "update", "journal.json")); !os.IsNotExist(err) {
		t.Errorf("journal still there: %v", err)
	}
}

package webhook_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/dialects"
)

// TestHelperDispatcherProcess is the child of TestKillDuringRetries: a
// dispatcher over the SQLite file named by FLEET_WH_CHILD_DB that enqueues
// FLEET_WH_CHILD_N deliveries, then runs until it is killed.
func TestHelperDispatcherProcess(t *testing.T) {
	path := os.Getenv("FLEET_WH_CHILD_DB")
	if path == "" {
		return // not the child
	}
	ctx := context.Background()
	_, d := childDispatcher(t, path, os.Getenv("FLEET_WH_CHILD_CA"), webhook.Config{
		Backoff: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond}})
	n, _ := strconv.Atoi(os.Getenv("FLEET_WH_CHILD_N"))
	devices := strings.Split(os.Getenv("FLEET_WH_CHILD_DEVICES"), ",")
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			dev := devices[i%len(devices)]
			body := fmt.Sprintf(`{"n":%d,"dev":%q}`, i, dev)
			if err := d.Enqueue(ctx, &webhook.Delivery{OrgID: os.Getenv("FLEET_WH_CHILD_ORG"), DeviceID: dev, Event: webhook.EventSignal,
				URL: os.Getenv("FLEET_WH_CHILD_URL"), Body: []byte(body)}); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
		}(i)
	}
	wg.Wait()
	fmt.Println("ready")
	select {}
}

// childDispatcher opens, in a child process, the SQLite file at path and
// starts a dispatcher of cfg on its outbox trusting the certificate in ca;
// a failure is printed and ends the child.
func childDispatcher(t *testing.T, path, ca string, cfg webhook.Config) (storetest.Stores, *webhook.Dispatcher) {
	s := dialects.SQLiteAt(t, path, nil)
	client, err := webhook.NewClient(webhook.ClientConfig{AllowPrivate: true, CAFile: ca})
	if err == nil {
		cfg.Store, cfg.Client, cfg.Logger = s.Outbox, client, slog.New(slog.DiscardHandler)
		var d *webhook.Dispatcher
		if d, err = webhook.New(cfg); err == nil {
			if err = d.Start(context.Background()); err == nil {
				return s, d
			}
		}
	}
	fmt.Println("error", err)
	os.Exit(1)
	return s, nil
}

func startChild(t *testing.T, env []string) *exec.Cmd {
	t.Helper()
	cmd, line := runChild(t, "TestHelperDispatcherProcess", env)
	if line != "ready" {
		t.Fatalf("child: %q", line)
	}
	return cmd
}

// runChild runs the test helper named test in a child process with env
// added, and returns it with the first line it printed.
func runChild(t *testing.T, test string, env []string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %q %v", line, err)
	}
	return cmd, strings.TrimSpace(line)
}

// TestKillDuringRetries runs the dispatcher in a child process over a real
// SQLite file, kills it with SIGKILL while deliveries are being retried,
// restarts it, and checks that every delivery ends delivered and that none
// whose 2xx was recorded before the kill is sent again. It runs on SQLite
// only: the child process reopens the file, and what a kill mid-write
// leaves is SQLite's.
func TestKillDuringRetries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.db")
	e := newEnvOn(t, dialects.SQLiteAt(t, path, nil))
	var mu sync.Mutex
	seen := map[string]int{}
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, func(h hit, w http.ResponseWriter) int {
		mu.Lock()
		defer mu.Unlock()
		seen[h.DeliveryID]++
		if seen[h.DeliveryID] <= 2 { // the first two requests of every delivery fail
			return 503
		}
		return 200
	})
	var devs []string
	for i := 0; i < 10; i++ {
		devs = append(devs, e.addDevice(t, fmt.Sprintf("K%d", i)))
	}
	const n = 300
	env := []string{"FLEET_WH_CHILD_DB=" + path, "FLEET_WH_CHILD_CA=" + rcv.caFile, "FLEET_WH_CHILD_URL=" + rcv.URL("/hook"),
		"FLEET_WH_CHILD_ORG=" + e.org.ID, "FLEET_WH_CHILD_DEVICES=" + strings.Join(devs, ",")}
	child := startChild(t, append(env, "FLEET_WH_CHILD_N="+strconv.Itoa(n)))
	rcv.wait(t, n+n/2, 30*time.Second) // well into the retries
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	killedAt := time.Now()

	before := map[string]bool{}
	all := e.deliveries(t)
	if len(all) != n {
		t.Fatalf("%d deliveries in the outbox after the kill, want %d", len(all), n)
	}
	pending := 0
	for _, d := range all {
		switch d.State {
		case "delivered":
			before[d.ID] = true
		case "pending":
			pending++
		default:
			t.Errorf("delivery %s is %s", d.ID, d.State)
		}
	}
	if pending == 0 {
		t.Fatal("the kill came too late: nothing left pending")
	}
	t.Logf("at the kill: %d delivered, %d pending", len(before), pending)

	startChild(t, append(env, "FLEET_WH_CHILD_N=0"))
	deadline := time.Now().Add(60 * time.Second)
	for {
		done := 0
		for _, d := range e.deliveries(t) {
			if d.State == "delivered" {
				done++
			} else if d.State != "pending" {
				t.Fatalf("delivery %s ended %s", d.ID, d.State)
			}
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart only %d of %d deliveries were delivered", done, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, h := range rcv.Hits() {
		if before[h.DeliveryID] && h.At.After(killedAt) {
			t.Errorf("delivery %s was recorded delivered before the kill but sent again after it", h.DeliveryID)
		}
	}
	mu.Lock()
	for _, d := range all {
		if seen[d.ID] < 3 {
			t.Errorf("delivery %s: receiver answered 2xx to none of its %d requests", d.ID, seen[d.ID])
		}
	}
	mu.Unlock()
}

// TestHelperAlertProcess is the child of TestKillAfterAlertCommit: a relay
// over the SQLite file named by FLEET_WH_ALERT_DB whose dispatcher runs
// (having read the outbox once at its start) and which opens a high_cpu
// alert on FLEET_WH_ALERT_DEVICE, says so, and is killed before it tells
// anyone: its dispatcher is never woken.
func TestHelperAlertProcess(t *testing.T) {
	path := os.Getenv("FLEET_WH_ALERT_DB")
	if path == "" {
		return // not the child
	}
	ctx := context.Background()
	s, _ := childDispatcher(t, path, os.Getenv("FLEET_WH_ALERT_CA"), webhook.Config{PollInterval: time.Hour})
	org := os.Getenv("FLEET_WH_ALERT_ORG")
	a, opened, err := s.Engine.OpenAlert(ctx, alert.Opening{OrgID: org, DeviceID: os.Getenv("FLEET_WH_ALERT_DEVICE"),
		Rule: storetest.Rule(t, s.Engine, org, "high_cpu"), Message: "CPU high", At: time.Now(), WithEvent: true})
	if err != nil || !opened {
		fmt.Println("error", opened, err)
		os.Exit(1)
	}
	fmt.Println("opened", a.ID)
	select {}
}

// TestKillAfterAlertCommit kills a relay (a child process, SIGKILL) right
// after the transaction that opened an alert committed and before it told
// its dispatcher; the alert webhook and the rule's channel webhook are in
// the outbox, and the next relay's dispatcher sends each once. SQLite
// only, as TestKillDuringRetries.
func TestKillAfterAlertCommit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fleet.db")
	e := newEnvOn(t, dialects.SQLiteAt(t, path, nil))
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, nil)
	if err := e.s.Store.SetOrgAlertWebhook(ctx, e.org.ID, rcv.URL("/alerts")); err != nil {
		t.Fatal(err)
	}
	ch, err := e.s.Store.Rules().CreateChannel(ctx, cloud.NewChannel{OrgID: e.org.ID, Name: "tickets", Kind: resource.ChannelWebhook, Target: rcv.URL("/channel")})
	if err != nil {
		t.Fatal(err)
	}
	notify := []string{ch.ID}
	if _, err := e.s.Store.Rules().UpdateRule(ctx, e.org.ID, storetest.Rule(t, e.s.Engine, e.org.ID, "high_cpu").ID, cloud.RulePatch{Notify: &notify}); err != nil {
		t.Fatal(err)
	}

	cmd, line := runChild(t, "TestHelperAlertProcess",
		[]string{"FLEET_WH_ALERT_DB=" + path, "FLEET_WH_ALERT_CA=" + rcv.caFile, "FLEET_WH_ALERT_ORG=" + e.org.ID, "FLEET_WH_ALERT_DEVICE=" + e.device})
	alertID, ok := strings.CutPrefix(line, "opened ")
	if !ok {
		t.Fatalf("child: %q", line)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if ds := e.deliveries(t); len(ds) != 2 || ds[0].State != "pending" || ds[1].State != "pending" {
		t.Fatalf("the outbox after the kill: %+v", ds)
	}
	if n := len(rcv.Hits()); n != 0 {
		t.Fatalf("%d requests before the restart", n)
	}

	newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile})
	hits := rcv.wait(t, 2, 10*time.Second)
	paths := map[string]int{}
	for _, h := range hits {
		var w resource.AlertWebhook
		if err := json.Unmarshal(h.Body, &w); err != nil || w.Event != "alert.opened" || w.Alert.ID != alertID || !h.SigOK {
			t.Errorf("request %s: %s (%v)", h.Path, h.Body, err)
		}
		paths[h.Path]++
	}
	if paths["/alerts"] != 1 || paths["/channel"] != 1 {
		t.Errorf("requests by path %v, want one each of /alerts and /channel", paths)
	}
	for _, d := range e.deliveries(t) {
		e.waitState(t, d.ID, "delivered", 5*time.Second)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(rcv.Hits()); n != 2 {
		t.Errorf("%d requests in all, want 2", n)
	}
}

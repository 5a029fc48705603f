// Command fleet-webhookbench measures the relay's webhooks on loopback:
// the latency from a signal change sent by simulated agents (over the real
// agent websocket endpoint) to the POST received by a local HTTPS receiver,
// and the sustained deliveries per second to a fast receiver with the
// durable SQLite outbox. It prints each figure beside its target.
package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/bench/benchreport"
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

func main() {
	agents := flag.Int("agents", 50, "simulated agents for the latency run")
	changes := flag.Int("changes", 40, "signal changes per agent")
	every := flag.Duration("every", 100*time.Millisecond, "time between two signal changes of one agent")
	deliveries := flag.Int("deliveries", 20000, "deliveries for the throughput run")
	devices := flag.Int("devices", 1000, "devices the throughput deliveries are spread over")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet-webhookbench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if err := run(*agents, *changes, *every, *deliveries, *devices); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "fleet-webhookbench:", err)
		os.Exit(1)
	}
}

func run(agents, changes int, every time.Duration, deliveries, devices int) error {
	dir, err := os.MkdirTemp("", "fleet-webhookbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("machine: %d CPUs, load average %s", runtime.NumCPU(), b)
	}
	cpu0, wall0 := cpuTime(), time.Now()
	p50, p99, stage, n, err := latency(dir, agents, changes, every)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	fmt.Printf("webhook signal change -> POST received (%d changes, %d agents, one change each per %v): p50 %.2f ms, p99 %.2f ms   (target: p99 < 50 ms)\n",
		n, agents, every, ms(p50), ms(p99))
	fmt.Print(stage)
	fmt.Printf("  the relay side, agents and receiver (this process) used %.1f s of CPU in %.1f s\n", (cpuTime() - cpu0).Seconds(), time.Since(wall0).Seconds())
	if err := benchreport.Record(benchreport.Row{Area: "webhooks", Figure: "signal change at the agent to POST received, p99", Unit: "ms", Measured: ms(p99),
		Target: &benchreport.Target{Op: benchreport.Below, Value: 50},
		Notes: fmt.Sprintf("p50 %.2f ms; %s changes from %d agents, one each per %v, over the agent websocket to an HTTPS receiver on loopback",
			ms(p50), benchreport.FormatValue(float64(n), ""), agents, every)}); err != nil {
		return err
	}
	rate, err := throughput(dir, deliveries, devices)
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	fmt.Printf("webhook deliveries with the durable outbox (%d deliveries, %d devices): %.0f deliveries/s   (target: >= 2000/s)\n",
		deliveries, devices, rate)
	return benchreport.Record(benchreport.Row{Area: "webhooks", Figure: "deliveries with the durable SQLite outbox", Unit: "deliveries/s", Measured: rate,
		Target: &benchreport.Target{Op: benchreport.AtLeast, Value: 2000},
		Notes: fmt.Sprintf("%s deliveries over %s devices to a fast HTTPS receiver on loopback",
			benchreport.FormatValue(float64(deliveries), ""), benchreport.FormatValue(float64(devices), ""))})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuTime returns the user and system CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// receiver is a fast local HTTPS receiver; onHit sees each body.
func receiver(dir string, onHit func(body []byte)) (*httptest.Server, string, error) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		onHit(b)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes cut by Close are expected
	srv.StartTLS()
	ca := filepath.Join(dir, fmt.Sprintf("ca-%d.pem", time.Now().UnixNano()))
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		srv.Close()
		return nil, "", err
	}
	return srv, ca, nil
}

func dispatcher(db *sqlite.DB, ca string) (*webhook.Dispatcher, error) {
	client, err := webhook.NewClient(webhook.ClientConfig{AllowPrivate: true, CAFile: ca})
	if err != nil {
		return nil, err
	}
	d, err := webhook.New(webhook.Config{Store: sqlite.NewWebhookStore(db), Client: client, Backoff: []time.Duration{100 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		return nil, err
	}
	return d, d.Start(context.Background())
}

// latency runs the agent endpoint with the webhook notifier as observer;
// simulated agents send heartbeats whose uart-1 live value carries the send
// time, and the receiver measures when each POST arrives.
func latency(dir string, agents, changes int, every time.Duration) (p50, p99 time.Duration, stage string, n int, err error) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "latency.db"))
	if err != nil {
		return 0, 0, "", 0, err
	}
	defer db.Close()
	var mu sync.Mutex
	var lat []time.Duration
	rcv, ca, err := receiver(dir, func(b []byte) {
		now := time.Now()
		var body resource.SignalWebhook
		if json.Unmarshal(b, &body) != nil {
			return
		}
		for _, c := range body.Channels {
			if t, ok := strings.CutPrefix(c.Live, "t="); ok {
				ns, _ := strconv.ParseInt(t, 10, 64)
				mu.Lock()
				lat = append(lat, now.Sub(time.Unix(0, ns)))
				mu.Unlock()
			}
		}
	})
	if err != nil {
		return 0, 0, "", 0, err
	}
	defer rcv.Close()
	disp, err := dispatcher(db, ca)
	if err != nil {
		return 0, 0, "", 0, err
	}
	defer disp.Close()
	store, err := sqlite.NewAgentStore(db, nil)
	if err != nil {
		return 0, 0, "", 0, err
	}
	defer store.Close()
	stages := &stageObserver{Observer: webhook.NewNotifier(disp)}
	link := agentlink.New(agentlink.Config{Store: store, Observers: []cloud.Observer{stages}})
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go link.Run(lctx)
	mux := http.NewServeMux()
	mux.Handle(protocol.Path, link.Handler())
	relay := httptest.NewServer(mux)
	defer relay.Close()
	defer link.Shutdown(ctx)

	org, err := db.CreateOrg(ctx, "bench")
	if err != nil {
		return 0, 0, "", 0, err
	}
	serial := db.Serial()
	on := true
	url := rcv.URL + "/signals"
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := 0; i < agents; i++ {
		dev, token, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: org.ID, Name: fmt.Sprintf("gw-%d", i), SerialNumber: fmt.Sprintf("SN%d", i), Model: "IG-500"})
		if err != nil {
			return 0, 0, "", 0, err
		}
		if _, err := serial.PatchSerial(ctx, org.ID, dev.ID, cloud.SerialPatch{WebhookURL: &url, WebhookEnabled: &on}); err != nil {
			return 0, 0, "", 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := simAgent(ctx, relay.URL, token, changes, every); err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, 0, "", 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		return 0, 0, "", 0, fmt.Errorf("no webhook received")
	}
	p50, p99 = percentiles(lat)
	if s50, s99, ok := stages.percentiles(); ok {
		stage = fmt.Sprintf("  of which agent send -> heartbeat stored and observed (agent endpoint, before any webhook code): p50 %.2f ms, p99 %.2f ms\n", ms(s50), ms(s99))
	}
	return p50, p99, stage, len(lat), nil
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], d[(len(d)*99)/100]
}

// stageObserver measures when heartbeats reach the observers (after the
// agent endpoint stored them), to tell that stage from the webhook path.
type stageObserver struct {
	cloud.Observer
	mu  sync.Mutex
	lat []time.Duration
}

func (o *stageObserver) HeartbeatStored(ctx context.Context, dev cloud.DeviceRef, hb cloud.Heartbeat) {
	now := time.Now()
	for _, c := range hb.Changed {
		if t, ok := strings.CutPrefix(c.Live, "t="); ok {
			ns, _ := strconv.ParseInt(t, 10, 64)
			o.mu.Lock()
			o.lat = append(o.lat, now.Sub(time.Unix(0, ns)))
			o.mu.Unlock()
		}
	}
	o.Observer.HeartbeatStored(ctx, dev, hb)
}

func (o *stageObserver) percentiles() (p50, p99 time.Duration, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.lat) == 0 {
		return 0, 0, false
	}
	p50, p99 = percentiles(o.lat)
	return p50, p99, true
}

// simAgent connects as one agent and sends changes heartbeats, one per
// every, each with a new uart-1 value carrying its send time.
func simAgent(ctx context.Context, relayURL, token string, changes int, every time.Duration) error {
	h := http.Header{"Authorization": {"Bearer " + token}}
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(relayURL, "http")+protocol.Path,
		&websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{protocol.Subprotocol}})
	if err != nil {
		return err
	}
	defer ws.CloseNow()
	send := func(m protocol.Message) error {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		return ws.Write(ctx, websocket.MessageText, b)
	}
	if err := send(protocol.Message{Type: protocol.TypeHello, Hello: &protocol.Hello{AgentVersion: "bench", Model: "IG-500",
		HeartbeatInterval: protocol.Duration{Duration: time.Minute}}}); err != nil {
		return err
	}
	go func() { // read and drop what the relay sends (welcome, config)
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	hb := func(live string) error {
		return send(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{At: resource.T(time.Now()), Status: resource.StatusOnline,
			Channels: []protocol.ChannelState{{ID: "uart-1", Available: true, Live: live}}}})
	}
	if err := hb("initial"); err != nil { // the first report is a change too; not measured
		return err
	}
	time.Sleep(200 * time.Millisecond)
	for i := 0; i < changes; i++ {
		if err := hb("t=" + strconv.FormatInt(time.Now().UnixNano(), 10)); err != nil {
			return err
		}
		time.Sleep(every)
	}
	time.Sleep(500 * time.Millisecond)
	return nil
}

// throughput enqueues deliveries from many goroutines, as the agent
// endpoint's connections do, and measures until every one is recorded
// delivered in the outbox.
func throughput(dir string, n, devices int) (float64, error) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "throughput.db"))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var hits atomic.Int64
	rcv, ca, err := receiver(dir, func([]byte) { hits.Add(1) })
	if err != nil {
		return 0, err
	}
	defer rcv.Close()
	disp, err := dispatcher(db, ca)
	if err != nil {
		return 0, err
	}
	org, err := db.CreateOrg(ctx, "bench")
	if err != nil {
		return 0, err
	}
	body := []byte(`{"event":"serial.signal","deviceId":"dev","at":"2026-11-22T03:00:00.000Z","channels":[{"id":"rs485-1","live":"17 42 99","txOn":false,"error":""}]}`)
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Value
	per := n / devices
	for d := 0; d < devices; d++ {
		wg.Add(1)
		go func(d int) {
			defer wg.Done()
			dev := fmt.Sprintf("device%04d", d)
			for i := 0; i < per; i++ {
				if err := disp.Enqueue(ctx, &webhook.Delivery{OrgID: org.ID, DeviceID: dev, Event: webhook.EventSignal, URL: rcv.URL + "/", Body: body}); err != nil {
					failed.Store(err)
					return
				}
			}
		}(d)
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	total := int64(per * devices)
	deadline := time.Now().Add(5 * time.Minute)
	for disp.Stats().Delivered < total {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("only %d of %d delivered", disp.Stats().Delivered, total)
		}
		time.Sleep(5 * time.Millisecond)
	}
	disp.Close() // writes the last attempt records
	elapsed := time.Since(start)
	counts, err := db.WebhookDeliveryCounts(ctx, org.ID)
	if err != nil {
		return 0, err
	}
	if recorded := int64(counts[string(webhook.StateDelivered)]); recorded != total {
		return 0, fmt.Errorf("%d of %d deliveries recorded delivered", recorded, total)
	}
	if hits.Load() < total {
		return 0, fmt.Errorf("receiver got %d requests for %d deliveries", hits.Load(), total)
	}
	return float64(total) / elapsed.Seconds(), nil
}

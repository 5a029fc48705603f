package relay

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/redistest"
	"github.com/fleet/fleet/test/rig/testnet"
	"github.com/fleet/fleet/test/rig/testwait"
)

// startServe runs serve in process with args after --db and --listen.
func startServe(t *testing.T, db string, args ...string) *Main {
	t.Helper()
	m := NewMain(io.Discard)
	if err := m.ParseFlags(append([]string{"--db", db, "--listen", "127.0.0.1:0"}, args...)); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// health returns the status and body of GET url (no key).
func health(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// provision makes an organization, a key with every scope and an IG-500.
func provision(t *testing.T, db string) (key, token string) {
	t.Helper()
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var k struct{ Key string }
	mustJSON(t, &k, "key", "create", "--db", db, "--org", org.ID, "--name", "ops",
		"--scopes", "devices:read,devices:write,metrics:read,logs:read,alerts:read,alerts:write")
	var dev struct{ Token string }
	mustJSON(t, &dev, "device", "add", "--db", db, "--org", org.ID, "--name", "press", "--serial", "SN-1", "--model", "IG-500")
	return k.Key, dev.Token
}

// TestDrain is what a load balancer and an agent see of a SIGTERM: /readyz
// turns 503 at once while the relay still serves for --drain-delay, then
// the agent's websocket closes with 1012 (service restart), the request in
// flight finishes, and the listener closes.
func TestDrain(t *testing.T) {
	// drainDelay is long enough for the checks made during it to be done
	// within it on a loaded machine.
	const drainDelay = 2 * time.Second
	db := filepath.Join(t.TempDir(), "relay.db")
	key, token := provision(t, db)
	m := NewMain(io.Discard)
	started := make(chan struct{})
	m.parts = append(m.parts, part{name: "slow", start: func(ctx context.Context, mux *http.ServeMux) (func(context.Context) error, error) {
		mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
			close(started)
			time.Sleep(500 * time.Millisecond)
			io.WriteString(w, "done")
		})
		return nil, nil
	}})
	if err := m.ParseFlags([]string{"--db", db, "--listen", "127.0.0.1:0", "--drain-delay", drainDelay.String()}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := "http://" + m.Addr()
	if code, body := health(t, base+"/readyz"); code != 200 || body != `{"status":"ok"}`+"\n" {
		t.Fatalf("readyz while serving: %d %s", code, body)
	}

	ctx := context.Background()
	ws := dialRelay(t, m.Addr(), token)
	b, _ := json.Marshal(protocol.Message{Type: protocol.TypeHello, Hello: &protocol.Hello{AgentVersion: "t", Model: "IG-500"}})
	ws.Write(ctx, websocket.MessageText, b)
	// closedAt is when the relay closed the agent's socket (set before
	// closed is sent).
	closed := make(chan error, 1)
	var closedAt time.Time
	go func() {
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				closedAt = time.Now()
				closed <- err
				return
			}
		}
	}()

	var wg sync.WaitGroup
	var slowBody string
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.Get(base + "/slow")
		if err != nil {
			t.Error(err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slowBody = string(b)
	}()
	<-started
	closeDone := make(chan error, 1)
	sigterm := time.Now()
	go func() { closeDone <- m.Close() }()

	// Readiness off first; the relay still serves during the delay.
	eventually(t, time.Second, func() bool {
		code, body := health(t, base+"/readyz")
		return code == 503 && body == `{"status":"unavailable","reason":"draining"}`+"\n"
	})
	if code, _ := health(t, base+"/healthz"); code != 200 {
		t.Errorf("healthz while draining: %d", code)
	}
	if code, _ := get(t, base+"/api/v1/public/devices", key); code != 200 {
		t.Errorf("API while draining: %d", code)
	}
	select {
	case err := <-closed:
		t.Fatalf("agent closed during the drain delay: %v", err)
	default:
	}

	// Then the agent is told to go elsewhere.
	select {
	case err := <-closed:
		if code := websocket.CloseStatus(err); code != protocol.CloseServiceRestart {
			t.Errorf("agent closed with %d (%v), want 1012", code, err)
		}
		if d := closedAt.Sub(sigterm); d < drainDelay {
			t.Errorf("agent closed %s after SIGTERM, before the drain delay", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("agent not closed")
	}
	if err := <-closeDone; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if slowBody != "done" {
		t.Errorf("in-flight request ended with %q", slowBody)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("relay still accepts connections after the drain")
	}
}

func eventually(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	testwait.For(t, "the condition", d, cond)
}

// TestReadyzWhileStarting: a relay that is still starting (its store
// opening or migrating, its parts starting) listens already and says so:
// /healthz 200, /readyz and the API 503; then ready.
func TestReadyzWhileStarting(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	release := make(chan struct{})
	addr := testnet.FreeAddr(t)
	m := NewMain(io.Discard)
	m.parts = append(m.parts, part{name: "slow start", start: func(context.Context, *http.ServeMux) (func(context.Context) error, error) {
		<-release
		return nil, nil
	}})
	if err := m.ParseFlags([]string{"--db", db, "--listen", addr}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- m.Run(context.Background()) }()
	t.Cleanup(func() { m.Close() })
	base := "http://" + addr
	eventually(t, 5*time.Second, func() bool { code, _ := health(t, base+"/healthz"); return code == 200 })
	if code, body := health(t, base+"/readyz"); code != 503 || body != `{"status":"unavailable","reason":"starting"}`+"\n" {
		t.Errorf("readyz while starting: %d %s", code, body)
	}
	if code, body := health(t, base+"/api/v1/public/devices"); code != 503 || !strings.Contains(body, `"code":"service_unavailable"`) {
		t.Errorf("API while starting: %d %s", code, body)
	}
	close(release)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if code, body := health(t, base+"/readyz"); code != 200 {
		t.Errorf("readyz once started: %d %s", code, body)
	}
}

// failingStore is a store that stopped answering (a database gone away).
type failingStore struct {
	mu    sync.Mutex
	calls int
	down  bool
}

func (f *failingStore) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return errors.New("dial tcp 10.0.0.9:5432: connect: connection refused")
	}
	return nil
}

// TestReadyzFollowsTheStore: /readyz answers 503 "store unreachable" while
// the store's ping fails and 200 again when it answers; a burst of probes
// costs one ping a second.
func TestReadyzFollowsTheStore(t *testing.T) {
	m := startServe(t, filepath.Join(t.TempDir(), "relay.db"))
	store := &failingStore{down: true}
	m.ready.serving(store)
	m.ready.mu.Lock()
	m.ready.checked = time.Time{}
	m.ready.mu.Unlock()
	base := "http://" + m.Addr()
	for range 20 {
		if code, body := health(t, base+"/readyz"); code != 503 || body != `{"status":"unavailable","reason":"store unreachable"}`+"\n" {
			t.Fatalf("readyz with the store down: %d %s", code, body)
		}
	}
	if store.calls != 1 {
		t.Errorf("20 probes pinged the store %d times, want 1 (cached for a second)", store.calls)
	}
	store.mu.Lock()
	store.down = false
	store.mu.Unlock()
	eventually(t, 3*time.Second, func() bool { code, _ := health(t, base+"/readyz"); return code == 200 })
}

// TestRedisSharesRateLimits: two relays with --redis on one Redis spend one
// budget per key; a relay whose Redis is unreachable at start still starts
// and limits on its own.
func TestRedisSharesRateLimits(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	key, _ := provision(t, db)
	srv := redistest.Start(t)
	a := startServe(t, db, "--rate-limit", "10", "--redis", srv.URL())
	b := startServe(t, db, "--rate-limit", "10", "--redis", srv.URL())
	ok := 0
	for i := range 16 {
		m := a
		if i%2 == 1 {
			m = b
		}
		code, body := get(t, "http://"+m.Addr()+"/api/v1/public/devices", key)
		switch code {
		case 200:
			ok++
		case 429:
			if errorCode(body) != "rate_limited" {
				t.Fatalf("429 body %s", body)
			}
		default:
			t.Fatalf("status %d: %s", code, body)
		}
	}
	if ok != 10 {
		t.Errorf("%d of 16 requests over two relays allowed, want the shared budget of 10", ok)
	}

	srv.Stop()
	c := startServe(t, db, "--rate-limit", "10", "--redis", srv.URL())
	ok = 0
	for range 12 {
		if code, _ := get(t, "http://"+c.Addr()+"/api/v1/public/devices", key); code == 200 {
			ok++
		}
	}
	if ok != 10 {
		t.Errorf("relay with Redis down: %d of 12 allowed, want its own budget of 10", ok)
	}
}

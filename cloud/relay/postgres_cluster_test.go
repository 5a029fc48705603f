package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/linktest"
)

// The tests below run two or three relays in process on one PostgreSQL
// database and check that no correctness lives in one relay's memory.

// cluster starts n relays on one fresh database with args, and provisions
// an organization, a key with every scope and an IG-500.
type cluster struct {
	url    string
	relays []*Main
	key    string
	token  string
	devID  string
	orgID  string
}

func startCluster(t *testing.T, n int, args ...string) *cluster {
	t.Helper()
	c := &cluster{url: pg.Get(t).CreateDB(t)}
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", c.url, "--name", "Acme")
	var k struct{ Key string }
	mustJSON(t, &k, "key", "create", "--db", c.url, "--org", org.ID, "--name", "ops",
		"--scopes", "devices:read,devices:write,metrics:read,logs:read,alerts:read,alerts:write")
	var dev struct{ ID, Token string }
	mustJSON(t, &dev, "device", "add", "--db", c.url, "--org", org.ID, "--name", "press", "--serial", "SN-1", "--model", "IG-500")
	c.key, c.token, c.devID, c.orgID = k.Key, dev.Token, dev.ID, org.ID
	for i := 0; i < n; i++ {
		c.relays = append(c.relays, startServe(t, c.url, append([]string{"--rate-limit", "100000"}, args...)...))
	}
	return c
}

func (c *cluster) api(i int) string { return "http://" + c.relays[i].Addr() + "/api/v1/public" }

// call makes an API request to relay i and returns the status and body.
func (c *cluster) call(t *testing.T, i int, method, path, body string) (int, []byte) {
	t.Helper()
	return apiCall(t, method, c.api(i)+path, c.key, body)
}

// simAgent is a device's agent speaking the protocol (JSON) to one relay.
type simAgent struct {
	t      *testing.T
	ws     *websocket.Conn
	msgs   chan protocol.Message
	closed chan websocket.StatusCode
}

// connectAgent connects as the device of token to relay addr, announcing
// heartbeat, and waits for the welcome.
func connectAgent(t *testing.T, addr, token string, heartbeat time.Duration) *simAgent {
	t.Helper()
	return connectAgentHello(t, addr, token, protocol.Hello{AgentVersion: "t", Model: "IG-500", HeartbeatInterval: protocol.Duration{Duration: heartbeat}})
}

// connectAgentHello is connectAgent announcing hello.
func connectAgentHello(t *testing.T, addr, token string, hello protocol.Hello) *simAgent {
	t.Helper()
	ctx := context.Background()
	ws := dialRelay(t, addr, token)
	a := &simAgent{t: t, ws: ws, msgs: make(chan protocol.Message, 64), closed: make(chan websocket.StatusCode, 1)}
	go func() {
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				a.closed <- websocket.CloseStatus(err)
				close(a.msgs)
				return
			}
			var m protocol.Message
			if json.Unmarshal(b, &m) == nil {
				a.msgs <- m
			}
		}
	}()
	a.send(protocol.Message{Type: protocol.TypeHello, Hello: &hello})
	if m := a.next(5 * time.Second); m.Type != protocol.TypeWelcome {
		t.Fatalf("want welcome, got %+v", m)
	}
	return a
}

func (a *simAgent) send(m protocol.Message) error {
	b, _ := json.Marshal(m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.ws.Write(ctx, websocket.MessageText, b)
}

// next returns the next message the relay sent (config pushes among them),
// failing after d.
func (a *simAgent) next(d time.Duration) protocol.Message {
	a.t.Helper()
	select {
	case m, ok := <-a.msgs:
		if !ok {
			a.t.Fatal("connection closed")
		}
		return m
	case <-time.After(d):
		a.t.Fatalf("no message within %s", d)
		return protocol.Message{}
	}
}

// config waits up to d for a config message of at least version.
func (a *simAgent) config(version int64, d time.Duration) protocol.Config {
	a.t.Helper()
	deadline := time.Now().Add(d)
	for {
		m := a.next(time.Until(deadline))
		if m.Type == protocol.TypeConfig && m.Config != nil && m.Config.Version >= version {
			return *m.Config
		}
	}
}

// closedWith waits up to d for the relay to close the connection and
// returns the close code.
func (a *simAgent) closedWith(d time.Duration) websocket.StatusCode {
	a.t.Helper()
	select {
	case code := <-a.closed:
		return code
	case <-time.After(d):
		a.t.Fatalf("connection still open after %s", d)
		return 0
	}
}

func (a *simAgent) heartbeat(chans ...protocol.ChannelState) error {
	return a.send(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{Status: resource.StatusOnline, Channels: chans}})
}

func (c *cluster) status(t *testing.T, i int) string {
	t.Helper()
	code, body := c.call(t, i, "GET", "/devices/"+c.devID, "")
	var d struct{ Data resource.DeviceDetail }
	json.Unmarshal(body, &d)
	if code != 200 {
		t.Fatalf("GET device on relay %d: %d %s", i, code, body)
	}
	return string(d.Data.Status)
}

// TestClusterPresence: a device that connects to another relay takes over;
// the relay that held the older connection closes it at once (it hears of
// the newer one through LISTEN/NOTIFY), with 4009.
func TestClusterPresence(t *testing.T) {
	c := startCluster(t, 2)
	old := connectAgent(t, c.relays[0].Addr(), c.token, time.Minute)
	eventually(t, 5*time.Second, func() bool { return c.status(t, 1) == "ONLINE" })
	start := time.Now()
	connectAgent(t, c.relays[1].Addr(), c.token, time.Minute)
	if code := old.closedWith(2 * time.Second); code != protocol.CloseReplaced {
		t.Errorf("old connection closed with %d, want %d", code, protocol.CloseReplaced)
	}
	t.Logf("old connection closed %s after the new one's hello", time.Since(start).Round(time.Millisecond))
	for i := range c.relays {
		if st := c.status(t, i); st != "ONLINE" {
			t.Errorf("relay %d shows %s", i, st)
		}
	}
	var relay string
	conn, err := pgx.Connect(context.Background(), c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var epoch int64
	if err := conn.QueryRow(context.Background(), `SELECT agent_relay, agent_epoch FROM devices WHERE id = $1`, c.devID).Scan(&relay, &epoch); err != nil || relay != c.relays[1].DB.Cluster.Relay || epoch != 2 {
		t.Errorf("presence: relay %q epoch %d (%v), want %q and 2", relay, epoch, err, c.relays[1].DB.Cluster.Relay)
	}
}

// TestClusterConfigReachesAgentOnAnotherRelay: PATCH /serial and PUT
// channel through relay 0 reach the agent connected to relay 1 within 1 s;
// one made while no relay listens reaches it when the listener is back
// (resync of desired versus applied versions).
func TestClusterConfigReachesAgentOnAnotherRelay(t *testing.T) {
	defer func(d time.Duration) { postgres.ListenReconnect = d }(postgres.ListenReconnect)
	postgres.ListenReconnect = 2 * time.Second
	c := startCluster(t, 2)
	a := connectAgent(t, c.relays[1].Addr(), c.token, time.Minute)
	put := `{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"even","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,"tx":{"enabled":false,"intervalMs":0,"register":0,"value":0}}`
	start := time.Now()
	if code, body := c.call(t, 0, "PUT", "/devices/"+c.devID+"/serial/channels/rs485-1", put); code != 200 {
		t.Fatalf("PUT channel: %d %s", code, body)
	}
	cfg := a.config(1, time.Second)
	if took := time.Since(start); took > time.Second {
		t.Errorf("config reached the agent after %s", took)
	}
	for _, ch := range cfg.Channels {
		if ch.ID == "rs485-1" && (ch.Config.RS485 == nil || ch.Config.RS485.BaudRate != 19200) {
			t.Errorf("pushed rs485-1 = %+v", ch.Config)
		}
	}
	start = time.Now()
	if code, body := c.call(t, 0, "PATCH", "/devices/"+c.devID+"/serial", `{"mode":"both"}`); code != 200 {
		t.Fatalf("PATCH serial: %d %s", code, body)
	}
	if cfg := a.config(2, time.Second); cfg.Mode != "both" || time.Since(start) > time.Second {
		t.Errorf("patched config %+v after %s", cfg, time.Since(start))
	}

	// Cut every relay's listener; change the config while none listens.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	listeners := func() int {
		var n int
		conn.QueryRow(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'listen %'`).Scan(&n)
		return n
	}
	eventually(t, 5*time.Second, func() bool { return listeners() == 2 }) // one connection per relay
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'listen %'`); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, func() bool { return listeners() == 0 })
	if code, body := c.call(t, 0, "PATCH", "/devices/"+c.devID+"/serial", `{"mode":"managed"}`); code != 200 {
		t.Fatalf("PATCH serial: %d %s", code, body)
	}
	if listeners() != 0 {
		t.Fatal("a listener came back before the change (ListenReconnect is 2 s): this run does not test the resync")
	}
	if cfg := a.config(3, 10*time.Second); cfg.Mode != "managed" {
		t.Errorf("after the listener came back: %+v", cfg)
	}
}

// TestClusterRevocation: a key revoked through the admin CLI is refused by
// every relay on its next request; a device token revoked closes the
// agent's connection on the relay that holds it at once, and every relay
// refuses it.
func TestClusterRevocation(t *testing.T) {
	c := startCluster(t, 3)
	for i := range c.relays {
		if code, _ := c.call(t, i, "GET", "/devices", ""); code != 200 {
			t.Fatalf("relay %d before the revocation: %d", i, code)
		}
	}
	a := connectAgent(t, c.relays[2].Addr(), c.token, time.Minute)
	var k []struct{ ID string }
	mustJSON(t, &k, "key", "list", "--db", c.url, "--org", c.orgID)
	mustJSON(t, &struct{}{}, "key", "revoke", "--db", c.url, "--id", k[0].ID)
	for i := range c.relays {
		if code, body := c.call(t, i, "GET", "/devices", ""); code != 401 || errorCode(body) != "api_key_revoked" {
			t.Errorf("relay %d after the revocation: %d %s", i, code, body)
		}
	}
	start := time.Now()
	mustJSON(t, &struct{}{}, "device", "revoke", "--db", c.url, "--id", c.devID)
	if code := a.closedWith(2 * time.Second); code != protocol.CloseUnauthorized {
		t.Errorf("agent closed with %d, want %d", code, protocol.CloseUnauthorized)
	}
	t.Logf("agent closed %s after the revocation", time.Since(start).Round(time.Millisecond))
	for i, m := range c.relays {
		_, resp, err := linktest.Dial(t, "http://"+m.Addr(), c.token)
		if err == nil || resp == nil || resp.StatusCode != 401 {
			t.Errorf("relay %d accepts the revoked token: %v", i, err)
		}
	}
}

// receiver is an HTTPS webhook receiver that records each delivery's id,
// attempt and body.
type receiver struct {
	srv *httptest.Server
	ca  string
	mu  sync.Mutex
	got []delivery
	// hold, when set, keeps a request waiting until the test ends (an
	// attempt cut short by a relay's death); n counts the requests so far.
	hold  func(id string, attempt, n int) bool
	block chan struct{}
}

type delivery struct {
	id, attempt string
	body        map[string]any
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{block: make(chan struct{})}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body map[string]any
		json.NewDecoder(req.Body).Decode(&body)
		id, att := req.Header.Get("X-Service-Delivery-Id"), req.Header.Get("X-Service-Attempt")
		r.mu.Lock()
		r.got = append(r.got, delivery{id, att, body})
		hold, n := r.hold, len(r.got)
		r.mu.Unlock()
		var attempt int
		fmt.Sscan(att, &attempt)
		if hold != nil && hold(id, attempt, n) {
			select {
			case <-r.block:
			case <-req.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(func() { close(r.block); r.srv.Close() })
	r.ca = caFile(t, r.srv)
	return r
}

func (r *receiver) list() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// TestClusterSharedOutbox: signal webhooks of a device connected to relay
// 0 are sent in order; relay 0 dies while an attempt is in flight, and
// relay 1 takes its deliveries once their lease ran out, under the same
// delivery ids, still in order; no delivery is sent twice by live relays.
func TestClusterSharedOutbox(t *testing.T) {
	rcv := newReceiver(t)
	c := startCluster(t, 2, "--webhook-allow-private", "--webhook-ca", rcv.ca, "--webhook-backoff", "200ms", "--webhook-lease", "2s",
		"--shutdown-timeout", "200ms")
	hook := rcv.srv.URL + "/signals"
	if code, body := c.call(t, 1, "PATCH", "/devices/"+c.devID+"/serial", `{"webhookUrl":"`+hook+`","webhookEnabled":true}`); code != 200 {
		t.Fatalf("PATCH forwarding: %d %s", code, body)
	}
	a := connectAgent(t, c.relays[0].Addr(), c.token, time.Minute)
	// The 6th delivery's first attempt never ends: relay 0 dies with it
	// in flight.
	var mu sync.Mutex
	var stuck string
	rcv.mu.Lock()
	rcv.hold = func(id string, attempt, n int) bool {
		mu.Lock()
		defer mu.Unlock()
		if stuck == "" && n == 6 {
			stuck = id
		}
		return id == stuck && attempt == 1 && n == 6
	}
	rcv.mu.Unlock()
	for i := 1; i <= 10; i++ {
		if err := a.heartbeat(protocol.ChannelState{ID: "rs485-1", Available: true, Live: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	eventually(t, 10*time.Second, func() bool { return len(rcv.list()) >= 6 })
	time.Sleep(300 * time.Millisecond)
	if n := len(rcv.list()); n != 6 {
		t.Fatalf("%d deliveries received before the stuck one ended, want 6 (one device's deliveries wait for the one before)", n)
	}
	killed := time.Now()
	c.relays[0].Close() // in-flight attempts are cut short; leases are left to run out
	deadline := time.Now().Add(15 * time.Second)
	for len(rcv.list()) < 11 {
		if time.Now().After(deadline) {
			logOutbox(t, c.url)
			t.Fatalf("received %d: %+v", len(rcv.list()), rcv.list())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("relay 1 finished the outbox %s after relay 0 died", time.Since(killed).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	got := rcv.list()
	var lives []string
	seen := map[string]int{}
	for _, d := range got {
		seen[d.id]++
		chans, _ := d.body["channels"].([]any)
		if len(chans) == 1 {
			lives = append(lives, chans[0].(map[string]any)["live"].(string))
		}
	}
	if len(got) != 11 || len(seen) != 10 || seen[stuck] != 2 {
		t.Errorf("%d requests for %d delivery ids (the stuck one %d times): %+v", len(got), len(seen), seen[stuck], got)
	}
	want := "1 2 3 4 5 6 6 7 8 9 10"
	if strings.Join(lives, " ") != want {
		t.Errorf("signals arrived as %v, want %s (in order, the stuck one again)", lives, want)
	}
	if again := got[6]; again.id != stuck {
		t.Errorf("the 7th request is %+v, want the stuck delivery %s again", again, stuck)
	}
}

// TestClusterDeviceOffline: a device's relay dies; another relay's
// sweeper takes the device OFFLINE from its stored deadline and one relay
// (the lease holder) opens exactly one device_offline alert, sent once as
// alert.opened.
func TestClusterDeviceOffline(t *testing.T) {
	rcv := newReceiver(t)
	c := startCluster(t, 3, "--webhook-allow-private", "--webhook-ca", rcv.ca, "--webhook-backoff", "200ms")
	mustJSON(t, &struct{}{}, "org", "set-alert-webhook", "--db", c.url, "--org", c.orgID, "--url", rcv.srv.URL+"/alerts")
	a := connectAgent(t, c.relays[0].Addr(), c.token, 300*time.Millisecond)
	for i := 0; i < 3; i++ {
		a.heartbeat()
		time.Sleep(100 * time.Millisecond)
	}
	c.relays[0].Close() // the device stays as it was: ONLINE with its deadline
	eventually(t, 30*time.Second, func() bool { return c.status(t, 1) == "OFFLINE" })
	var alerts struct{ Data []resource.Alert }
	eventually(t, 60*time.Second, func() bool { // device_offline: silent for 30 s (after)
		_, body := c.call(t, 2, "GET", "/alerts?deviceId="+c.devID, "")
		json.Unmarshal(body, &alerts)
		return len(alerts.Data) > 0
	})
	eventually(t, 10*time.Second, func() bool { return len(rcv.list()) > 0 })
	time.Sleep(6 * time.Second) // more than one sweep of every live relay
	_, body := c.call(t, 1, "GET", "/alerts?deviceId="+c.devID, "")
	json.Unmarshal(body, &alerts)
	if len(alerts.Data) != 1 {
		t.Errorf("%d open alerts, want 1: %s", len(alerts.Data), body)
	}
	opened := 0
	for _, d := range rcv.list() {
		if d.body["event"] == "alert.opened" {
			opened++
		}
	}
	if opened != 1 {
		t.Errorf("%d alert.opened webhooks, want 1: %+v", opened, rcv.list())
	}
}

// logOutbox logs the outbox's rows with their leases, for a failure.
func logOutbox(t *testing.T, url string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Log(err)
		return
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT seq, id, state, attempts, COALESCE(lease_owner, ''), COALESCE(lease_until, 0) - (extract(epoch from clock_timestamp()) * 1000)::bigint
		FROM webhook_deliveries ORDER BY seq`)
	if err != nil {
		t.Log(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var seq, att, left int64
		var id, st, owner string
		rows.Scan(&seq, &id, &st, &att, &owner, &left)
		t.Logf("delivery %d %s %s attempts=%d lease=%s (%d ms left)", seq, id, st, att, owner, left)
	}
}

package cluster_test

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/resource"
)

// hook is one webhook request the receiver got.
type hook struct {
	ID       string // X-Service-Delivery-Id
	Attempt  string
	Event    string
	Device   string
	At       time.Time // the body's "at"
	Alert    string    // an alert webhook's alert id
	Channels []resource.SignalChannel
	Received time.Time
}

// receiver is an HTTPS webhook receiver, as a customer runs one: it checks
// each request's signature with the organization's secret and answers 204
// after a short pause (an attempt is in flight for a while, so a relay
// killed under load may die in the middle of one).
type receiver struct {
	URL    string // https://127.0.0.1:port
	CAFile string // its certificate, for the relays' --webhook-ca
	srv    *httptest.Server
	secret string

	mu    sync.Mutex
	hooks []hook
	bad   []string // what failed the checks
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.srv = httptest.NewUnstartedServer(http.HandlerFunc(rc.serve))
	rc.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // connections cut by a killed relay are expected
	rc.srv.StartTLS()
	t.Cleanup(rc.srv.Close)
	rc.URL = rc.srv.URL
	rc.CAFile = filepath.Join(t.TempDir(), "receiver-ca.pem")
	if err := os.WriteFile(rc.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rc.srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	now := time.Now()
	if err != nil {
		return
	}
	var b struct {
		Event    string                   `json:"event"`
		DeviceID string                   `json:"deviceId"`
		At       resource.Time            `json:"at"`
		Channels []resource.SignalChannel `json:"channels"`
		Alert    struct {
			ID string `json:"id"`
		} `json:"alert"`
	}
	h := hook{ID: r.Header.Get(webhook.HeaderDeliveryID), Attempt: r.Header.Get(webhook.HeaderAttempt), Received: now}
	rc.mu.Lock()
	switch {
	case !webhook.Verify(rc.secret, body, r.Header.Get(webhook.HeaderSignature)):
		rc.bad = append(rc.bad, "bad signature on delivery "+h.ID)
	case json.Unmarshal(body, &b) != nil:
		rc.bad = append(rc.bad, "body not JSON: "+string(body))
	case h.ID == "":
		rc.bad = append(rc.bad, "no delivery id: "+string(body))
	default:
		h.Event, h.Device, h.At, h.Alert, h.Channels = b.Event, b.DeviceID, b.At.Time, b.Alert.ID, b.Channels
		rc.hooks = append(rc.hooks, h)
	}
	rc.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	w.WriteHeader(http.StatusNoContent)
}

// setSecret sets the organization's signing secret the requests are
// checked with.
func (rc *receiver) setSecret(secret string) {
	rc.mu.Lock()
	rc.secret = secret
	rc.mu.Unlock()
}

// got returns every request received so far, in arrival order, and what
// failed the checks.
func (rc *receiver) got() ([]hook, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hook(nil), rc.hooks...), append([]string(nil), rc.bad...)
}

// firsts returns the first request of each delivery id, in arrival order,
// with how many requests each id had.
func firsts(hooks []hook) ([]hook, map[string]int) {
	n := map[string]int{}
	var out []hook
	for _, h := range hooks {
		if n[h.ID] == 0 {
			out = append(out, h)
		}
		n[h.ID]++
	}
	return out, n
}

// opened returns the distinct alert.opened deliveries of alert id.
func (rc *receiver) opened(id string) []hook {
	hooks, _ := rc.got()
	first, _ := firsts(hooks)
	var out []hook
	for _, h := range first {
		if h.Event == "alert.opened" && h.Alert == id {
			out = append(out, h)
		}
	}
	return out
}

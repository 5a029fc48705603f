package webhook_test

// The receiver code of docs/webhooks.md, compiled and run against real
// deliveries: it uses only the standard library, as a customer would.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
)

// --- docs/webhooks.md: Go receiver (begin) ---

// verifyServiceSignature checks X-Service-Signature: "sha256=" and the hex
// HMAC-SHA256 of the raw body, keyed with the whole secret string.
func verifyServiceSignature(secret string, body []byte, header string) bool {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(header))
}

// verifyStandardWebhook checks webhook-signature (Standard Webhooks): the
// base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>", keyed
// with the base64-decoded part of the secret after "whsec_", and refuses
// timestamps more than 5 minutes away (replays).
func verifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time) bool {
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || now.Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false
	}
	key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(strings.TrimPrefix(secret, "whsec_"), "="))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}

func handler(secret string, seen map[string]bool, deliver func(body []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read error", http.StatusBadRequest)
			return
		}
		if !verifyServiceSignature(secret, body, r.Header.Get("X-Service-Signature")) ||
			!verifyStandardWebhook(secret, r.Header, body, time.Now()) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		id := r.Header.Get("X-Service-Delivery-Id")
		if !seen[id] { // at-least-once: a delivery may arrive twice
			seen[id] = true
			deliver(body)
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// --- docs/webhooks.md: Go receiver (end) ---

func TestDocumentedReceiver(t *testing.T) { stores.Run(t, testDocumentedReceiver) }

func testDocumentedReceiver(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	got := make(chan []byte, 10)
	srv := httptest.NewTLSServer(handler(e.org.WebhookSecret, map[string]bool{}, func(b []byte) { got <- b }))
	defer srv.Close()
	ca := writeCA(t, srv)
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: ca})
	dl := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: srv.URL + "/", Body: []byte(`{"event":"serial.signal"}`)}
	if err := d.Enqueue(context.Background(), dl); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if string(b) != `{"event":"serial.signal"}` {
			t.Errorf("body %s", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the documented receiver accepted nothing")
	}
	e.waitState(t, dl.ID, "delivered", 5*time.Second)

	// A wrong secret is refused.
	bad := httptest.NewTLSServer(handler(webhook.NewSecret(), map[string]bool{}, func([]byte) { t.Error("accepted with a wrong secret") }))
	defer bad.Close()
	dl2 := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: bad.URL + "/", Body: []byte(`{}`)}
	d2 := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: writeCA(t, bad)})
	if err := d2.Enqueue(context.Background(), dl2); err != nil {
		t.Fatal(err)
	}
	di := e.waitState(t, dl2.ID, "failed", 5*time.Second)
	if di.Attempts[0].StatusCode != http.StatusUnauthorized {
		t.Errorf("attempt %+v, want 401", di.Attempts[0])
	}
}

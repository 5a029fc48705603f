package alert_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/test/rig/dialects"
)

// stores are the dialects every test of the engine runs on.
var stores dialects.Each

func TestMain(m *testing.M) { stores.Main(m) }

// signedBoth reports whether a webhook request carries both signatures
// (X-Service-Signature and Standard Webhooks) of body with secret.
func signedBoth(secret string, r *http.Request, body []byte) bool {
	ts, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
	return webhook.Verify(secret, body, r.Header.Get(webhook.HeaderSignature)) &&
		webhook.VerifyStandard(secret, r.Header.Get("webhook-id"), ts, body, r.Header.Get("webhook-signature"))
}

// startDispatcher points org's alert webhook at receiver's /alerts and
// starts the real webhook dispatcher on s, trusting receiver's
// certificate and retrying after backoff, on the store's clock now (nil:
// the time), as the relay runs it: the deliveries the store queues with an
// alert are due at the store's time. The caller closes it.
func startDispatcher(t *testing.T, s storetest.Stores, orgID string, receiver *httptest.Server, backoff time.Duration, now func() time.Time) *webhook.Dispatcher {
	t.Helper()
	ctx := context.Background()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: receiver.Certificate().Raw}), 0o600)
	if err := s.Store.SetOrgAlertWebhook(ctx, orgID, receiver.URL+"/alerts"); err != nil {
		t.Fatal(err)
	}
	client, err := webhook.NewClient(webhook.ClientConfig{AllowPrivate: true, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	disp, err := webhook.New(webhook.Config{Store: s.Outbox, Client: client, Backoff: []time.Duration{backoff}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if err := disp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return disp
}

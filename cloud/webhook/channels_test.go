package webhook_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/notify"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/dialects"
	"github.com/fleet/fleet/test/rig/smtptest"
)

const publicURL = "https://fleet.example.com"

func alertMessage(e *env) notify.Message {
	v, th := 92.5, 80.0
	return notify.Message{Event: notify.EventOpened, OrgID: e.org.ID, AlertID: "al_1", DeviceID: e.device, DeviceName: "gw-1",
		RuleID: "rule_1", RuleName: "Boiler hot", Severity: resource.SeverityError, State: "ACTIVE",
		Text: "temperature 92.5 °C > 80 °C", Value: &v, Threshold: &th, Unit: "°C", At: time.Now().UTC(), ChannelID: "ch_1"}
}

func (e *env) channelDelivery(t testing.TB, kind, url string) *webhook.Delivery {
	t.Helper()
	body, err := alertMessage(e).Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: notify.EventOpened, URL: url, Body: body, Kind: kind, ChannelID: "ch_1"}
}

func smtpSender(t testing.TB, srv *smtptest.Server) *notify.SMTP {
	t.Helper()
	u, err := notify.ParseSMTPURL("smtp://fleet:pw@" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	s, err := notify.NewSMTP(notify.SMTPConfig{Server: u, From: "fleet@fleet.example.com", RootCAs: srv.CA, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestChannelDeliveries: an e-mail delivery goes through the SMTP server
// (STARTTLS, AUTH), a slack one is posted as {"text"} to an HTTPS incoming
// webhook; both name the device, the rule, the value and link to the
// alert, and the delivery log shows the reply codes.
func TestChannelDeliveries(t *testing.T) { stores.Run(t, testChannelDeliveries) }

func testChannelDeliveries(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	srv := smtptest.Start(t, smtptest.Options{Mode: smtptest.StartTLS, User: "fleet", Password: "pw"})
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, nil)
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile, mail: smtpSender(t, srv), publicURL: publicURL})
	ctx := context.Background()

	mailDl := e.channelDelivery(t, webhook.KindEmail, "mailto:ops@example.com, oncall@example.com")
	if err := d.Enqueue(ctx, mailDl); err != nil {
		t.Fatal(err)
	}
	m := srv.Wait(t, 5*time.Second)
	if !m.TLS || m.User != "fleet" || strings.Join(m.To, ",") != "ops@example.com,oncall@example.com" {
		t.Errorf("mail: %+v", m)
	}
	for _, want := range []string{"Message-ID: <" + mailDl.ID + "@fleet.example.com>", "Subject: =?utf-8?q?[Fleet_ERROR]_Boiler_hot_on_gw-1", publicURL + "/panel/alerts/al_1"} {
		if !strings.Contains(string(m.Data), want) {
			t.Errorf("mail lacks %q:\n%s", want, m.Data)
		}
	}
	di := e.waitState(t, mailDl.ID, "delivered", 5*time.Second)
	if len(di.Attempts) != 1 || di.Attempts[0].StatusCode != 250 {
		t.Errorf("mail attempts %+v", di.Attempts)
	}

	chat := e.channelDelivery(t, webhook.KindSlack, rcv.URL("/services/T0/B0/xyz"))
	if err := d.Enqueue(ctx, chat); err != nil {
		t.Fatal(err)
	}
	h := rcv.wait(t, 1, 5*time.Second)[0]
	var body struct{ Text string }
	if err := json.Unmarshal(h.Body, &body); err != nil || h.Path != "/services/T0/B0/xyz" {
		t.Fatalf("slack body %s (%v) at %s", h.Body, err, h.Path)
	}
	for _, want := range []string{"Boiler hot on gw-1", "92.5 °C &gt; 80 °C", publicURL + "/panel/alerts/al_1"} {
		if !strings.Contains(body.Text, want) {
			t.Errorf("slack text lacks %q: %q", want, body.Text)
		}
	}
	e.waitState(t, chat.ID, "delivered", 5*time.Second)
}

// TestEmailReplies: a 550 ends the delivery after one attempt (failed,
// the code and the server's text in the log); a 451 is retried until the
// server takes it.
func TestEmailReplies(t *testing.T) {
	e := newEnvOn(t, dialects.SQLite(t, nil))
	srv := smtptest.Start(t, smtptest.Options{Mode: smtptest.StartTLS, User: "fleet", Password: "pw", Reply: func(n int, m smtptest.Received) int {
		switch {
		case strings.Contains(strings.Join(m.To, ","), "gone@"):
			return 550
		case n <= 3:
			return 451
		}
		return 0
	}})
	d := newDispatcher(t, e, dispOpts{mail: smtpSender(t, srv), publicURL: publicURL})
	ctx := context.Background()

	gone := e.channelDelivery(t, webhook.KindEmail, "mailto:gone@example.com")
	if err := d.Enqueue(ctx, gone); err != nil {
		t.Fatal(err)
	}
	di := e.waitState(t, gone.ID, "failed", 5*time.Second)
	if len(di.Attempts) != 1 || di.Attempts[0].StatusCode != 550 || !strings.Contains(di.Attempts[0].Error, "refused by the test") || strings.Contains(di.Attempts[0].Error, "pw") {
		t.Errorf("550: %+v", di.Attempts)
	}

	later := e.channelDelivery(t, webhook.KindEmail, "mailto:ops@example.com")
	if err := d.Enqueue(ctx, later); err != nil {
		t.Fatal(err)
	}
	di = e.waitState(t, later.ID, "delivered", 10*time.Second)
	var codes []int
	for _, a := range di.Attempts {
		codes = append(codes, a.StatusCode)
	}
	if len(codes) != 3 || codes[0] != 451 || codes[1] != 451 || codes[2] != 250 {
		t.Errorf("451 then 250: codes %v", codes)
	}
	if got := srv.Messages(); len(got) != 1 {
		t.Errorf("%d messages accepted, want 1", len(got))
	}
}

// TestEmailWithoutSMTP: a relay without --smtp-url fails e-mail
// deliveries at once, saying why.
func TestEmailWithoutSMTP(t *testing.T) {
	e := newEnvOn(t, dialects.SQLite(t, nil))
	d := newDispatcher(t, e, dispOpts{})
	dl := e.channelDelivery(t, webhook.KindEmail, "mailto:ops@example.com")
	if err := d.Enqueue(context.Background(), dl); err != nil {
		t.Fatal(err)
	}
	di := e.waitState(t, dl.ID, "failed", 5*time.Second)
	if len(di.Attempts) != 1 || !strings.Contains(di.Attempts[0].Error, "--smtp-url") {
		t.Errorf("attempts %+v", di.Attempts)
	}
}

// BenchmarkEmailThroughOutbox measures e-mail notifications per second
// from the outbox to a real SMTP server on loopback (STARTTLS and AUTH,
// one connection per message), on SQLite.
func BenchmarkEmailThroughOutbox(b *testing.B) {
	e := newEnvOn(b, dialects.SQLite(b, nil))
	srv := smtptest.Start(b, smtptest.Options{Mode: smtptest.StartTLS, User: "fleet", Password: "pw"})
	d := newDispatcher(b, e, dispOpts{mail: smtpSender(b, srv), publicURL: publicURL})
	benchThroughOutbox(b, e, d, webhook.KindEmail, "mailto:ops@example.com", "mails/s", func() { srv.Wait(b, 30*time.Second) })
}

// BenchmarkSlackThroughOutbox measures chat notifications per second from
// the outbox to an HTTPS incoming webhook on loopback, on SQLite.
func BenchmarkSlackThroughOutbox(b *testing.B) {
	e := newEnvOn(b, dialects.SQLite(b, nil))
	rcv := newReceiver(b, func() string { return e.org.WebhookSecret }, nil)
	d := newDispatcher(b, e, dispOpts{allowPrivate: true, caFile: rcv.caFile, publicURL: publicURL})
	benchThroughOutbox(b, e, d, webhook.KindSlack, rcv.URL("/services/T0/B0/xyz"), "messages/s", func() { rcv.wait(b, 1, 30*time.Second) })
}

// benchThroughOutbox submits b.N channel deliveries of kind to url,
// spread over 16 devices (the FIFO is per device: they send side by
// side), calls received once for each, and reports them per second as
// unit.
func benchThroughOutbox(b *testing.B, e *env, d *webhook.Dispatcher, kind, url, unit string, received func()) {
	devs := make([]string, 16)
	for i := range devs {
		devs[i] = e.addDevice(b, "bench-"+strconv.Itoa(i))
	}
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		dl := e.channelDelivery(b, kind, url)
		dl.DeviceID = devs[i%len(devs)]
		if err := d.Submit(ctx, dl); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < b.N; i++ {
		received()
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), unit)
}

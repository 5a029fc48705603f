package storetest

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/notify"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/resource"
)

// notifyEnv is an organization whose alert webhook is set, with a device
// and notification channels, and a cursor over the outbox: what each step
// of a test queued.
type notifyEnv struct {
	*env
	org    cloud.Org
	dev    device
	cursor int64
}

const orgAlertURL = "https://hooks.example.com/alerts"

func newNotifyEnv(t *testing.T, open Opener) *notifyEnv {
	e := newEnv(t, open)
	n := &notifyEnv{env: e, org: e.org("acme")}
	n.dev = e.device(n.org.ID, "IG-500")
	if err := e.Store.SetOrgAlertWebhook(e.ctx, n.org.ID, orgAlertURL); err != nil {
		t.Fatal(err)
	}
	return n
}

// channel adds a notification channel of the organization.
func (n *notifyEnv) channel(name, kind, target string, min resource.Severity) resource.NotificationChannel {
	n.t.Helper()
	c, err := n.Store.Rules().CreateChannel(n.ctx, cloud.NewChannel{OrgID: n.org.ID, Name: name, Kind: kind, Target: target, MinSeverity: min})
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// ruleNotifying sets the notify list and repeat of the organization's rule
// named name and returns it as the engine reads it.
func (n *notifyEnv) ruleNotifying(name, repeat string, channels ...string) alert.Rule {
	n.t.Helper()
	r := n.rule(n.org.ID, name)
	if channels == nil {
		channels = []string{}
	}
	if _, err := n.Store.Rules().UpdateRule(n.ctx, n.org.ID, r.ID, cloud.RulePatch{Notify: &channels, RepeatEvery: &repeat}); err != nil {
		n.t.Fatal(err)
	}
	return n.rule(n.org.ID, name)
}

// open opens an alert of r on d at the clock's time, with a threshold
// alert's payload.
func (n *notifyEnv) open(d device, r alert.Rule) resource.Alert {
	n.t.Helper()
	payload := fmt.Sprintf(`{"rule":%q,"ruleId":%q,"source":"metric.cpuPct","op":">=","value":95.5,"threshold":90,"clear":80,"for":"0s","unit":"%%"}`, r.Name, r.ID)
	a, opened, err := n.Engine.OpenAlert(n.ctx, alert.Opening{OrgID: d.OrgID, DeviceID: d.ID, Rule: r, Message: "CPU usage 95.5% at or above 90.0%",
		Payload: json.RawMessage(payload), At: n.clock.Now(), WithEvent: true})
	if err != nil || !opened {
		n.t.Fatalf("open %s on %s: opened %v, %v", r.Name, d.ID, opened, err)
	}
	return a
}

// queued returns the deliveries queued since the last call, in outbox
// order.
func (n *notifyEnv) queued() []*webhook.Delivery {
	n.t.Helper()
	page, _, err := n.Outbox.Pending(n.ctx, n.cursor, 1000)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, d := range page {
		n.cursor = max(n.cursor, d.Seq)
	}
	return page
}

// describe names deliveries as "event kind channel url", sorted.
func describe(ds []*webhook.Delivery) string {
	var out []string
	for _, d := range ds {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s %s", d.Event, d.Kind, d.ChannelID, d.URL)))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// want is describe's form of the deliveries expected.
func want(lines ...string) string {
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// testAlertNotifications: the change of an alert queues, in its own
// transaction, the organization's alert webhook (opened, acknowledged,
// resolved) and, when it opens or resolves, each channel of the rule whose
// minimum severity the alert reaches, unless a silence covers the device
// (by its id or its tags: then only the alert webhook); each delivery
// carries what its kind sends.
func testAlertNotifications(t *testing.T, open Opener) {
	n := newNotifyEnv(t, open)
	mail := n.channel("ops mail", resource.ChannelEmail, "ops@example.com", resource.SeverityWarning)
	chat := n.channel("pager chat", resource.ChannelSlack, "https://chat.example.com/hooks/1", resource.SeverityCritical)
	hook := n.channel("ticketing", resource.ChannelWebhook, "https://tickets.example.com/in", resource.SeverityInfo)
	n.channel("unused", resource.ChannelSlack, "https://chat.example.com/hooks/2", resource.SeverityInfo)
	cpu := n.ruleNotifying("high_cpu", "0s", mail.ID, chat.ID, hook.ID) // WARNING: not enough for chat
	// A silence of another device changes nothing here.
	other := n.device(n.org.ID, "IG-500")
	if _, err := n.Store.Rules().CreateSilence(n.ctx, n.org.ID, cloud.NewSilence{Scope: resource.RuleScope{DeviceIDs: []string{other.ID}},
		From: n.clock.Now().Add(-time.Minute), To: n.clock.Now().Add(time.Hour), CreatedBy: "cli"}); err != nil {
		t.Fatal(err)
	}
	n.queued()

	a := n.open(n.dev, cpu)
	ds := n.queued()
	if got := describe(ds); got != want("alert.opened   "+orgAlertURL, "alert.opened email "+mail.ID+" mailto:ops@example.com",
		"alert.opened webhook "+hook.ID+" https://tickets.example.com/in") {
		t.Fatalf("opening queued:\n%s", got)
	}
	for _, d := range ds {
		if d.OrgID != n.org.ID || d.DeviceID != n.dev.ID || d.State != webhook.StatePending || d.Attempts != 0 || !d.CreatedAt.Equal(n.clock.Now()) {
			t.Errorf("delivery %+v", d)
		}
		switch d.Kind {
		case "", resource.ChannelWebhook: // the spec's signed body
			var w resource.AlertWebhook
			if err := json.Unmarshal(d.Body, &w); err != nil || w.Event != "alert.opened" || w.DeviceID != n.dev.ID || w.Alert.ID != a.ID ||
				w.Alert.State != resource.AlertActive || w.Alert.Message != a.Message || !w.At.Equal(n.clock.Now()) {
				t.Errorf("%s body %s (%v)", d.URL, d.Body, err)
			}
		case resource.ChannelEmail:
			m, err := notify.Decode(d.Body)
			if err != nil || m.Event != notify.EventOpened || m.OrgID != n.org.ID || m.AlertID != a.ID || m.DeviceID != n.dev.ID ||
				m.DeviceName != "dev" || m.RuleID != cpu.ID || m.RuleName != "high_cpu" || m.Severity != resource.SeverityWarning ||
				m.State != "ACTIVE" || m.Text != a.Message || m.Source != "metric.cpuPct" || m.Value == nil || *m.Value != 95.5 ||
				m.Threshold == nil || *m.Threshold != 90 || m.Unit != "%" || m.ChannelID != mail.ID || !m.At.Equal(n.clock.Now()) {
				t.Errorf("e-mail message %s (%v)", d.Body, err)
			}
		}
	}

	n.clock.Add(time.Minute)
	if _, err := n.Store.Alerts().Acknowledge(n.ctx, n.org.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	ds = n.queued()
	if got := describe(ds); got != want("alert.acknowledged   "+orgAlertURL) {
		t.Errorf("acknowledging queued:\n%s", got)
	}
	if _, err := n.Store.Alerts().Acknowledge(n.ctx, n.org.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	if ds := n.queued(); len(ds) != 0 {
		t.Errorf("acknowledging again queued %s", describe(ds))
	}

	n.clock.Add(time.Minute)
	if _, err := n.Store.Alerts().Resolve(n.ctx, n.org.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	ds = n.queued()
	if got := describe(ds); got != want("alert.resolved   "+orgAlertURL, "alert.resolved email "+mail.ID+" mailto:ops@example.com",
		"alert.resolved webhook "+hook.ID+" https://tickets.example.com/in") {
		t.Errorf("resolving through the API queued:\n%s", got)
	}
	for _, d := range ds {
		if d.Kind == resource.ChannelEmail {
			if m, _ := notify.Decode(d.Body); m.Event != notify.EventResolved || m.State != "RESOLVED" {
				t.Errorf("resolved message %s", d.Body)
			}
		}
	}

	// The engine's resolve notifies the same.
	a = n.open(n.dev, cpu)
	n.queued()
	if _, ok, err := n.Engine.ResolveAlert(n.ctx, n.org.ID, n.dev.ID, cpu, "CPU back to normal", n.clock.Now()); err != nil || !ok {
		t.Fatalf("resolve: %v, %v", ok, err)
	}
	if got := describe(n.queued()); got != want("alert.resolved   "+orgAlertURL, "alert.resolved email "+mail.ID+" mailto:ops@example.com",
		"alert.resolved webhook "+hook.ID+" https://tickets.example.com/in") {
		t.Errorf("the engine's resolve queued:\n%s", got)
	}

	// A CRITICAL rule reaches every channel.
	crit := n.rule(n.org.ID, "disk_full")
	sev := resource.SeverityCritical
	chans := []string{mail.ID, chat.ID}
	if _, err := n.Store.Rules().UpdateRule(n.ctx, n.org.ID, crit.ID, cloud.RulePatch{Severity: &sev, Notify: &chans}); err != nil {
		t.Fatal(err)
	}
	n.open(n.dev, n.rule(n.org.ID, "disk_full"))
	if got := describe(n.queued()); got != want("alert.opened   "+orgAlertURL, "alert.opened email "+mail.ID+" mailto:ops@example.com",
		"alert.opened slack "+chat.ID+" https://chat.example.com/hooks/1") {
		t.Errorf("a CRITICAL alert queued:\n%s", got)
	}

	// A silence covering the device: the alert opens and is listed, the
	// alert webhook (the state feed) is told, no channel is.
	sil, err := n.Store.Rules().CreateSilence(n.ctx, n.org.ID, cloud.NewSilence{Scope: resource.RuleScope{DeviceIDs: []string{n.dev.ID}},
		From: n.clock.Now().Add(-time.Minute), To: n.clock.Now().Add(time.Hour), Comment: "maintenance", CreatedBy: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	a = n.open(n.dev, cpu)
	if got := describe(n.queued()); got != want("alert.opened   "+orgAlertURL) {
		t.Errorf("opening under a silence queued:\n%s", got)
	}
	if l, err := n.Store.Alerts().ListAlerts(n.ctx, n.org.ID, cloud.AlertFilter{Page: cloud.Page{Limit: 10}}); err != nil || !hasAlert(l.Data, a.ID) {
		t.Errorf("a silenced alert is not listed: %v", err)
	}
	if _, err := n.Store.Alerts().Resolve(n.ctx, n.org.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := describe(n.queued()); got != want("alert.resolved   "+orgAlertURL) {
		t.Errorf("resolving under a silence queued:\n%s", got)
	}
	// Once the silence ended, channels are told again.
	if err := n.Store.Rules().DeleteSilence(n.ctx, n.org.ID, sil.ID); err != nil {
		t.Fatal(err)
	}
	n.clock.Add(time.Second)
	n.open(n.dev, cpu)
	if ds := n.queued(); len(ds) != 3 {
		t.Errorf("after the silence ended, opening queued:\n%s", describe(ds))
	}

	// A silence of a tag covers the devices holding it, not the others.
	tagged := n.device(n.org.ID, "IG-500")
	if err := n.Store.SetDeviceTags(n.ctx, tagged.ID, []string{"site:north", "rack-2"}); err != nil {
		t.Fatal(err)
	}
	if err := n.Store.SetDeviceTags(n.ctx, other.ID, []string{"site:south"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Store.Rules().CreateSilence(n.ctx, n.org.ID, cloud.NewSilence{Scope: resource.RuleScope{Tags: []string{"site:north"}},
		From: n.clock.Now(), To: n.clock.Now().Add(time.Hour), Comment: "site work", CreatedBy: "cli"}); err != nil {
		t.Fatal(err)
	}
	n.queued()
	n.open(tagged, cpu)
	if got := describe(n.queued()); got != want("alert.opened   "+orgAlertURL) {
		t.Errorf("opening on a device of a silenced tag queued:\n%s", got)
	}
	untagged := n.device(n.org.ID, "IG-500")
	n.open(untagged, cpu)
	if ds := n.queued(); len(ds) != 3 {
		t.Errorf("opening on a device without the silenced tag queued:\n%s", describe(ds))
	}

	// Without an alert webhook URL only channels are told.
	if err := n.Store.SetOrgAlertWebhook(n.ctx, n.org.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := n.Engine.ResolveAlert(n.ctx, n.org.ID, n.dev.ID, cpu, "ok", n.clock.Now()); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got := describe(n.queued()); got != want("alert.resolved email "+mail.ID+" mailto:ops@example.com",
		"alert.resolved webhook "+hook.ID+" https://tickets.example.com/in") {
		t.Errorf("without an alert webhook, resolving queued:\n%s", got)
	}
}

func hasAlert(as []resource.Alert, id string) bool {
	for _, a := range as {
		if a.ID == id {
			return true
		}
	}
	return false
}

// testAlertReminders: an ACTIVE alert whose rule repeats notifies its
// channels again (not the alert webhook) each time the interval passed
// since it last did, once whichever relays remind at once; an
// acknowledged or resolved alert, one of a rule that does not repeat, and
// one under a silence notify nobody.
func testAlertReminders(t *testing.T, open Opener) {
	n := newNotifyEnv(t, open)
	mail := n.channel("ops mail", resource.ChannelEmail, "ops@example.com", resource.SeverityInfo)
	cpu := n.ruleNotifying("high_cpu", "10m", mail.ID)
	mem := n.ruleNotifying("high_mem", "0s", mail.ID)
	start := n.clock.Now()
	a := n.open(n.dev, cpu)
	n.open(n.dev, mem)
	n.queued()
	remind := func(e *env, after time.Duration) int {
		t.Helper()
		k, err := e.Engine.Remind(e.ctx, start.Add(after), 100)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if k := remind(n.env, 9*time.Minute); k != 0 {
		t.Errorf("reminded %d alerts before the interval passed", k)
	}
	if k := remind(n.env, 10*time.Minute); k != 1 {
		t.Errorf("reminded %d alerts once the interval passed, want 1", k)
	}
	ds := n.queued()
	if got := describe(ds); got != want("alert.reminder email "+mail.ID+" mailto:ops@example.com") {
		t.Fatalf("a reminder queued:\n%s", got)
	}
	if m, err := notify.Decode(ds[0].Body); err != nil || m.Event != notify.EventReminder || m.AlertID != a.ID || m.RuleName != "high_cpu" ||
		!m.At.Equal(start.Add(10*time.Minute)) {
		t.Errorf("reminder message %s (%v)", ds[0].Body, err)
	}
	if k := remind(n.env, 19*time.Minute); k != 0 {
		t.Errorf("reminded %d alerts 9 minutes after the last reminder", k)
	}
	// Two relays reminding at once remind once.
	e2 := n.reopen()
	var wg sync.WaitGroup
	var total [2]int
	for i, e := range []*env{n.env, e2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := e.Engine.Remind(e.ctx, start.Add(20*time.Minute), 100)
			if err != nil {
				t.Error(err)
			}
			total[i] = k
		}()
	}
	wg.Wait()
	if total[0]+total[1] != 1 || len(n.queued()) != 1 {
		t.Errorf("two relays reminding at once reminded %v", total)
	}
	// Under a silence: the alert's turn passes, nobody is told.
	sil, err := n.Store.Rules().CreateSilence(n.ctx, n.org.ID, cloud.NewSilence{Scope: resource.RuleScope{DeviceIDs: []string{n.dev.ID}},
		From: start, To: start.Add(35 * time.Minute), CreatedBy: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	if k := remind(n.env, 30*time.Minute); k != 1 || len(n.queued()) != 0 {
		t.Errorf("under a silence: reminded %d", k)
	}
	if err := n.Store.Rules().DeleteSilence(n.ctx, n.org.ID, sil.ID); err != nil {
		t.Fatal(err)
	}
	// Acknowledged: no reminder any more.
	if _, err := n.Store.Alerts().Acknowledge(n.ctx, n.org.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	n.queued()
	if k := remind(n.env, 2*time.Hour); k != 0 || len(n.queued()) != 0 {
		t.Errorf("an acknowledged alert reminded (%d)", k)
	}
	// A resolved alert neither.
	b := n.open(n.device(n.org.ID, "IG-500"), cpu)
	if _, err := n.Store.Alerts().Resolve(n.ctx, n.org.ID, b.ID); err != nil {
		t.Fatal(err)
	}
	n.queued()
	if k := remind(n.env, 3*time.Hour); k != 0 {
		t.Errorf("a resolved alert reminded (%d)", k)
	}
}

// testAlertNotificationsSurviveCrash: the deliveries of an alert change
// are in the outbox once its transaction committed, before anybody is
// told: a relay that dies right after the commit (nobody wakes a
// dispatcher) loses none, and the next relay's dispatcher sends each once.
func testAlertNotificationsSurviveCrash(t *testing.T, open Opener) {
	n := newNotifyEnv(t, open)
	var mu sync.Mutex
	got := map[string]int{} // path -> requests
	rcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got[r.URL.Path]++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	if err := n.Store.SetOrgAlertWebhook(n.ctx, n.org.ID, rcv.URL+"/alerts"); err != nil {
		t.Fatal(err)
	}
	hook := n.channel("ticketing", resource.ChannelWebhook, rcv.URL+"/channel", resource.SeverityInfo)
	cpu := n.ruleNotifying("high_cpu", "0s", hook.ID)

	// The relay that opens the alert dies after the commit: its handle is
	// closed and no dispatcher was told.
	dying := n.reopen()
	if _, opened, err := dying.Engine.OpenAlert(n.ctx, alert.Opening{OrgID: n.org.ID, DeviceID: n.dev.ID, Rule: cpu, Message: "CPU high",
		At: n.clock.Now(), WithEvent: true}); err != nil || !opened {
		t.Fatal(opened, err)
	}
	dying.Close()

	// The next relay starts its dispatcher on the outbox.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rcv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() *webhook.Dispatcher {
		client, err := webhook.NewClient(webhook.ClientConfig{AllowPrivate: true, CAFile: ca})
		if err != nil {
			t.Fatal(err)
		}
		d, err := webhook.New(webhook.Config{Store: n.Outbox, Client: client, Now: n.clock.Now, PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, err := n.Store.WebhookDeliveries(n.ctx, n.org.ID, 10)
		if err != nil {
			t.Fatal(err)
		}
		delivered := 0
		for _, x := range ds {
			if x.State == string(webhook.StateDelivered) {
				delivered++
			}
		}
		if delivered == 2 && len(ds) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries after the restart: %+v", ds)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.Close()
	// Another restart sends nothing again.
	d = start()
	time.Sleep(100 * time.Millisecond)
	d.Close()
	mu.Lock()
	defer mu.Unlock()
	if got["/alerts"] != 1 || got["/channel"] != 1 || len(got) != 2 {
		t.Errorf("requests by path %v, want one alert webhook and one channel webhook", got)
	}
}

// testChannelTest: testing a channel queues one notify.test message to it,
// of its kind, under the delivery id returned; another organization's
// channel is not found and queues nothing.
func testChannelTest(t *testing.T, open Opener) {
	n := newNotifyEnv(t, open)
	mail := n.channel("ops mail", resource.ChannelEmail, "ops@example.com, oncall@example.com", resource.SeverityCritical)
	chat := n.channel("chat", resource.ChannelSlack, "https://chat.example.com/hooks/1", resource.SeverityInfo)
	n.queued()
	for _, c := range []resource.NotificationChannel{mail, chat} {
		id, err := n.Store.Rules().TestChannel(n.ctx, n.org.ID, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		ds := n.queued()
		if len(ds) != 1 || ds[0].ID != id || ds[0].Event != notify.EventTest || ds[0].Kind != c.Kind || ds[0].ChannelID != c.ID || ds[0].OrgID != n.org.ID {
			t.Fatalf("testing %s queued %+v", c.Kind, ds)
		}
		wantURL := c.Target
		if c.Kind == resource.ChannelEmail {
			wantURL = "mailto:" + c.Target
		}
		m, err := notify.Decode(ds[0].Body)
		if ds[0].URL != wantURL || err != nil || m.Event != notify.EventTest || m.OrgID != n.org.ID || m.ChannelID != c.ID || m.Text == "" || !m.At.Equal(n.clock.Now()) {
			t.Errorf("test of %s: %s %s (%v)", c.Kind, ds[0].URL, ds[0].Body, err)
		}
	}
	other := n.env.org("other")
	if _, err := n.Store.Rules().TestChannel(n.ctx, other.ID, mail.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("testing another organization's channel: %v", err)
	}
	if _, err := n.Store.Rules().TestChannel(n.ctx, n.org.ID, "nosuchchannel"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("testing an unknown channel: %v", err)
	}
	if ds := n.queued(); len(ds) != 0 {
		t.Errorf("failed tests queued %s", describe(ds))
	}
}

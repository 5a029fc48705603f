package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/webhook"
)

func delivery(id, orgID, deviceID string, at time.Time) *webhook.Delivery {
	return &webhook.Delivery{ID: id, OrgID: orgID, DeviceID: deviceID, Event: webhook.EventSignal,
		URL: "https://hooks.example.com/s", Body: []byte(`{"event":"serial.signal"}`), NextAttemptAt: at, CreatedAt: at}
}

// testWebhookOutbox: deliveries keep their insertion order (Seq), attempts
// move them on, only pending ones are handed out again, a final state is
// not undone, and pruning removes ended ones with their attempts.
func testWebhookOutbox(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	now := t0
	old, recent := now.Add(-10*24*time.Hour), now.Add(-time.Hour)
	var ds []*webhook.Delivery
	var atts []webhook.Attempt
	// 2,500 old ended deliveries (more than one prune transaction), 10
	// recent ended ones, 5 old pending ones.
	for i := 0; i < 2515; i++ {
		at := old
		if i >= 2500 && i < 2510 {
			at = recent
		}
		d := delivery(fmt.Sprintf("d%05d", i), org.ID, "dev", at)
		ds = append(ds, d)
		if i < 2510 {
			atts = append(atts, webhook.Attempt{DeliveryID: d.ID, Number: 1, At: at, StatusCode: 200, State: webhook.StateDelivered})
		} else {
			atts = append(atts, webhook.Attempt{DeliveryID: d.ID, Number: 1, At: at, StatusCode: 503, State: webhook.StatePending, NextAttemptAt: now})
		}
	}
	if err := e.Outbox.WriteOutbox(e.ctx, ds, atts); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(ds); i++ {
		if ds[i].Seq <= ds[i-1].Seq {
			t.Fatalf("Seq %d after %d: not in insertion order", ds[i].Seq, ds[i-1].Seq)
		}
	}
	// A final state is final: a late pending record does not reopen it.
	if err := e.Outbox.WriteOutbox(e.ctx, nil, []webhook.Attempt{{DeliveryID: "d00000", Number: 2, At: now, StatusCode: 503, State: webhook.StatePending, NextAttemptAt: now}}); err != nil {
		t.Fatal(err)
	}
	page, maxSeq, err := e.Outbox.Pending(e.ctx, 0, 100)
	if err != nil || len(page) != 5 || page[0].ID != "d02510" || page[4].ID != "d02514" || maxSeq != ds[len(ds)-1].Seq {
		t.Fatalf("Pending = %d deliveries, max %d, %v", len(page), maxSeq, err)
	}
	p := page[0]
	if p.Attempts != 1 || p.State != webhook.StatePending || !p.NextAttemptAt.Equal(now) || p.OrgID != org.ID || p.DeviceID != "dev" ||
		p.Event != webhook.EventSignal || string(p.Body) != `{"event":"serial.signal"}` || !p.CreatedAt.Equal(old) {
		t.Errorf("pending delivery = %+v", p)
	}
	if page, _, _ := e.Outbox.Pending(e.ctx, page[1].Seq, 2); len(page) != 2 || page[0].ID != "d02512" {
		t.Errorf("Pending after a cursor = %+v", page)
	}
	if page, maxSeq2, err := e.Outbox.Pending(e.ctx, maxSeq, 100); err != nil || len(page) != 0 || maxSeq2 != maxSeq {
		t.Errorf("Pending after the last = %d, %d, %v", len(page), maxSeq2, err)
	}
	n, err := e.Outbox.Prune(e.ctx, now.Add(-7*24*time.Hour))
	if err != nil || n != 2500 {
		t.Fatalf("Prune = %d, %v; want 2500", n, err)
	}
	infos, err := e.Store.WebhookDeliveries(e.ctx, org.ID, 1000)
	if err != nil || len(infos) != 15 {
		t.Fatalf("deliveries after prune = %d, %v", len(infos), err)
	}
	pending := 0
	for _, in := range infos {
		if len(in.Attempts) != 1 {
			t.Errorf("delivery %s has %d attempts", in.ID, len(in.Attempts))
		}
		if in.State == string(webhook.StatePending) {
			pending++
		}
	}
	if pending != 5 || infos[0].ID != "d02514" {
		t.Errorf("%d pending, newest %s", pending, infos[0].ID)
	}
	// Attempts and the ended state: exhausted after retries.
	if err := e.Outbox.WriteOutbox(e.ctx, nil, []webhook.Attempt{
		{DeliveryID: "d02510", Number: 2, At: now, Error: "timeout after 10s", Duration: 10 * time.Second, State: webhook.StateExhausted},
	}); err != nil {
		t.Fatal(err)
	}
	if page, _, _ := e.Outbox.Pending(e.ctx, 0, 100); len(page) != 4 {
		t.Errorf("%d pending after one ended", len(page))
	}
	// One write holding a failed attempt and its successful retry: the
	// later one's state is the delivery's, both attempts are recorded.
	if err := e.Outbox.WriteOutbox(e.ctx, nil, []webhook.Attempt{
		{DeliveryID: "d02511", Number: 2, At: now, StatusCode: 503, State: webhook.StatePending, NextAttemptAt: now.Add(time.Second)},
		{DeliveryID: "d02511", Number: 3, At: now.Add(time.Second), StatusCode: 204, State: webhook.StateDelivered},
	}); err != nil {
		t.Fatal(err)
	}
	if page, _, _ := e.Outbox.Pending(e.ctx, 0, 100); len(page) != 3 || page[0].ID != "d02512" {
		t.Errorf("pending after a retry delivered in the same write: %d, first %+v", len(page), page[0])
	}
	infos, err = e.Store.WebhookDeliveries(e.ctx, org.ID, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.ID == "d02511" && (in.State != string(webhook.StateDelivered) || len(in.Attempts) != 3 || in.Attempts[2].StatusCode != 204) {
			t.Errorf("delivery with a retry in one write: %s, attempts %+v", in.State, in.Attempts)
		}
	}
	// The counts by state: the 10 recent delivered ones and the retried
	// one, one exhausted, three still pending; nothing of another
	// organization.
	counts, err := e.Store.WebhookDeliveryCounts(e.ctx, org.ID)
	if err != nil || len(counts) != 3 || counts["delivered"] != 11 || counts["exhausted"] != 1 || counts["pending"] != 3 {
		t.Errorf("WebhookDeliveryCounts = %v, %v; want 11 delivered, 1 exhausted, 3 pending", counts, err)
	}
	if counts, err := e.Store.WebhookDeliveryCounts(e.ctx, e.org("other").ID); err != nil || len(counts) != 0 {
		t.Errorf("WebhookDeliveryCounts of an organization without deliveries = %v, %v", counts, err)
	}
}

// testWebhookAdmin: the delivery log and redelivery under a new id.
func testWebhookAdmin(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	other := e.org("other")
	at := t0
	dl := delivery("dlv1abc", org.ID, "dev1", at)
	if err := e.Outbox.WriteOutbox(e.ctx, []*webhook.Delivery{dl, delivery("dlvother", other.ID, "dev2", at)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Outbox.WriteOutbox(e.ctx, nil, []webhook.Attempt{
		{DeliveryID: dl.ID, Number: 1, At: at, StatusCode: 503, Duration: 12 * time.Millisecond, State: webhook.StatePending, NextAttemptAt: at.Add(5 * time.Second)},
		{DeliveryID: dl.ID, Number: 2, At: at.Add(5 * time.Second), Error: "timeout after 10s", Duration: 10 * time.Second, State: webhook.StatePending, NextAttemptAt: at.Add(40 * time.Second)},
	}); err != nil {
		t.Fatal(err)
	}
	ds, err := e.Store.WebhookDeliveries(e.ctx, org.ID, 50)
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries = %+v, %v", ds, err)
	}
	d := ds[0]
	if d.ID != dl.ID || d.State != "pending" || len(d.Attempts) != 2 || d.Attempts[0].StatusCode != 503 || d.Attempts[0].DurationMs != 12 ||
		d.Attempts[1].Error != "timeout after 10s" || d.Attempts[1].StatusCode != 0 || d.NextAttemptAt == nil || !d.NextAttemptAt.Equal(at.Add(40*time.Second)) ||
		!d.CreatedAt.Equal(at) || d.URL != dl.URL || d.Event != dl.Event || d.DeviceID != "dev1" {
		t.Errorf("delivery = %+v", d)
	}
	e.clock.Add(time.Minute)
	id, err := e.Store.RedeliverWebhook(e.ctx, dl.ID)
	if err != nil || id == dl.ID {
		t.Fatalf("redeliver = %q, %v", id, err)
	}
	ds, _ = e.Store.WebhookDeliveries(e.ctx, org.ID, 50)
	if len(ds) != 2 || ds[0].ID != id || ds[0].RedeliveryOf != dl.ID || ds[0].State != "pending" || len(ds[0].Attempts) != 0 || !ds[0].CreatedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("after redeliver: %+v", ds)
	}
	page, _, _ := e.Outbox.Pending(e.ctx, 0, 100)
	if len(page) != 3 || page[2].ID != id || string(page[2].Body) != string(dl.Body) || page[2].Attempts != 0 {
		t.Errorf("pending after redeliver: %+v", page)
	}
	if _, err := e.Store.RedeliverWebhook(e.ctx, "nosuchdelivery"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("redeliver unknown: %v", err)
	}
	if ds, _ := e.Store.WebhookDeliveries(e.ctx, "nosuchorg", 50); len(ds) != 0 {
		t.Errorf("deliveries of an unknown org: %+v", ds)
	}

	// A notification channel's delivery keeps its kind and channel through
	// the outbox's reads, the log and a redelivery.
	mail := delivery("dlvmail", org.ID, "dev1", at)
	mail.Event, mail.Kind, mail.ChannelID, mail.URL, mail.Body = "alert.opened", "email", "ch1", "mailto:ops@example.com", []byte(`{"event":"alert.opened"}`)
	if err := e.Outbox.WriteOutbox(e.ctx, []*webhook.Delivery{mail}, nil); err != nil {
		t.Fatal(err)
	}
	page, _, _ = e.Outbox.Pending(e.ctx, page[2].Seq, 100)
	if len(page) != 1 || page[0].ID != "dlvmail" || page[0].Kind != "email" || page[0].ChannelID != "ch1" || page[0].URL != "mailto:ops@example.com" {
		t.Errorf("pending channel delivery: %+v", page)
	}
	again, err := e.Store.RedeliverWebhook(e.ctx, "dlvmail")
	if err != nil {
		t.Fatal(err)
	}
	ds, _ = e.Store.WebhookDeliveries(e.ctx, org.ID, 2)
	if len(ds) != 2 || ds[0].ID != again || ds[0].Kind != "email" || ds[0].ChannelID != "ch1" || ds[1].Kind != "email" || ds[1].ChannelID != "ch1" || ds[1].URL != "mailto:ops@example.com" {
		t.Errorf("channel deliveries in the log: %+v", ds)
	}
	if ds, _ := e.Store.WebhookDeliveries(e.ctx, org.ID, 50); ds[len(ds)-1].Kind != "" || ds[len(ds)-1].ChannelID != "" {
		t.Errorf("an alert webhook's delivery has a kind or channel: %+v", ds[len(ds)-1])
	}
}

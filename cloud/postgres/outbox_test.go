package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/cloud/webhook"
)

// TestSharedOutboxLeases: an ordering queue (one device's signals) is
// leased to one relay at a time, whole; what a relay inserts into a queue
// it holds (or nobody holds) is its own at once; another relay takes a
// queue only once its lease ran out, with every delivery under the same id
// and in order; concurrent claims never split a queue.
func TestSharedOutboxLeases(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, migratedDB(t))
	a, b := postgres.NewWebhookStore(db, "relay-a"), postgres.NewWebhookStore(db, "relay-b")
	now := time.Now().UTC().Truncate(time.Millisecond)
	mk := func(id, dev, event string) *webhook.Delivery {
		return &webhook.Delivery{ID: id, OrgID: "org", DeviceID: dev, Event: event, URL: "https://example.com/", Body: []byte(`{}`), NextAttemptAt: now, CreatedAt: now}
	}
	// a inserts two signals of dev1: nobody held the queue, so both are a's.
	d1, d2 := mk("s1", "dev1", webhook.EventSignal), mk("s2", "dev1", webhook.EventSignal)
	d2.Kind, d2.ChannelID = "slack", "ch2" // carried through a claim
	if err := a.WriteOutbox(ctx, []*webhook.Delivery{d1, d2}, nil); err != nil {
		t.Fatal(err)
	}
	if !d1.Claimed || !d2.Claimed {
		t.Fatalf("inserts into a free queue not claimed: %v %v", d1.Claimed, d2.Claimed)
	}
	// b inserts the next signal of dev1 (a holds the queue) and an alert of
	// dev1 (another queue, free): the signal is left to a.
	d3, al := mk("s3", "dev1", webhook.EventSignal), mk("a1", "dev1", webhook.EventAlertOpened)
	if err := b.WriteOutbox(ctx, []*webhook.Delivery{d3, al}, nil); err != nil {
		t.Fatal(err)
	}
	if d3.Claimed || !al.Claimed {
		t.Fatalf("b's inserts: signal claimed %v (want false: a holds the queue), alert claimed %v", d3.Claimed, al.Claimed)
	}
	if got, err := b.Claim(ctx, 100, 30*time.Second); err != nil || len(got) != 0 {
		t.Fatalf("b claims %v, %v: a holds dev1's signals", idsOf(got), err)
	}
	got, err := a.Claim(ctx, 100, 30*time.Second)
	if err != nil || len(got) != 1 || got[0].ID != "s3" {
		t.Fatalf("a claims %v, %v; want s3", idsOf(got), err)
	}
	held, err := a.Renew(ctx, 30*time.Second)
	if err != nil || len(held) != 3 {
		t.Fatalf("a renews %v, %v; want s1 s2 s3", held, err)
	}
	// a stops renewing (it died): once its leases ran out, b takes the
	// whole queue, in order, under the same ids.
	if _, err := a.Renew(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	got, err = b.Claim(ctx, 100, 30*time.Second)
	if err != nil || fmt.Sprint(idsOf(got)) != "[s1 s2 s3]" {
		t.Fatalf("b takes over %v, %v; want [s1 s2 s3]", idsOf(got), err)
	}
	if got[1].Kind != "slack" || got[1].ChannelID != "ch2" || got[0].Kind != "" {
		t.Errorf("claimed kinds %q %q, channel %q; want \"\", slack, ch2", got[0].Kind, got[1].Kind, got[1].ChannelID)
	}
	if held, _ := a.Renew(ctx, 30*time.Second); len(held) != 0 {
		t.Errorf("a still holds %v after b took over", held)
	}
	// A final state ends the lease.
	if err := b.WriteOutbox(ctx, nil, []webhook.Attempt{{DeliveryID: "s1", Number: 1, At: now, StatusCode: 200, State: webhook.StateDelivered}}); err != nil {
		t.Fatal(err)
	}
	if held, _ := b.Renew(ctx, 30*time.Second); fmt.Sprint(held) == "" || len(held) != 3 {
		t.Errorf("b holds %v after s1 was delivered; want s2 s3 a1", held)
	}

	// Many queues, two relays claiming at once: each queue goes to one.
	var many []*webhook.Delivery
	for dev := 0; dev < 20; dev++ {
		for k := 0; k < 5; k++ {
			many = append(many, mk(fmt.Sprintf("m%d-%d", dev, k), fmt.Sprint("q", dev), webhook.EventSignal))
		}
	}
	c := postgres.NewWebhookStore(db, "relay-c")
	if err := c.WriteOutbox(ctx, many, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(ctx, time.Millisecond); err != nil { // c dies at once
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	owner := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range []*postgres.WebhookStore{a, b} {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := s.Claim(ctx, 7, 30*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, d := range got {
					if o, ok := owner[d.ID]; ok {
						t.Errorf("%s claimed twice (by %s before)", d.ID, o)
					}
					owner[d.ID] = fmt.Sprintf("%p", s)
				}
			}()
		}
	}
	wg.Wait()
	byQueue := map[string]string{}
	for id, o := range owner {
		var dev, k int
		fmt.Sscanf(id, "m%d-%d", &dev, &k)
		q := fmt.Sprint(dev)
		if prev, ok := byQueue[q]; ok && prev != o {
			t.Errorf("queue %s split between relays", q)
		}
		byQueue[q] = o
	}
}

func idsOf(ds []*webhook.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

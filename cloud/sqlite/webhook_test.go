package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/webhook"
)

func TestWebhookOutboxPrune(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	org, err := db.CreateOrg(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	s := sqlite.NewWebhookStore(db)
	now := time.Now().UTC().Truncate(time.Millisecond)
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
		d := &webhook.Delivery{ID: fmt.Sprintf("d%05d", i), OrgID: org.ID, DeviceID: "dev", Event: webhook.EventSignal,
			URL: "https://example.com/", Body: []byte(`{}`), NextAttemptAt: at, CreatedAt: at}
		ds = append(ds, d)
		if i < 2510 {
			atts = append(atts, webhook.Attempt{DeliveryID: d.ID, Number: 1, At: at, StatusCode: 200, State: webhook.StateDelivered})
		} else {
			atts = append(atts, webhook.Attempt{DeliveryID: d.ID, Number: 1, At: at, StatusCode: 503, State: webhook.StatePending, NextAttemptAt: now})
		}
	}
	if err := s.WriteOutbox(ctx, ds, atts); err != nil {
		t.Fatal(err)
	}
	n, err := s.Prune(ctx, now.Add(-7*24*time.Hour))
	if err != nil || n != 2500 {
		t.Fatalf("Prune = %d, %v; want 2500", n, err)
	}
	var left, leftAtts, pending int
	db.R.QueryRow(`SELECT COUNT(*) FROM webhook_deliveries`).Scan(&left)
	db.R.QueryRow(`SELECT COUNT(*) FROM webhook_attempts`).Scan(&leftAtts)
	db.R.QueryRow(`SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'pending'`).Scan(&pending)
	if left != 15 || leftAtts != 15 || pending != 5 {
		t.Errorf("after prune: %d deliveries, %d attempts, %d pending; want 15, 15, 5", left, leftAtts, pending)
	}
	// Pending returns the pending ones in order, with the outbox's highest seq.
	page, maxSeq, err := s.Pending(ctx, 0, 100)
	if err != nil || len(page) != 5 || page[0].ID != "d02510" || maxSeq < page[4].Seq {
		t.Errorf("Pending = %d deliveries (first %v), max %d, %v", len(page), page, maxSeq, err)
	}
	if page, maxSeq2, err := s.Pending(ctx, maxSeq, 100); err != nil || len(page) != 0 || maxSeq2 != maxSeq {
		t.Errorf("Pending after the last = %d, %d, %v", len(page), maxSeq2, err)
	}
}

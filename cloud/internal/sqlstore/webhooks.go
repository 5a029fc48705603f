package sqlstore

import (
	"context"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/webhook"
)

// WebhookDeliveries reads the organization's most recent deliveries, newest
// first, each with its attempts; limit outside 1…1000 is 50.
func WebhookDeliveries(ctx context.Context, q Querier, orgID string, limit int) ([]cloud.DeliveryInfo, error) {
	if limit <= 0 || limit > 1000 {
		limit = 50
	}
	out, err := Collect(ctx, q, func(r Row) (cloud.DeliveryInfo, error) {
		var d cloud.DeliveryInfo
		var next, created int64
		err := r.Scan(&d.ID, &d.DeviceID, &d.Event, &d.URL, &d.State, &next, &d.LastError, &d.RedeliveryOf, &created)
		d.CreatedAt = time.UnixMilli(created).UTC()
		if d.State == string(webhook.StatePending) {
			t := time.UnixMilli(next).UTC()
			d.NextAttemptAt = &t
		}
		return d, err
	}, `SELECT id, device_id, event, url, state, next_attempt_at, last_error, COALESCE(redelivery_of, ''), created_at
		FROM webhook_deliveries WHERE org_id = ? ORDER BY seq DESC LIMIT ?`, orgID, limit)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Attempts, err = Collect(ctx, q, func(r Row) (cloud.DeliveryAttempt, error) {
			var a cloud.DeliveryAttempt
			var at int64
			err := r.Scan(&a.Attempt, &at, &a.StatusCode, &a.Error, &a.DurationMs)
			a.At = time.UnixMilli(at).UTC()
			return a, err
		}, `SELECT attempt, at, COALESCE(status_code, 0), error, duration_ms FROM webhook_attempts WHERE delivery_id = ? ORDER BY attempt`, out[i].ID)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
)

// The administration of cloud.Admin and the keys of cloud.KeyService,
// written once for both stores.

// CreateOrg creates an organization with a fresh webhook signing secret
// and the default alert rules.
func (s *Store) CreateOrg(ctx context.Context, name string) (cloud.Org, error) {
	org, err := NewOrg(name, s.Clock())
	if err != nil {
		return cloud.Org{}, err
	}
	err = s.Tx(ctx, func(q Querier) error { return InsertOrg(ctx, q, org) })
	if err != nil {
		return cloud.Org{}, s.Wrap("create org", err)
	}
	return org, nil
}

// Org returns the organization with id, or ENOTFOUND.
func (s *Store) Org(ctx context.Context, id string) (cloud.Org, error) {
	o, err := ScanOrg(s.R.QueryRow(ctx, `SELECT `+OrgColumns+` FROM orgs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.Org{}, OrgNotFound(id)
	}
	return o, s.Wrap("org", err)
}

// ListOrgs returns every organization, oldest first.
func (s *Store) ListOrgs(ctx context.Context) ([]cloud.Org, error) {
	out, err := Collect(ctx, s.R, ScanOrg, `SELECT `+OrgColumns+` FROM orgs ORDER BY created_at, id`)
	return out, s.Wrap("list orgs", err)
}

// SetOrgAlertWebhook implements cloud.Admin (the package's
// SetOrgAlertWebhook).
func (s *Store) SetOrgAlertWebhook(ctx context.Context, orgID, url string) error {
	return s.Wrap("set alert webhook", SetOrgAlertWebhook(ctx, s.W, orgID, url))
}

// RotateOrgSecret implements cloud.Admin (the package's RotateOrgSecret).
func (s *Store) RotateOrgSecret(ctx context.Context, orgID string, grace time.Duration) (string, error) {
	secret, err := RotateOrgSecret(ctx, s.W, orgID, grace, s.Clock())
	return secret, s.Wrap("rotate secret", err)
}

// CreateKey makes a key for the organization and stores its bcrypt hash
// (the package's CreateKey). expiresIn 0 means the key never expires. It
// returns the stored key and the full key string, which exists nowhere
// else afterwards.
func (s *Store) CreateKey(ctx context.Context, orgID, name string, scopes []string, expiresIn time.Duration) (*cloud.APIKey, string, error) {
	k, key, err := CreateKey(ctx, s.W, s.Org, cloud.NewKey{OrgID: orgID, Name: name, Scopes: scopes, ExpiresIn: expiresIn}, s.Clock())
	return k, key, s.Wrap("insert key", err)
}

// KeyByID returns the key with id, in any organization, or ENOTFOUND. It
// is read on every authenticated request (a primary-key lookup).
func (s *Store) KeyByID(ctx context.Context, id string) (*cloud.APIKey, error) {
	k, err := ScanKey(s.R.QueryRow(ctx, `SELECT `+KeyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keyNotFound(id)
	}
	return k, s.Wrap("key", err)
}

func keyNotFound(id string) error { return cloud.Errorf(cloud.ENOTFOUND, "API key %q not found", id) }

// ListKeysSQL reads an organization's keys, oldest first (ListKeys).
const ListKeysSQL = `SELECT ` + KeyColumns + ` FROM api_keys WHERE org_id = ? ORDER BY created_at, id`

// ListKeys returns the organization's keys, oldest first, revoked ones
// included.
func (s *Store) ListKeys(ctx context.Context, orgID string) ([]*cloud.APIKey, error) {
	out, err := Collect(ctx, s.R, ScanKey, ListKeysSQL, orgID)
	return out, s.Wrap("list keys", err)
}

// RevokeKey revokes the key with id (idempotent: the first revocation
// time is kept) and returns it; ENOTFOUND for an unknown id.
func (s *Store) RevokeKey(ctx context.Context, id string) (*cloud.APIKey, error) {
	return s.revokeKey(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? RETURNING `+KeyColumns, s.nowMs(), id)
}

// RevokeOrgKey revokes the organization's key id as RevokeKey does;
// another organization's key is ENOTFOUND (cloud.PanelStore's).
func (s *Store) RevokeOrgKey(ctx context.Context, orgID, id string) (*cloud.APIKey, error) {
	return s.revokeKey(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND org_id = ? RETURNING `+KeyColumns, s.nowMs(), id, orgID)
}

func (s *Store) revokeKey(ctx context.Context, query string, args ...any) (*cloud.APIKey, error) {
	k, err := ScanKey(s.W.QueryRow(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, keyNotFound(args[1].(string))
	}
	return k, s.Wrap("revoke key", err)
}

// RecordKeyUse sets the key's last use to at, unless a later one within
// cloud.KeyUseResolution is already recorded (cloud.KeyUseRecorder).
func (s *Store) RecordKeyUse(ctx context.Context, id string, at time.Time) error {
	_, err := s.W.Exec(ctx, `UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at <= ?)`,
		at.UnixMilli(), id, at.Add(-cloud.KeyUseResolution).UnixMilli())
	return s.Wrap("record key use", err)
}

// WebhookDeliveries returns the organization's most recent deliveries,
// newest first, each with its attempts.
func (s *Store) WebhookDeliveries(ctx context.Context, orgID string, limit int) ([]cloud.DeliveryInfo, error) {
	out, err := WebhookDeliveries(ctx, s.R, orgID, limit)
	return out, s.Wrap("deliveries", err)
}

// WebhookDeliveryCounts counts the organization's deliveries by state.
func (s *Store) WebhookDeliveryCounts(ctx context.Context, orgID string) (map[string]int, error) {
	counts := map[string]int{}
	err := Each(ctx, s.R, `SELECT state, COUNT(*) FROM webhook_deliveries WHERE org_id = ? GROUP BY state`, []any{orgID}, func(r Row) error {
		var state string
		var n int
		err := r.Scan(&state, &n)
		counts[state] = n
		return err
	})
	if err != nil {
		return nil, s.Wrap("delivery counts", err)
	}
	return counts, nil
}

// RedeliverWebhook queues a new delivery with the body, URL and event of
// delivery id (in any state) and returns the new delivery's id. A relay
// takes it from the outbox at once where the store tells them
// (Dialect.Changed), else within its poll interval.
func (s *Store) RedeliverWebhook(ctx context.Context, id string) (string, error) {
	newID := ids.New()
	now := s.nowMs()
	err := s.Tx(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (id, org_id, device_id, event, url, body, state, attempts, next_attempt_at, redelivery_of, created_at, kind, channel_id)
			SELECT ?, org_id, device_id, event, url, body, 'pending', 0, ?, id, ?, kind, channel_id FROM webhook_deliveries WHERE id = ?`, newID, now, now, id)
		if err != nil {
			return err
		}
		if n == 0 {
			return DeliveryNotFound(id)
		}
		return s.changed(ctx, tx, ChangeOutbox, "")
	})
	if err != nil {
		return "", s.Wrap("redeliver", err)
	}
	return newID, nil
}

package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
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
	err = s.Tx(ctx, func(q Querier) error {
		if err := InsertOrg(ctx, q, org); err != nil {
			return err
		}
		return s.audit(ctx, q, org.ID, cloud.ActionOrgCreated, cloud.AuditTarget{Kind: cloud.TargetOrg, ID: org.ID}, map[string]any{"name": org.Name})
	})
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

// SetOrgAlertWebhook implements cloud.Admin and cloud.WebhookAdmin (the
// package's SetOrgAlertWebhook), with its audit record: the URL's scheme
// and host only, or that it was cleared.
func (s *Store) SetOrgAlertWebhook(ctx context.Context, orgID, url string) error {
	return s.Wrap("set alert webhook", s.Tx(ctx, func(tx Querier) error {
		if err := SetOrgAlertWebhook(ctx, tx, orgID, url); err != nil {
			return err
		}
		origin := urlOrigin(strings.TrimSpace(url))
		return s.audit(ctx, tx, orgID, cloud.ActionAlertWebhook, cloud.AuditTarget{Kind: cloud.TargetOrg, ID: orgID},
			map[string]any{"url": origin, "cleared": origin == ""})
	}))
}

// RotateOrgSecret implements cloud.Admin and cloud.WebhookAdmin (the
// package's RotateOrgSecret), with its audit record (the grace, never
// the secret).
func (s *Store) RotateOrgSecret(ctx context.Context, orgID string, grace time.Duration) (string, error) {
	var secret string
	err := s.Tx(ctx, func(tx Querier) error {
		var err error
		if secret, err = RotateOrgSecret(ctx, tx, orgID, grace, s.Clock()); err != nil {
			return err
		}
		return s.audit(ctx, tx, orgID, cloud.ActionSecretRotated, cloud.AuditTarget{Kind: cloud.TargetOrg, ID: orgID},
			map[string]any{"grace": grace.String()})
	})
	if err != nil {
		return "", s.Wrap("rotate secret", err)
	}
	return secret, nil
}

// CreateKey makes a key for the organization and stores its bcrypt hash
// (the package's CreateKey). expiresIn 0 means the key never expires. It
// returns the stored key and the full key string, which exists nowhere
// else afterwards.
func (s *Store) CreateKey(ctx context.Context, orgID, name string, scopes []string, expiresIn time.Duration) (*cloud.APIKey, string, error) {
	return s.createKey(ctx, cloud.NewKey{OrgID: orgID, Name: name, Scopes: scopes, ExpiresIn: expiresIn})
}

// createKey stores the key of nk (the package's CreateKey) with its audit
// record in one transaction.
func (s *Store) createKey(ctx context.Context, nk cloud.NewKey) (*cloud.APIKey, string, error) {
	var k *cloud.APIKey
	var key string
	err := s.Tx(ctx, func(tx Querier) error {
		var err error
		if k, key, err = CreateKey(ctx, tx, s.Org, nk, s.Clock()); err != nil {
			return err
		}
		return s.audit(ctx, tx, k.OrgID, cloud.ActionKeyCreated, cloud.AuditTarget{Kind: cloud.TargetKey, ID: k.ID}, keyDetails(k))
	})
	if err != nil {
		return nil, "", s.Wrap("insert key", err)
	}
	return k, key, nil
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
	return s.revokeKey(ctx, id, ``)
}

// RevokeOrgKey revokes the organization's key id as RevokeKey does;
// another organization's key is ENOTFOUND (cloud.PanelStore's).
func (s *Store) RevokeOrgKey(ctx context.Context, orgID, id string) (*cloud.APIKey, error) {
	return s.revokeKey(ctx, id, ` AND org_id = ?`, orgID)
}

// revokeKey revokes key id where also (a condition with its arguments)
// holds; the first revocation writes the audit record, in its
// transaction.
func (s *Store) revokeKey(ctx context.Context, id, also string, args ...any) (*cloud.APIKey, error) {
	var k *cloud.APIKey
	err := s.Tx(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ?`+also+` AND revoked_at IS NULL`, append([]any{s.nowMs(), id}, args...)...)
		if err != nil {
			return err
		}
		k, err = ScanKey(tx.QueryRow(ctx, `SELECT `+KeyColumns+` FROM api_keys WHERE id = ?`+also, append([]any{id}, args...)...))
		if errors.Is(err, sql.ErrNoRows) {
			return keyNotFound(id)
		}
		if err != nil || n == 0 {
			return err
		}
		return s.audit(ctx, tx, k.OrgID, cloud.ActionKeyRevoked, cloud.AuditTarget{Kind: cloud.TargetKey, ID: k.ID}, keyDetails(k))
	})
	if err != nil {
		return nil, s.Wrap("revoke key", err)
	}
	return k, nil
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
		var orgID string
		err := tx.QueryRow(ctx, `INSERT INTO webhook_deliveries (id, org_id, device_id, event, url, body, state, attempts, next_attempt_at, redelivery_of, created_at, kind, channel_id)
			SELECT ?, org_id, device_id, event, url, body, 'pending', 0, ?, id, ?, kind, channel_id FROM webhook_deliveries WHERE id = ? RETURNING org_id`, newID, now, now, id).Scan(&orgID)
		if errors.Is(err, sql.ErrNoRows) {
			return DeliveryNotFound(id)
		}
		if err != nil {
			return err
		}
		if err := s.changed(ctx, tx, ChangeOutbox, ""); err != nil {
			return err
		}
		return s.audit(ctx, tx, orgID, cloud.ActionWebhookRedeliver, cloud.AuditTarget{Kind: cloud.TargetDelivery, ID: newID},
			map[string]any{"deliveryId": newID, "originalId": id})
	})
	if err != nil {
		return "", s.Wrap("redeliver", err)
	}
	return newID, nil
}

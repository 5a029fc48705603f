package sqlstore

import (
	"context"
	"time"

	"github.com/fleet/fleet/cloud"
)

// PanelDB is what Panel needs of a store beyond its pools (both stores'
// DB has it).
type PanelDB interface {
	// Org reads the organization id, or ENOTFOUND.
	Org(ctx context.Context, id string) (cloud.Org, error)
	// RedeliverWebhook queues a copy of delivery id (cloud.Store's).
	RedeliverWebhook(ctx context.Context, id string) (string, error)
}

// Panel is what both stores' cloud.PanelStore does alike, on a store's
// pools: a user's changes (Users), the device search, the organization's
// keys and its webhook settings and deliveries. Embedded in the store's
// PanelStore, its methods are the store's.
type Panel struct {
	Users
	db          PanelDB
	read, write Querier
	wrap        func(what string, err error) error
}

// NewPanel returns the Panel of a store: its tables (for Users), its DB,
// its reading and writing pools (one pool, on PostgreSQL) and its wrapErr,
// which passes nil and domain errors through and wraps the others as the
// store's failure to do what.
func NewPanel(t UserTables, db PanelDB, read, write Querier, wrap func(what string, err error) error) Panel {
	return Panel{Users: Users{Tables: t}, db: db, read: read, write: write, wrap: wrap}
}

// SearchDevices returns one page of the organization's devices, oldest
// first, filtered by status and a case-insensitive substring, with the
// number of matches (SearchDevices on the reader).
func (p Panel) SearchDevices(ctx context.Context, orgID string, q cloud.DeviceSearch) (cloud.DevicePage, error) {
	page, err := SearchDevices(ctx, p.read, orgID, q)
	return page, p.wrap("search devices", err)
}

// CreateOrgKey makes a key for the organization on behalf of nk.CreatedBy
// ("" for the admin CLI) and stores its bcrypt hash (CreateKey). It
// returns the stored key and the full key string, which exists nowhere else
// afterwards.
func (p Panel) CreateOrgKey(ctx context.Context, nk cloud.NewKey) (*cloud.APIKey, string, error) {
	k, key, err := CreateKey(ctx, p.write, p.db.Org, nk, p.Tables.Now())
	return k, key, p.wrap("insert key", err)
}

// OrgKeys lists the organization's keys newest first, revoked ones
// included, with their creator's email and last use (OrgKeys on the
// reader).
func (p Panel) OrgKeys(ctx context.Context, orgID string) ([]cloud.KeyInfo, error) {
	keys, err := OrgKeys(ctx, p.read, orgID)
	return keys, p.wrap("org keys", err)
}

// WebhookSettings returns the organization's alert webhook URL, signing
// secret and until when the previous secret still signs (WebhookSettings on
// the reader).
func (p Panel) WebhookSettings(ctx context.Context, orgID string) (cloud.WebhookSettings, error) {
	out, err := WebhookSettings(ctx, p.read, orgID, p.Tables.Now())
	return out, p.wrap("webhook settings", err)
}

// SetOrgAlertWebhook sets or clears the organization's alert webhook URL
// (SetOrgAlertWebhook on the writer).
func (p Panel) SetOrgAlertWebhook(ctx context.Context, orgID, url string) error {
	return p.wrap("set alert webhook", SetOrgAlertWebhook(ctx, p.write, orgID, url))
}

// RotateOrgSecret gives the organization a new signing secret
// (RotateOrgSecret on the writer).
func (p Panel) RotateOrgSecret(ctx context.Context, orgID string, grace time.Duration) (string, error) {
	secret, err := RotateOrgSecret(ctx, p.write, orgID, grace, p.Tables.Now())
	return secret, p.wrap("rotate secret", err)
}

// RecentDeliveries summarizes the organization's newest deliveries
// (WebhookDeliveries on the reader).
func (p Panel) RecentDeliveries(ctx context.Context, orgID string, limit int) ([]cloud.DeliverySummary, error) {
	ds, err := WebhookDeliveries(ctx, p.read, orgID, limit)
	if err != nil {
		return nil, p.wrap("deliveries", err)
	}
	return cloud.SummarizeDeliveries(ds), nil
}

// RedeliverOrgWebhook queues a copy of the organization's delivery id
// (OrgDelivery, then the store's RedeliverWebhook).
func (p Panel) RedeliverOrgWebhook(ctx context.Context, orgID, id string) (string, error) {
	if err := OrgDelivery(ctx, p.read, orgID, id); err != nil {
		return "", p.wrap("redeliver", err)
	}
	return p.db.RedeliverWebhook(ctx, id)
}

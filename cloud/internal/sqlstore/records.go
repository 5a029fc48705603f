package sqlstore

import (
	"context"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// NewDevice is a device to register: its row and the token shown once.
type NewDevice struct {
	OrgID  string
	Detail resource.DeviceDetail
	// Token is the device token; only its SHA-256 sum is stored.
	Token    string
	TokenSum []byte
}

// PrepareDevice validates nd (an unknown model is EINVALID naming the
// catalog's models) and makes the device it registers: a fresh id and
// device token, PROVISIONING, created at now to the millisecond (as
// stored).
func PrepareDevice(nd cloud.NewDevice, now time.Time) (NewDevice, error) {
	nd, err := nd.Validate()
	if err != nil {
		return NewDevice{}, err
	}
	token, sum, err := apikey.NewDeviceToken()
	if err != nil {
		return NewDevice{}, err
	}
	return NewDevice{OrgID: nd.OrgID, Token: token, TokenSum: sum, Detail: resource.DeviceDetail{
		Device: resource.Device{ID: ids.New(), Name: nd.Name, SerialNumber: nd.SerialNumber, Status: resource.StatusProvisioning,
			Model: nd.Model, Location: nd.Location, CreatedAt: resource.T(now.UTC().Truncate(time.Millisecond)), Tags: []string{}},
		Notes: nd.Notes,
	}}, nil
}

// InsertDeviceSQL stores a NewDevice (arguments: NewDevice.Args).
const InsertDeviceSQL = `INSERT INTO devices (id, org_id, name, serial_number, model, location, notes, status, token_hash, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// Args are the arguments of InsertDeviceSQL.
func (d NewDevice) Args() []any {
	x := d.Detail
	return []any{x.ID, d.OrgID, x.Name, x.SerialNumber, x.Model, x.Location, x.Notes, string(x.Status), d.TokenSum, x.CreatedAt.UnixMilli()}
}

// ErrSerialTaken is AddDevice's ECONFLICT for a serial number already used
// in the organization.
func ErrSerialTaken(serial string) error {
	return cloud.Errorf(cloud.ECONFLICT, "a device with serial number %q already exists in the organization", serial)
}

// NewOrg validates the name of an organization to create and makes it: a
// fresh id and webhook signing secret, created at now to the millisecond.
func NewOrg(name string, now time.Time) (cloud.Org, error) {
	name, err := cloud.ValidName("name", name)
	if err != nil {
		return cloud.Org{}, err
	}
	return cloud.Org{ID: ids.New(), Name: name, WebhookSecret: webhook.NewSecret(), CreatedAt: now.UTC().Truncate(time.Millisecond)}, nil
}

// CreateKey makes an API key of nk (apikey.New, with its validation) for
// an organization that org must find (ENOTFOUND otherwise) and stores it
// with q (InsertKey): the stored key and the full key string, shown once
// (cloud.KeyService's CreateKey and cloud.PanelStore's CreateOrgKey).
func CreateKey(ctx context.Context, q Querier, org func(context.Context, string) (cloud.Org, error), nk cloud.NewKey, now time.Time) (*cloud.APIKey, string, error) {
	k, key, err := apikey.New(nk.OrgID, nk.Name, nk.Scopes, nk.ExpiresIn, now)
	if err != nil {
		return nil, "", err
	}
	if _, err := org(ctx, nk.OrgID); err != nil {
		return nil, "", err
	}
	if err := InsertKey(ctx, q, k, nk.CreatedBy); err != nil {
		return nil, "", err
	}
	return k, key, nil
}

// InsertKey stores k as given (its hash already made) with q, created by
// the user createdBy ("" for none: the admin CLI).
func InsertKey(ctx context.Context, q Querier, k *cloud.APIKey, createdBy string) error {
	var by *string
	if createdBy != "" {
		by = &createdBy
	}
	_, err := q.Exec(ctx, `INSERT INTO api_keys (`+KeyColumns+`, created_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.OrgID, k.Name, k.Hash, strings.Join(k.Scopes, ","), NullMs(k.ExpiresAt), NullMs(k.RevokedAt), k.CreatedAt.UnixMilli(), by)
	return err
}

// OrgKeys reads with q the organization's keys newest first, revoked ones
// included, with their creator's email and last use (cloud.PanelStore's).
func OrgKeys(ctx context.Context, q Querier, orgID string) ([]cloud.KeyInfo, error) {
	return Collect(ctx, q, func(r Row) (cloud.KeyInfo, error) {
		var ki cloud.KeyInfo
		var used *int64
		k, err := ScanKey(scanAlso{r, []any{&ki.CreatedByEmail, &used}})
		if err != nil {
			return ki, err
		}
		ki.APIKey, ki.LastUsedAt = *k, MsTime(used)
		return ki, nil
	}, `SELECT k.id, k.org_id, k.name, k.hash, k.scopes, k.expires_at, k.revoked_at, k.created_at, COALESCE(u.email, ''), k.last_used_at
		FROM api_keys k LEFT JOIN users u ON u.id = k.created_by WHERE k.org_id = ? ORDER BY k.created_at DESC, k.id DESC`, orgID)
}

// scanAlso scans extra columns after those its caller names.
type scanAlso struct {
	row   Row
	extra []any
}

func (s scanAlso) Scan(dest ...any) error { return s.row.Scan(append(dest, s.extra...)...) }

package sqlstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Claims (issue 28): cloud.ClaimService on ClaimTables, written once for
// both stores. A claim token (cloud.ClaimTokenPrefix and 32 random bytes in
// base32) is shown once; the store keeps its SHA-256 only.

// ClaimTables are the claim queries.
type ClaimTables interface {
	// InsertClaim stores c with the sum of its token; ENOTFOUND for an
	// unknown organization.
	InsertClaim(ctx context.Context, c cloud.Claim, tokenSum []byte) error
	// ClaimRows reads the organization's claims, oldest first.
	ClaimRows(ctx context.Context, orgID string) ([]cloud.Claim, error)
	// RevokeClaimRow revokes the organization's claim id at at (the first
	// revocation time is kept) and returns it; ENOTFOUND otherwise.
	RevokeClaimRow(ctx context.Context, orgID, id string, at time.Time) (cloud.Claim, error)
	// ClaimByToken reads the claim of a token's sum; ok false for none.
	ClaimByToken(ctx context.Context, tokenSum []byte) (c cloud.Claim, ok bool, err error)
	// RedeemClaimRow redeems a checked claim in one transaction
	// (cloud.ClaimService.RedeemClaim).
	RedeemClaimRow(ctx context.Context, r ClaimRedemption) (protocol.ClaimResponse, error)
}

// ClaimRedemption is a redeem whose fields are checked: TokenSum is the
// SHA-256 of the claim token; Name is the serial number when the agent
// gave none; Model is "" or the model the agent runs as.
type ClaimRedemption struct {
	TokenSum                            []byte
	SerialNumber, Name, Location, Model string
	At                                  time.Time
	// IP is the agent's address, the ip of the audit record.
	IP string
}

// MaxClaimUses bounds the devices one claim may create.
const MaxClaimUses = 100000

// MaxClaimExpiry bounds how long a claim may stay valid.
const MaxClaimExpiry = 365 * 24 * time.Hour

// ClaimService implements cloud.ClaimService.
type ClaimService struct{ Tables Tables }

var _ cloud.ClaimService = (*ClaimService)(nil)

// claimEncoding spells a claim token's random bytes.
var claimEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// claimSum is the SHA-256 of a claim token, as the store keeps it.
func claimSum(token string) []byte {
	s := sha256.Sum256([]byte(token))
	return s[:]
}

// CreateClaim implements cloud.ClaimService: the model must be the
// catalog's, the tags valid (stored deduplicated and sorted), uses 1 to
// MaxClaimUses (0 is 1), ExpiresIn 0 (never) or up to MaxClaimExpiry.
func (s *ClaimService) CreateClaim(ctx context.Context, nc cloud.NewClaim) (cloud.Claim, string, error) {
	if _, ok := catalog.Lookup(nc.Model); !ok {
		return cloud.Claim{}, "", cloud.Errorf(cloud.EINVALID, "model: unknown model %q (known models: %s)", nc.Model, strings.Join(catalog.Names(), ", "))
	}
	tags, err := cloud.CheckDeviceTags(nc.Tags)
	if err != nil {
		return cloud.Claim{}, "", err
	}
	if nc.Uses == 0 {
		nc.Uses = 1
	}
	if nc.Uses < 1 || nc.Uses > MaxClaimUses {
		return cloud.Claim{}, "", cloud.Errorf(cloud.EINVALID, "uses: want 1 to %d", MaxClaimUses)
	}
	if nc.ExpiresIn < 0 || nc.ExpiresIn > MaxClaimExpiry {
		return cloud.Claim{}, "", cloud.Errorf(cloud.EINVALID, "expires: want a duration up to 365 days, or none")
	}
	now := s.Tables.Now().UTC().Truncate(time.Millisecond)
	c := cloud.Claim{ID: ids.New(), OrgID: nc.OrgID, Model: nc.Model, Tags: tags, Uses: nc.Uses, CreatedAt: now}
	if nc.ExpiresIn > 0 {
		exp := now.Add(nc.ExpiresIn)
		c.ExpiresAt = &exp
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return cloud.Claim{}, "", fmt.Errorf("claim token: %w", err)
	}
	token := cloud.ClaimTokenPrefix + claimEncoding.EncodeToString(b[:])
	if err := s.Tables.InsertClaim(ctx, c, claimSum(token)); err != nil {
		return cloud.Claim{}, "", err
	}
	return c, token, nil
}

// ListClaims implements cloud.ClaimService: the organization's claims,
// oldest first.
func (s *ClaimService) ListClaims(ctx context.Context, orgID string) ([]cloud.Claim, error) {
	return s.Tables.ClaimRows(ctx, orgID)
}

// RevokeClaim implements cloud.ClaimService.
func (s *ClaimService) RevokeClaim(ctx context.Context, orgID, id string) (cloud.Claim, error) {
	return s.Tables.RevokeClaimRow(ctx, orgID, id, s.Tables.Now())
}

// RedeemClaim implements cloud.ClaimService. The token is checked before
// the request's fields: an unknown, revoked or expired claim is refused
// whatever the body says.
func (s *ClaimService) RedeemClaim(ctx context.Context, in cloud.ClaimRedeem) (protocol.ClaimResponse, error) {
	if in.At.IsZero() {
		in.At = s.Tables.Now()
	}
	if !strings.HasPrefix(in.Token, cloud.ClaimTokenPrefix) || len(in.Token) > 256 {
		return protocol.ClaimResponse{}, errUnknownClaim
	}
	sum := claimSum(in.Token)
	c, ok, err := s.Tables.ClaimByToken(ctx, sum)
	if err != nil {
		return protocol.ClaimResponse{}, err
	}
	if !ok {
		return protocol.ClaimResponse{}, errUnknownClaim
	}
	// Used up is decided in the transaction: the same serial claimed
	// again is answered even through a used-up claim.
	if err := ClaimRefusal(c, in.At, false); err != nil {
		return protocol.ClaimResponse{}, err
	}
	r := ClaimRedemption{TokenSum: sum, Model: in.Model, At: in.At, IP: in.IP}
	if r.SerialNumber, err = cloud.ValidName("serialNumber", in.SerialNumber); err != nil {
		return protocol.ClaimResponse{}, err
	}
	r.Name = r.SerialNumber
	if strings.TrimSpace(in.Name) != "" {
		if r.Name, err = cloud.ValidName("name", in.Name); err != nil {
			return protocol.ClaimResponse{}, err
		}
	}
	if strings.TrimSpace(in.Location) != "" {
		if r.Location, err = cloud.ValidName("location", in.Location); err != nil {
			return protocol.ClaimResponse{}, err
		}
	}
	if err := claimModel(c, r.Model); err != nil {
		return protocol.ClaimResponse{}, err
	}
	return s.Tables.RedeemClaimRow(ctx, r)
}

var errUnknownClaim = cloud.Errorf(cloud.EUNAUTHORIZED, "unknown claim token")

// ClaimRefusal is the EUNAUTHORIZED error of a claim that cannot be
// redeemed at at: revoked, expired, or (with usedUp) used up; nil when it
// can.
func ClaimRefusal(c cloud.Claim, at time.Time, usedUp bool) error {
	switch c.State(at) {
	case "revoked":
		return cloud.Errorf(cloud.EUNAUTHORIZED, "claim %s was revoked", c.ID)
	case "expired":
		return cloud.Errorf(cloud.EUNAUTHORIZED, "claim %s expired at %s", c.ID, c.ExpiresAt.UTC().Format(time.RFC3339))
	case "used_up":
		if usedUp {
			return cloud.Errorf(cloud.EUNAUTHORIZED, "claim %s is used up: it registered the %d devices it allows", c.ID, c.Uses)
		}
	}
	return nil
}

// claimModel refuses an agent whose model is not the claim's.
func claimModel(c cloud.Claim, model string) error {
	if model != "" && model != c.Model {
		return cloud.Errorf(cloud.EINVALID, "model: this claim registers %s gateways, not %s", c.Model, model)
	}
	return nil
}

// ClaimColumns are the columns ScanClaim reads.
const ClaimColumns = `id, org_id, model, tags, uses, used, expires_at, revoked_at, created_at`

// ScanClaim reads a row of ClaimColumns.
func ScanClaim(row Row) (cloud.Claim, error) {
	var c cloud.Claim
	var tags string
	var expires, revoked *int64
	var created int64
	if err := row.Scan(&c.ID, &c.OrgID, &c.Model, &tags, &c.Uses, &c.Used, &expires, &revoked, &created); err != nil {
		return c, err
	}
	c.Tags = DecodeTags(tags)
	c.CreatedAt = time.UnixMilli(created).UTC()
	if expires != nil {
		t := time.UnixMilli(*expires).UTC()
		c.ExpiresAt = &t
	}
	if revoked != nil {
		t := time.UnixMilli(*revoked).UTC()
		c.RevokedAt = &t
	}
	return c, nil
}

func claimNotFound(id string) error { return cloud.Errorf(cloud.ENOTFOUND, "claim %q not found", id) }

// InsertClaim implements ClaimTables.
func (s *Store) InsertClaim(ctx context.Context, c cloud.Claim, tokenSum []byte) error {
	tags, err := json.Marshal(c.Tags)
	if err != nil {
		return err
	}
	var expires any
	if c.ExpiresAt != nil {
		expires = c.ExpiresAt.UnixMilli()
	}
	err = s.Tx(ctx, func(tx Querier) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM orgs WHERE id = ?`, c.OrgID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return OrgNotFound(c.OrgID)
		} else if err != nil {
			return err
		}
		// The creator is the actor of the devices the claim registers
		// (device.claimed).
		by, _ := cloud.ActorFrom(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO claims (id, org_id, token_hash, model, tags, uses, used, expires_at, revoked_at, created_at, created_by_kind, created_by_id, created_by_name)
			VALUES (?, ?, ?, ?, ?, ?, 0, ?, NULL, ?, ?, ?, ?)`, c.ID, c.OrgID, tokenSum, c.Model, string(tags), c.Uses, expires, c.CreatedAt.UnixMilli(),
			string(by.Kind), by.ID, by.Name); err != nil {
			return err
		}
		return s.audit(ctx, tx, c.OrgID, cloud.ActionClaimCreated, cloud.AuditTarget{Kind: cloud.TargetClaim, ID: c.ID}, claimDetails(c))
	})
	return s.Wrap("create claim", err)
}

// ClaimRows implements ClaimTables.
func (s *Store) ClaimRows(ctx context.Context, orgID string) ([]cloud.Claim, error) {
	out, err := Collect(ctx, s.R, ScanClaim, `SELECT `+ClaimColumns+` FROM claims WHERE org_id = ? ORDER BY created_at, id`, orgID)
	return out, s.Wrap("list claims", err)
}

// RevokeClaimRow implements ClaimTables.
// The first revocation writes the audit record, in its transaction.
func (s *Store) RevokeClaimRow(ctx context.Context, orgID, id string, at time.Time) (cloud.Claim, error) {
	var c cloud.Claim
	err := s.Tx(ctx, func(tx Querier) error {
		n, err := tx.Exec(ctx, `UPDATE claims SET revoked_at = ? WHERE id = ? AND org_id = ? AND revoked_at IS NULL`, at.UnixMilli(), id, orgID)
		if err != nil {
			return err
		}
		c, err = ScanClaim(tx.QueryRow(ctx, `SELECT `+ClaimColumns+` FROM claims WHERE id = ? AND org_id = ?`, id, orgID))
		if errors.Is(err, sql.ErrNoRows) {
			return claimNotFound(id)
		}
		if err != nil || n == 0 {
			return err
		}
		return s.audit(ctx, tx, orgID, cloud.ActionClaimRevoked, cloud.AuditTarget{Kind: cloud.TargetClaim, ID: c.ID}, claimDetails(c))
	})
	if err != nil {
		return cloud.Claim{}, s.Wrap("revoke claim", err)
	}
	return c, nil
}

// ClaimByToken implements ClaimTables.
func (s *Store) ClaimByToken(ctx context.Context, tokenSum []byte) (cloud.Claim, bool, error) {
	c, err := ScanClaim(s.R.QueryRow(ctx, `SELECT `+ClaimColumns+` FROM claims WHERE token_hash = ?`, tokenSum))
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.Claim{}, false, nil
	}
	return c, err == nil, s.Wrap("claim", err)
}

// ClaimOrg implements cloud.Admin: the organization of claim id, or
// ENOTFOUND.
func (s *Store) ClaimOrg(ctx context.Context, id string) (string, error) {
	var org string
	err := s.R.QueryRow(ctx, `SELECT org_id FROM claims WHERE id = ?`, id).Scan(&org)
	if errors.Is(err, sql.ErrNoRows) {
		return "", claimNotFound(id)
	}
	return org, s.Wrap("claim", err)
}

// RedeemClaimRow implements ClaimTables. The claim's row is read locked
// (Dialect.LockRows; SQLite's one writer serializes the transactions), so
// two agents racing for a claim's last use create one device between
// them, and the same serial racing with itself is one device.
func (s *Store) RedeemClaimRow(ctx context.Context, r ClaimRedemption) (protocol.ClaimResponse, error) {
	at := r.At.UTC().Truncate(time.Millisecond)
	if s.EventsAt != nil {
		if err := s.EventsAt(ctx, at.UnixMilli()); err != nil {
			return protocol.ClaimResponse{}, s.Wrap("redeem claim", err)
		}
	}
	var out protocol.ClaimResponse
	err := s.Tx(ctx, func(tx Querier) error {
		out = protocol.ClaimResponse{}
		c, err := ScanClaim(tx.QueryRow(ctx, `SELECT `+ClaimColumns+` FROM claims WHERE token_hash = ?`+s.LockRows, r.TokenSum))
		if errors.Is(err, sql.ErrNoRows) {
			return errUnknownClaim
		}
		if err != nil {
			return err
		}
		if err := ClaimRefusal(c, at, false); err != nil {
			return err
		}
		if err := claimModel(c, r.Model); err != nil {
			return err
		}
		event := func(deviceID, msg string) error {
			data, err := json.Marshal(map[string]string{"claimId": c.ID, "serialNumber": r.SerialNumber})
			if err != nil {
				return err
			}
			if err := InsertEvent(ctx, tx, c.OrgID, deviceID, resource.Event{ID: ids.New(), Type: protocol.EventDeviceClaimed,
				Severity: resource.SeverityInfo, Message: msg, Data: data, CreatedAt: resource.T(at)}); err != nil {
				return err
			}
			return s.auditClaimed(ctx, tx, c, deviceID, r)
		}
		// The same serial through the same claim: the same device, a
		// fresh token (the previous one stops working), no use counted.
		var deviceID string
		var revoked *int64
		err = tx.QueryRow(ctx, `SELECT d.id, d.token_revoked_at FROM claimed_devices cd JOIN devices d ON d.id = cd.device_id
			WHERE cd.claim_id = ? AND cd.serial_number = ? AND d.org_id = ?`, c.ID, r.SerialNumber, c.OrgID).Scan(&deviceID, &revoked)
		switch {
		case err == nil:
			if revoked != nil {
				return cloud.Errorf(cloud.ECONFLICT, "the device of serial number %q (%s) had its token revoked; it cannot be claimed again", r.SerialNumber, deviceID)
			}
			token, sum, err := apikey.NewDeviceToken()
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE devices SET token_hash = ? WHERE id = ? AND org_id = ?`, sum, deviceID, c.OrgID); err != nil {
				return err
			}
			out = protocol.ClaimResponse{DeviceID: deviceID, Token: token}
			return event(deviceID, fmt.Sprintf("claimed again through claim %s: a new device token replaces the previous one", c.ID))
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if err := ClaimRefusal(c, at, true); err != nil {
			return err
		}
		var one int
		err = tx.QueryRow(ctx, `SELECT 1 FROM devices WHERE org_id = ? AND serial_number = ?`, c.OrgID, r.SerialNumber).Scan(&one)
		if err == nil {
			return ErrSerialTaken(r.SerialNumber)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		d, err := PrepareDevice(cloud.NewDevice{OrgID: c.OrgID, Name: r.Name, SerialNumber: r.SerialNumber, Model: c.Model, Location: r.Location}, at)
		if err != nil {
			return err
		}
		tags, err := json.Marshal(c.Tags)
		if err != nil {
			return err
		}
		id := d.Detail.ID
		if _, err := tx.Exec(ctx, InsertDeviceSQL, d.Args()...); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE devices SET tags = ? WHERE id = ?`, string(tags), id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO serial_state (device_id) VALUES (?)`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO claimed_devices (claim_id, serial_number, device_id, claimed_at) VALUES (?, ?, ?, ?)`,
			c.ID, r.SerialNumber, id, at.UnixMilli()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE claims SET used = used + 1 WHERE id = ?`, c.ID); err != nil {
			return err
		}
		out = protocol.ClaimResponse{DeviceID: id, Token: d.Token}
		return event(id, fmt.Sprintf("registered through claim %s (serial number %s)", c.ID, r.SerialNumber))
	})
	if s.IsUnique(err) {
		// A device of the serial committed meanwhile by another way.
		return protocol.ClaimResponse{}, ErrSerialTaken(r.SerialNumber)
	}
	if err != nil {
		return protocol.ClaimResponse{}, s.Wrap("redeem claim", err)
	}
	return out, nil
}

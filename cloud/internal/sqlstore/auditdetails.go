package sqlstore

import (
	"context"
	"database/sql"
	"net/url"
	"slices"
	"time"

	"github.com/fleet/fleet/cloud"
)

// The details of the audit records of keys, members, the organization,
// devices, claims and releases (issue 30): what a reader of the log needs
// to tell one change from another, never a secret (no key, token, hash,
// password or webhook secret, and of a URL its scheme and host only).

// keyDetails are a key's name, scopes and expiry (never the key or its
// hash).
func keyDetails(k *cloud.APIKey) map[string]any {
	d := map[string]any{"name": k.Name, "scopes": k.Scopes}
	if !k.ExpiresAt.IsZero() {
		d["expiresAt"] = k.ExpiresAt.UTC().Format(time.RFC3339)
	} else {
		d["expiresAt"] = nil
	}
	return d
}

// urlOrigin is the scheme and host of a URL: its path, query and user
// information may hold a secret.
func urlOrigin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// fromTo is a field's change as a record says it.
type fromTo struct {
	From any `json:"from"`
	To   any `json:"to"`
}

// maxDetailText bounds a text field (a device's notes) in a record's
// details, in bytes: two of them stay well inside cloud.MaxAuditDetails.
const maxDetailText = 1000

// auditMember writes in tx the record of a change to member u.
func (s *Store) auditMember(ctx context.Context, tx Querier, u cloud.User, action string, details any) error {
	return s.audit(ctx, tx, u.OrgID, action, cloud.AuditTarget{Kind: cloud.TargetMember, ID: u.ID}, details)
}

// passwordSetBy says who set member id's password: "self" (the member),
// "cli" (fleet-relay user reset-password) or the actor's kind.
func passwordSetBy(ctx context.Context, id string) string {
	a, _ := cloud.ActorFrom(ctx)
	if a.Kind == cloud.ActorUser && a.ID == id {
		return "self"
	}
	return string(a.Kind)
}

// deviceFields are the columns of a device a DevicePatch changes, as
// stored before the change.
type deviceFields struct {
	name, location string
	notes          sql.NullString
	tags           string
}

// changes are the fields p changes of f, each with its value before and
// after (notes clipped to maxDetailText); none when p changes nothing.
func (f deviceFields) changes(p cloud.DevicePatch) map[string]fromTo {
	out := map[string]fromTo{}
	if p.Name != nil && *p.Name != f.name {
		out["name"] = fromTo{f.name, *p.Name}
	}
	if p.Location != nil && *p.Location != f.location {
		out["location"] = fromTo{f.location, *p.Location}
	}
	var was any
	if f.notes.Valid {
		was = clipText(f.notes.String, maxDetailText)
	}
	switch {
	case p.ClearNotes && f.notes.Valid:
		out["notes"] = fromTo{was, nil}
	case p.Notes != nil && (!f.notes.Valid || *p.Notes != f.notes.String):
		out["notes"] = fromTo{was, clipText(*p.Notes, maxDetailText)}
	}
	if p.Tags != nil {
		if old := DecodeTags(f.tags); !slices.Equal(old, *p.Tags) {
			out["tags"] = fromTo{old, *p.Tags}
		}
	}
	return out
}

// auditDeviceUpdate writes in tx the record of a device's changed fields
// (deviceFields.changes); nothing when none changed.
func (s *Store) auditDeviceUpdate(ctx context.Context, tx Querier, orgID, id string, changed map[string]fromTo) error {
	if len(changed) == 0 {
		return nil
	}
	return s.audit(ctx, tx, orgID, cloud.ActionDeviceUpdated, cloud.AuditTarget{Kind: cloud.TargetDevice, ID: id}, changed)
}

// claimDetails are a claim's model, tags, uses and expiry (never its
// token).
func claimDetails(c cloud.Claim) map[string]any {
	d := map[string]any{"model": c.Model, "tags": c.Tags, "uses": c.Uses, "expiresAt": nil}
	if c.ExpiresAt != nil {
		d["expiresAt"] = c.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return d
}

// auditClaimed writes in tx the record of device deviceID claimed through
// c by an agent: the agent acts for the claim's creator (its row's
// created_by_*; none for a claim made without an actor), from the agent's
// address.
func (s *Store) auditClaimed(ctx context.Context, tx Querier, c cloud.Claim, deviceID string, r ClaimRedemption) error {
	var by cloud.Actor
	var kind string
	if err := tx.QueryRow(ctx, `SELECT created_by_kind, created_by_id, created_by_name FROM claims WHERE id = ?`, c.ID).
		Scan(&kind, &by.ID, &by.Name); err != nil {
		return err
	}
	if kind == "" {
		return nil
	}
	by.Kind, by.IP = cloud.ActorKind(kind), r.IP
	return s.audit(cloud.WithActor(ctx, by), tx, c.OrgID, cloud.ActionDeviceClaimed, cloud.AuditTarget{Kind: cloud.TargetDevice, ID: deviceID},
		map[string]any{"claimId": c.ID, "serialNumber": r.SerialNumber})
}

package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/fleet/fleet/cloud"
)

// Single sign-on (cloud/oidc.go): an organization's OpenID Connect
// configuration in org_oidc and its email domains in oidc_domains
// (migration 0020), and the members single sign-on creates.

var _ cloud.OIDCService = PanelStore{}

const oidcColumns = `org_id, issuer, client_id, client_secret, default_role, role_claim, role_map, enabled, updated_at`

// oidcSelect reads a configuration (o) with its organization's name.
const oidcSelect = `SELECT o.org_id, o.issuer, o.client_id, o.client_secret, o.default_role, o.role_claim, o.role_map, o.enabled, o.updated_at, g.name
	FROM org_oidc o JOIN orgs g ON g.id = o.org_id`

// OrgOIDC returns the organization's configuration, or ENOTFOUND.
func (p PanelStore) OrgOIDC(ctx context.Context, orgID string) (cloud.OIDCConfig, error) {
	c, err := p.readOIDC(ctx, p.R, oidcSelect+` WHERE o.org_id = ?`, orgID)
	return c, p.Wrap("oidc config", err)
}

// OIDCEnabled reports whether any organization's single sign-on is on.
func (p PanelStore) OIDCEnabled(ctx context.Context) (bool, error) {
	var n int
	err := p.R.QueryRow(ctx, `SELECT COUNT(*) FROM org_oidc WHERE enabled = 1`).Scan(&n)
	return n > 0, p.Wrap("oidc enabled", err)
}

// OIDCByDomain returns the enabled configuration holding domain, or
// ENOTFOUND.
func (p PanelStore) OIDCByDomain(ctx context.Context, domain string) (cloud.OIDCConfig, error) {
	c, err := p.readOIDC(ctx, p.R, oidcSelect+` JOIN oidc_domains d ON d.org_id = o.org_id WHERE d.domain = ? AND o.enabled = 1`, domain)
	return c, p.Wrap("oidc config by domain", err)
}

// readOIDC reads one configuration with its domains.
func (p PanelStore) readOIDC(ctx context.Context, q Querier, query string, args ...any) (cloud.OIDCConfig, error) {
	var c cloud.OIDCConfig
	var role, roleMap string
	var enabled int
	var updated int64
	err := q.QueryRow(ctx, query, args...).Scan(&c.OrgID, &c.Issuer, &c.ClientID, &c.ClientSecret, &role, &c.RoleClaim, &roleMap, &enabled, &updated, &c.OrgName)
	if errors.Is(err, sql.ErrNoRows) {
		return c, cloud.Errorf(cloud.ENOTFOUND, "single sign-on is not configured")
	}
	if err != nil {
		return c, err
	}
	c.DefaultRole, c.Enabled, c.UpdatedAt = cloud.Role(role), enabled == 1, time.UnixMilli(updated).UTC()
	if err := json.Unmarshal([]byte(roleMap), &c.RoleMap); err != nil {
		return c, err
	}
	c.Domains, err = Collect(ctx, q, func(r Row) (string, error) {
		var d string
		return d, r.Scan(&d)
	}, `SELECT domain FROM oidc_domains WHERE org_id = ? ORDER BY domain`, c.OrgID)
	return c, err
}

// oidcAudit is the details of an org.oidc_set record: what is configured,
// the secret only as whether it is set or was changed.
type oidcAudit struct {
	Issuer        string            `json:"issuer"`
	ClientID      string            `json:"clientId"`
	SecretSet     bool              `json:"clientSecretSet"`
	SecretChanged bool              `json:"clientSecretChanged"`
	Domains       []string          `json:"domains"`
	DefaultRole   cloud.Role        `json:"defaultRole"`
	RoleClaim     string            `json:"roleClaim,omitempty"`
	RoleMap       map[string]string `json:"roleMap,omitempty"`
	Enabled       bool              `json:"enabled"`
}

// SetOrgOIDC validates and stores c with its audit record in one
// transaction; an empty secret keeps the stored one.
func (p PanelStore) SetOrgOIDC(ctx context.Context, c cloud.OIDCConfig) (cloud.OIDCConfig, error) {
	org, err := p.Org(ctx, c.OrgID)
	if err != nil {
		return cloud.OIDCConfig{}, err
	}
	c.OrgName = org.Name
	var out cloud.OIDCConfig
	err = p.Tx(ctx, func(tx Querier) error {
		old, err := p.readOIDC(ctx, tx, oidcSelect+` WHERE o.org_id = ?`, c.OrgID)
		if err != nil && cloud.ErrorCode(err) != cloud.ENOTFOUND {
			return err
		}
		changed := c.ClientSecret != "" && c.ClientSecret != old.ClientSecret
		if c.ClientSecret == "" {
			c.ClientSecret = old.ClientSecret
		}
		if c, err = cloud.ValidateOIDC(c); err != nil {
			return err
		}
		c.UpdatedAt = p.Clock().UTC().Truncate(time.Millisecond)
		roleMap, err := json.Marshal(c.RoleMap)
		if err != nil {
			return err
		}
		enabled := 0
		if c.Enabled {
			enabled = 1
		}
		if _, err := tx.Exec(ctx, `INSERT INTO org_oidc (`+oidcColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (org_id) DO UPDATE SET issuer = excluded.issuer, client_id = excluded.client_id,
			client_secret = excluded.client_secret, default_role = excluded.default_role, role_claim = excluded.role_claim,
			role_map = excluded.role_map, enabled = excluded.enabled, updated_at = excluded.updated_at`,
			c.OrgID, c.Issuer, c.ClientID, c.ClientSecret, string(c.DefaultRole), c.RoleClaim, string(roleMap), enabled, c.UpdatedAt.UnixMilli()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM oidc_domains WHERE org_id = ?`, c.OrgID); err != nil {
			return err
		}
		for _, d := range c.Domains {
			_, err := tx.Exec(ctx, `INSERT INTO oidc_domains (domain, org_id) VALUES (?, ?)`, d, c.OrgID)
			if p.IsUnique(err) {
				return cloud.Errorf(cloud.ECONFLICT, "email domain %s already signs in to another organization", d)
			}
			if err != nil {
				return err
			}
		}
		rm := map[string]string{}
		for k, v := range c.RoleMap {
			rm[k] = string(v)
		}
		out = c
		return p.audit(ctx, tx, c.OrgID, cloud.ActionOrgOIDC, cloud.AuditTarget{Kind: cloud.TargetOrg, ID: c.OrgID}, oidcAudit{
			Issuer: c.Issuer, ClientID: c.ClientID, SecretSet: c.SecretSet(), SecretChanged: changed,
			Domains: slices.Clone(c.Domains), DefaultRole: c.DefaultRole, RoleClaim: c.RoleClaim, RoleMap: rm, Enabled: c.Enabled,
		})
	})
	if err != nil {
		return cloud.OIDCConfig{}, p.Wrap("set oidc config", err)
	}
	return out, nil
}

// CreateOIDCMember adds a member at their first single sign-on and records
// it (member.added, the new member acting from ip, via oidc) in the same
// transaction.
func (p PanelStore) CreateOIDCMember(ctx context.Context, nu cloud.NewUser, ip string) (cloud.User, error) {
	u, err := NewUser(nu, p.Clock())
	if err != nil {
		return cloud.User{}, err
	}
	if _, err := p.Org(ctx, nu.OrgID); err != nil {
		return cloud.User{}, err
	}
	err = p.Tx(ctx, func(tx Querier) error {
		err := insertUser(ctx, tx, u)
		if p.IsUnique(err) {
			return ErrEmailTaken(u.Email)
		}
		if err != nil {
			return err
		}
		actx := cloud.WithActor(ctx, cloud.Actor{Kind: cloud.ActorUser, ID: u.ID, Name: u.Email, IP: ip})
		return p.audit(actx, tx, u.OrgID, cloud.ActionMemberAdded, cloud.AuditTarget{Kind: cloud.TargetMember, ID: u.ID},
			map[string]string{"email": u.Email, "role": string(u.Role), "via": "oidc"})
	})
	if err != nil {
		return cloud.User{}, p.Wrap("create oidc member", err)
	}
	return u, nil
}

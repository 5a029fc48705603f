package cloud

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Single sign-on (issue 30, docs/identity.md): an organization may let its
// people sign in to the panel through its OpenID Connect provider. The
// organization names the provider (issuer), the client the relay is
// registered as (client id and secret), which email domains belong to it,
// and the role a member created at their first sign-in gets: the default
// role, or the role a claim of the ID token maps to.

// Bounds of an OIDC configuration.
const (
	MaxOIDCDomains   = 32
	MaxOIDCRoleMap   = 32
	MaxOIDCField     = 512 // issuer, client id, client secret, claim name or value
	maxDomainLength  = 253
	maxClaimNameSize = 64
)

// OIDCConfig is an organization's single sign-on configuration.
type OIDCConfig struct {
	OrgID    string
	OrgName  string // read only: the organization's name ("Sign in with …")
	Issuer   string // the provider's issuer URL, exactly as its ID tokens name it
	ClientID string
	// ClientSecret is stored and sent to the provider's token endpoint
	// only: the panel, the CLI, logs and audit records say whether it is
	// set (SecretSet), never what it is.
	ClientSecret string
	// Domains are the email domains (lower-case) whose people sign in
	// here; a domain belongs to at most one organization.
	Domains     []string
	DefaultRole Role
	// RoleClaim names a claim of the ID token (or userinfo) whose value
	// (a string or a list of strings) RoleMap maps to a role at a
	// member's first sign-in; "" maps nothing.
	RoleClaim string
	RoleMap   map[string]Role
	Enabled   bool
	UpdatedAt time.Time
}

// SecretSet reports whether a client secret is stored.
func (c OIDCConfig) SecretSet() bool { return c.ClientSecret != "" }

// RoleFor returns the role of a member created from claims: the most
// powerful role RoleMap gives any value of the role claim, else the
// default role.
func (c OIDCConfig) RoleFor(claims map[string]any) Role {
	if c.RoleClaim == "" || len(c.RoleMap) == 0 {
		return c.DefaultRole
	}
	var values []string
	switch v := claims[c.RoleClaim].(type) {
	case string:
		values = []string{v}
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				values = append(values, s)
			}
		}
	}
	best := -1
	for _, v := range values {
		if r, ok := c.RoleMap[v]; ok {
			if i := slices.Index(Roles, r); i >= 0 && (best < 0 || i < best) {
				best = i
			}
		}
	}
	if best < 0 {
		return c.DefaultRole
	}
	return Roles[best]
}

// AllowsEmail reports whether email's domain is one of c's.
func (c OIDCConfig) AllowsEmail(email string) bool {
	d := EmailDomain(email)
	return d != "" && slices.Contains(c.Domains, d)
}

// EmailDomain returns the lower-cased domain of email ("" when it has none).
func EmailDomain(email string) string {
	i := strings.LastIndexByte(email, '@')
	if i < 0 || i == len(email)-1 {
		return ""
	}
	return strings.ToLower(email[i+1:])
}

// ValidateOIDC checks c and returns it normalized: domains lower-cased,
// sorted and unique, the roles parsed. A config that is enabled needs an
// issuer, a client id, a secret and a domain.
func ValidateOIDC(c OIDCConfig) (OIDCConfig, error) {
	c.Issuer = strings.TrimSpace(c.Issuer)
	c.ClientID = strings.TrimSpace(c.ClientID)
	c.RoleClaim = strings.TrimSpace(c.RoleClaim)
	for _, f := range []struct{ name, v string }{{"issuer", c.Issuer}, {"client id", c.ClientID}, {"client secret", c.ClientSecret}} {
		if len(f.v) > MaxOIDCField {
			return c, Errorf(EINVALID, "%s is longer than %d bytes", f.name, MaxOIDCField)
		}
	}
	if c.Issuer != "" {
		u, err := url.Parse(c.Issuer)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return c, Errorf(EINVALID, "issuer must be an http(s) URL like https://login.example.com/realms/acme (got %q)", c.Issuer)
		}
	}
	var domains []string
	for _, d := range c.Domains {
		d = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(d), "@")))
		if d == "" {
			continue
		}
		if len(d) > maxDomainLength || !strings.Contains(d, ".") || strings.ContainsAny(d, "@/ \t:") {
			return c, Errorf(EINVALID, "email domain %q is not a domain like example.com", d)
		}
		if _, err := NormalizeEmail("x@" + d); err != nil {
			return c, Errorf(EINVALID, "email domain %q is not a domain like example.com", d)
		}
		domains = append(domains, d)
	}
	slices.Sort(domains)
	c.Domains = slices.Compact(domains)
	if len(c.Domains) > MaxOIDCDomains {
		return c, Errorf(EINVALID, "at most %d email domains", MaxOIDCDomains)
	}
	if c.DefaultRole == "" {
		c.DefaultRole = RoleViewer
	}
	r, err := ParseRole(string(c.DefaultRole))
	if err != nil {
		return c, Errorf(EINVALID, "default role: %s", ErrorMessage(err))
	}
	c.DefaultRole = r
	if len(c.RoleClaim) > maxClaimNameSize {
		return c, Errorf(EINVALID, "role claim is longer than %d bytes", maxClaimNameSize)
	}
	if len(c.RoleMap) > MaxOIDCRoleMap {
		return c, Errorf(EINVALID, "at most %d role mappings", MaxOIDCRoleMap)
	}
	if len(c.RoleMap) > 0 && c.RoleClaim == "" {
		return c, Errorf(EINVALID, "a role mapping needs a role claim")
	}
	m := make(map[string]Role, len(c.RoleMap))
	for k, v := range c.RoleMap {
		k = strings.TrimSpace(k)
		if k == "" || len(k) > MaxOIDCField {
			return c, Errorf(EINVALID, "role mapping: claim value %q is empty or too long", k)
		}
		r, err := ParseRole(string(v))
		if err != nil {
			return c, Errorf(EINVALID, "role mapping %s: %s", k, ErrorMessage(err))
		}
		m[k] = r
	}
	c.RoleMap = m
	if c.Enabled {
		switch {
		case c.Issuer == "":
			return c, Errorf(EINVALID, "single sign-on needs the provider's issuer URL")
		case c.ClientID == "":
			return c, Errorf(EINVALID, "single sign-on needs a client id")
		case c.ClientSecret == "":
			return c, Errorf(EINVALID, "single sign-on needs the client secret")
		case len(c.Domains) == 0:
			return c, Errorf(EINVALID, "single sign-on needs at least one allowed email domain")
		}
	}
	return c, nil
}

// ParseRoleMap reads "value=ROLE,value=ROLE" (the CLI's --role-map and
// the panel's field; also one pair per line).
func ParseRoleMap(s string) (map[string]Role, error) {
	m := map[string]Role{}
	for _, pair := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, Errorf(EINVALID, "role mapping %q is not value=ROLE", pair)
		}
		r, err := ParseRole(v)
		if err != nil {
			return nil, Errorf(EINVALID, "role mapping %q: %s", pair, ErrorMessage(err))
		}
		m[strings.TrimSpace(k)] = r
	}
	return m, nil
}

// FormatRoleMap writes m as ParseRoleMap reads it, sorted by value.
func FormatRoleMap(m map[string]Role) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+string(m[k]))
	}
	return strings.Join(parts, ",")
}

// OIDCService stores the organizations' single sign-on configurations and
// the members single sign-on creates. Every method is scoped to the
// organization named.
type OIDCService interface {
	// OrgOIDC returns the organization's configuration, or ENOTFOUND when
	// it has none.
	OrgOIDC(ctx context.Context, orgID string) (OIDCConfig, error)
	// SetOrgOIDC validates and stores c (ValidateOIDC); an empty
	// ClientSecret keeps the stored one. A domain another organization
	// holds is ECONFLICT. The change's audit record (org.oidc_set) says
	// which fields were set, never the secret.
	SetOrgOIDC(ctx context.Context, c OIDCConfig) (OIDCConfig, error)
	// OIDCEnabled reports whether any organization's single sign-on is on
	// (the sign-in page offers it only then).
	OIDCEnabled(ctx context.Context) (bool, error)
	// OIDCByDomain returns the enabled configuration whose domains hold
	// domain, or ENOTFOUND.
	OIDCByDomain(ctx context.Context, domain string) (OIDCConfig, error)
	// CreateOIDCMember adds a member at their first single sign-on, with
	// its audit record (member.added, the new member as actor, via oidc)
	// in the same transaction. An email in use anywhere is ECONFLICT.
	CreateOIDCMember(ctx context.Context, nu NewUser, ip string) (User, error)
}

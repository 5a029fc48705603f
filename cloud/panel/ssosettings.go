package panel

import (
	"net/http"
	"strings"

	"github.com/fleet/fleet/cloud"
)

// ssoRoutes are single sign-on's sign-in routes (public) and Settings →
// Single sign-on (OWNER: whoever may add members, since single sign-on
// adds them).
func (s *Server) ssoRoutes() []route {
	return []route{
		{"POST", "/panel/sso", "", s.ssoStart},
		{"GET", ssoCallbackPath, "", s.ssoCallback},
		{"GET", "/panel/settings/sso", cloud.PermMembers, s.ssoSettingsPage},
		{"POST", "/panel/settings/sso", cloud.PermMembers, s.saveSSOSettings},
	}
}

type ssoSettingsData struct {
	Issuer, ClientID, Domains, RoleClaim, RoleMap string
	DefaultRole                                   cloud.Role
	Enabled, SecretSet                            bool
	Roles                                         []cloud.Role
	RedirectURI, LoginLink                        string
	Errors                                        map[string]string
}

func (s *Server) ssoSettingsData(r *http.Request, rq *request) (*ssoSettingsData, error) {
	d := &ssoSettingsData{DefaultRole: cloud.RoleViewer, Roles: cloud.Roles, RedirectURI: s.redirectURI(r), Errors: map[string]string{},
		LoginLink: strings.TrimSuffix(s.redirectURI(r), ssoCallbackPath) + "/panel/login?org=" + rq.User.OrgID}
	c, err := s.cfg.OIDC.OrgOIDC(r.Context(), rq.User.OrgID)
	switch {
	case cloud.ErrorCode(err) == cloud.ENOTFOUND:
		return d, nil
	case err != nil:
		return nil, err
	}
	d.Issuer, d.ClientID, d.Domains, d.RoleClaim, d.RoleMap = c.Issuer, c.ClientID, strings.Join(c.Domains, ", "), c.RoleClaim, cloud.FormatRoleMap(c.RoleMap)
	d.DefaultRole, d.Enabled, d.SecretSet = c.DefaultRole, c.Enabled, c.SecretSet()
	return d, nil
}

// ssoSettingsPage is Settings → Single sign-on: the organization's OpenID
// Connect provider. The client secret is write-only.
func (s *Server) ssoSettingsPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.ssoSettingsData(r, rq)
	s.show(w, r, rq, "sso", "Single sign-on", d, err)
}

// saveSSOSettings stores the form; an empty secret field keeps the stored
// secret.
func (s *Server) saveSSOSettings(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.ssoSettingsData(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	f := r.PostFormValue
	d.Issuer, d.ClientID, d.Domains, d.RoleClaim, d.RoleMap = f("issuer"), f("client_id"), f("domains"), f("role_claim"), f("role_map")
	d.Enabled = f("enabled") == "on"
	c := cloud.OIDCConfig{OrgID: rq.User.OrgID, Issuer: d.Issuer, ClientID: d.ClientID, ClientSecret: f("client_secret"),
		Domains: strings.Split(d.Domains, ","), RoleClaim: d.RoleClaim, Enabled: d.Enabled}
	if role, err := cloud.ParseRole(f("default_role")); err != nil {
		d.Errors["default_role"] = cloud.ErrorMessage(err)
	} else {
		c.DefaultRole, d.DefaultRole = role, role
	}
	if c.RoleMap, err = cloud.ParseRoleMap(d.RoleMap); err != nil {
		d.Errors["role_map"] = cloud.ErrorMessage(err)
	}
	if len(d.Errors) == 0 {
		saved, err := s.cfg.OIDC.SetOrgOIDC(r.Context(), c)
		switch cloud.ErrorCode(err) {
		case cloud.EINVALID, cloud.ECONFLICT:
			d.Errors["form"] = cloud.ErrorMessage(err)
		case cloud.EINTERNAL:
			if err != nil {
				s.fail(w, r, rq, err)
				return
			}
			s.log.Info("panel: single sign-on set", "enabled", c.Enabled, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
			if c.Enabled {
				s.flash(r, "Single sign-on saved: people of "+strings.Join(saved.Domains, ", ")+" can sign in through "+saved.Issuer+".")
			} else {
				s.flash(r, "Single sign-on saved; it is off.")
			}
			http.Redirect(w, r, "/panel/settings/sso", http.StatusSeeOther)
			return
		default:
			s.fail(w, r, rq, err)
			return
		}
	}
	s.render(w, r, rq, http.StatusBadRequest, "sso", "Single sign-on", d)
}

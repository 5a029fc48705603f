package panel

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
)

// The choices of the "Expires" select, as DESIGN.md lists them.
var expiries = []struct {
	Value, Label string
	D            time.Duration
}{
	{"7", "7 days", 7 * 24 * time.Hour},
	{"30", "30 days", 30 * 24 * time.Hour},
	{"90", "90 days", 90 * 24 * time.Hour},
	{"365", "365 days", 365 * 24 * time.Hour},
	{"never", "Never", 0},
}

const defaultExpiry = "90"

type option struct {
	Value, Label string
	Selected     bool
}

type keyRow struct {
	cloud.KeyInfo
	Status string // active, revoked, expired
}

type keysData struct {
	Keys     []keyRow
	Name     string
	Scopes   []option
	Expiries []option
	Errors   map[string]string
	// Created is the key just made, shown this once.
	Created     *cloud.APIKey
	CreatedKey  string
	CreatedWhen string
}

func (s *Server) keysData(r *http.Request, rq *request) (*keysData, error) {
	keys, err := s.cfg.Keys.OrgKeys(r.Context(), rq.User.OrgID)
	if err != nil {
		return nil, err
	}
	d := &keysData{Errors: map[string]string{}}
	now := s.now()
	for _, k := range keys {
		row := keyRow{KeyInfo: k, Status: "active"}
		switch {
		case !k.RevokedAt.IsZero():
			row.Status = "revoked"
		case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
			row.Status = "expired"
		}
		d.Keys = append(d.Keys, row)
	}
	d.setForm("", nil, defaultExpiry)
	return d, nil
}

func (d *keysData) setForm(name string, scopes []string, expiry string) {
	d.Name = name
	d.Scopes = d.Scopes[:0]
	for _, sc := range cloud.AllScopes {
		d.Scopes = append(d.Scopes, option{Value: sc, Label: sc, Selected: contains(scopes, sc)})
	}
	d.Expiries = d.Expiries[:0]
	for _, e := range expiries {
		d.Expiries = append(d.Expiries, option{Value: e.Value, Label: e.Label, Selected: e.Value == expiry})
	}
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// keysPage is Settings → API keys: the create form and the key list.
func (s *Server) keysPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.keysData(r, rq)
	s.show(w, r, rq, "keys", "API keys", d, err)
}

// createKey makes a key and shows it this once, in the response to the
// POST (never stored, never redirected through the session).
func (s *Server) createKey(w http.ResponseWriter, r *http.Request, rq *request) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	scopes := r.PostForm["scope"]
	expiry := r.PostFormValue("expires")
	d, err := s.keysData(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d.setForm(name, scopes, expiry)
	var ttl time.Duration
	found := false
	for _, e := range expiries {
		if e.Value == expiry {
			ttl, found = e.D, true
		}
	}
	if name == "" {
		d.Errors["name"] = "Give the key a name that says where it is used."
	}
	if len(scopes) == 0 {
		d.Errors["scopes"] = "Choose at least one scope."
	}
	if !found {
		d.Errors["expires"] = "Choose when the key expires."
	}
	if len(d.Errors) == 0 {
		k, key, err := s.cfg.Keys.CreateOrgKey(r.Context(), cloud.NewKey{OrgID: rq.User.OrgID, Name: name, Scopes: scopes, ExpiresIn: ttl, CreatedBy: rq.User.ID})
		switch {
		case err == nil:
			s.log.Info("panel: API key created", "key_id", k.ID, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
			if d, err = s.keysData(r, rq); err != nil {
				s.fail(w, r, rq, err)
				return
			}
			d.Created, d.CreatedKey = k, key
			s.render(w, r, rq, http.StatusOK, "keys", "API keys", d)
			return
		case cloud.ErrorCode(err) == cloud.EINVALID:
			d.Errors[""] = cloud.ErrorMessage(err)
		default:
			s.fail(w, r, rq, err)
			return
		}
	}
	s.render(w, r, rq, http.StatusBadRequest, "keys", "API keys", d)
}

type confirmData struct {
	Heading, Message string
	Action, Button   string
	Cancel           string
	// Fields are hidden fields the confirmed form sends again.
	Fields map[string]string
}

// askFirst renders the confirmation c unless the form confirms
// (confirm=yes); true when it asked.
func (s *Server) askFirst(w http.ResponseWriter, r *http.Request, rq *request, title string, c confirmData) bool {
	if r.PostFormValue("confirm") == "yes" {
		return false
	}
	s.render(w, r, rq, http.StatusOK, "confirm", title, c)
	return true
}

// revokeKey asks for confirmation, then (confirm=yes) revokes the key: it is
// refused from its next request.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	id := r.PathValue("id")
	keys, err := s.cfg.Keys.OrgKeys(ctx, rq.User.OrgID)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	var k *cloud.KeyInfo
	for i := range keys {
		if keys[i].ID == id {
			k = &keys[i]
		}
	}
	if k == nil {
		s.fail(w, r, rq, cloud.Errorf(cloud.ENOTFOUND, "API key %q not found", id))
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		s.render(w, r, rq, http.StatusOK, "confirm", "Revoke API key", confirmData{
			Heading: "Revoke the API key “" + k.Name + "”?",
			Message: "Key " + k.ID + " is refused from its very next request. This cannot be undone.",
			Action:  "/panel/settings/api-keys/" + url.PathEscape(id) + "/revoke", Button: "Revoke key",
			Cancel: "/panel/settings/api-keys",
		})
		return
	}
	if _, err := s.cfg.Keys.RevokeOrgKey(ctx, rq.User.OrgID, id); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: API key revoked", "key_id", id, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	s.flash(r, "API key “"+k.Name+"” revoked.")
	http.Redirect(w, r, "/panel/settings/api-keys", http.StatusSeeOther)
}

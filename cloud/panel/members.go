package panel

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
)

// generatedPasswordLength is the length of a new member's temporary first
// password (base62, about 119 bits).
const generatedPasswordLength = 20

type membersData struct {
	Users  []cloud.User
	Roles  []cloud.Role
	Email  string
	Role   cloud.Role
	Errors map[string]string
	// Added is the member just added and their temporary first password,
	// shown once; they choose their own at their first sign-in.
	Added    *cloud.User
	Password string
	// SoleOwner is the id of the organization's only active OWNER, if it
	// has one: the page offers neither "Change role" nor "Disable" on that
	// row (the store refuses both; it says so instead).
	SoleOwner string
}

func (s *Server) membersData(r *http.Request, rq *request) (*membersData, error) {
	users, err := s.cfg.Users.ListUsers(r.Context(), rq.User.OrgID)
	if err != nil {
		return nil, err
	}
	return &membersData{Users: users, Roles: cloud.Roles, Role: cloud.RoleViewer, Errors: map[string]string{}, SoleOwner: soleOwner(users)}, nil
}

// soleOwner is the id of the only active OWNER among users, or "" when
// there are more (or none).
func soleOwner(users []cloud.User) string {
	id := ""
	for _, u := range users {
		if u.Role == cloud.RoleOwner && !u.Disabled() {
			if id != "" {
				return ""
			}
			id = u.ID
		}
	}
	return id
}

// membersPage is Settings → Members (OWNER): the organization's users with
// their roles, and a form to add one.
func (s *Server) membersPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.membersData(r, rq)
	s.show(w, r, rq, "members", "Members", d, err)
}

// addMember adds a user with a generated temporary password, shown this
// once: they must choose their own at their first sign-in, so the OWNER
// never knows it for long. An email in use in another organization is no
// conflict (and nothing here tells of it); only this organization's is.
func (s *Server) addMember(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	d, err := s.membersData(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d.Email = strings.TrimSpace(r.PostFormValue("email"))
	role, err := cloud.ParseRole(r.PostFormValue("role"))
	if err != nil {
		d.Errors["role"] = cloud.ErrorMessage(err)
	} else {
		d.Role = role
	}
	if _, err := cloud.NormalizeEmail(d.Email); err != nil {
		d.Errors["email"] = cloud.ErrorMessage(err)
	}
	if len(d.Errors) == 0 {
		pw, err := apikey.RandomBase62(generatedPasswordLength)
		if err != nil {
			s.fail(w, r, rq, err)
			return
		}
		hash, err := s.hasher.Hash(ctx, pw)
		if err != nil {
			s.fail(w, r, rq, err)
			return
		}
		u, err := s.cfg.Users.CreateUser(ctx, cloud.NewUser{OrgID: rq.User.OrgID, Email: d.Email, Role: role, PasswordHash: hash, MustChangePassword: true})
		switch cloud.ErrorCode(err) {
		case cloud.EINVALID, cloud.ECONFLICT:
			d.Errors["email"] = cloud.ErrorMessage(err)
		case cloud.EINTERNAL:
			if err != nil {
				s.fail(w, r, rq, err)
				return
			}
			s.log.Info("panel: member added", "user_id", u.ID, "by", rq.User.ID, "org_id", rq.User.OrgID)
			if d, err = s.membersData(r, rq); err != nil {
				s.fail(w, r, rq, err)
				return
			}
			d.Added, d.Password = &u, pw
			s.render(w, r, rq, http.StatusOK, "members", "Members", d)
			return
		}
	}
	s.render(w, r, rq, http.StatusBadRequest, "members", "Members", d)
}

// setMemberRole changes a member's role; it applies from their next
// request. The last OWNER cannot be demoted.
func (s *Server) setMemberRole(w http.ResponseWriter, r *http.Request, rq *request) {
	role, err := cloud.ParseRole(r.PostFormValue("role"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	u, err := s.cfg.Users.SetUserRole(r.Context(), rq.User.OrgID, r.PathValue("id"), role)
	if s.memberResult(w, r, rq, err) {
		s.log.Info("panel: role changed", "user_id", u.ID, "role", string(role), "by", rq.User.ID, "org_id", rq.User.OrgID)
		s.flash(r, u.Email+" is now "+string(u.Role)+".")
		http.Redirect(w, r, "/panel/settings/members", http.StatusSeeOther)
	}
}

// disableMember asks for confirmation, then (confirm=yes) disables the
// member: signed out on their next request, no more sign-in.
func (s *Server) disableMember(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	id := r.PathValue("id")
	if r.PostFormValue("confirm") != "yes" {
		users, err := s.cfg.Users.ListUsers(ctx, rq.User.OrgID)
		if err != nil {
			s.fail(w, r, rq, err)
			return
		}
		for _, u := range users {
			if u.ID == id {
				s.render(w, r, rq, http.StatusOK, "confirm", "Disable member", confirmData{
					Heading: "Disable " + u.Email + "?",
					Message: "They are signed out on their next request and can no longer sign in.",
					Action:  "/panel/settings/members/" + url.PathEscape(id) + "/disable", Button: "Disable member",
					Cancel: "/panel/settings/members",
				})
				return
			}
		}
		s.fail(w, r, rq, cloud.Errorf(cloud.ENOTFOUND, "user %q not found", id))
		return
	}
	u, err := s.cfg.Users.DisableUser(ctx, rq.User.OrgID, id)
	if s.memberResult(w, r, rq, err) {
		s.log.Info("panel: member disabled", "user_id", u.ID, "by", rq.User.ID, "org_id", rq.User.OrgID)
		s.flash(r, u.Email+" is disabled.")
		http.Redirect(w, r, "/panel/settings/members", http.StatusSeeOther)
	}
}

// memberResult answers a refused member change (the last OWNER) with a
// notice on the members page; false when it answered.
func (s *Server) memberResult(w http.ResponseWriter, r *http.Request, rq *request, err error) bool {
	switch {
	case err == nil:
		return true
	case cloud.ErrorCode(err) == cloud.ECONFLICT:
		s.flash(r, cloud.ErrorMessage(err))
		http.Redirect(w, r, "/panel/settings/members", http.StatusSeeOther)
	default:
		s.fail(w, r, rq, err)
	}
	return false
}

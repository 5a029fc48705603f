package panel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
	"github.com/fleet/fleet/cloud/password"
)

// Accounts (issue 30): one email may hold an account in several
// organizations, so password sign-in checks the password against each of
// them (always cloud.MaxAccountsPerEmail hashes, whatever their number, so
// that an unknown email costs the same) and, when it opens more than one,
// asks which organization; every signed-in user has an Account page to
// change their password, and a user whose password someone else set
// (MustChangePassword) is led there before any other page.

// Routes of this file.
const (
	accountRoute        = "/panel/account"
	passwordRoute       = "/panel/account/password"
	chooseRoute         = "/panel/login/organization"
	sessChoice          = "choice" // the accounts a password opened, until one is chosen
	choiceTTL           = 5 * time.Minute
	changePasswordTitle = "Change password"
)

// passwordAccounts returns the accounts with email whose password is pw,
// checking it against exactly cloud.MaxAccountsPerEmail hashes (the
// missing ones with CheckNothing). None is no error.
func (s *Server) passwordAccounts(ctx context.Context, email, pw string) (matched, accounts []cloud.OrgUser, err error) {
	accounts, err = s.cfg.Users.UsersByEmail(ctx, email, cloud.MaxAccountsPerEmail)
	if err != nil {
		return nil, nil, err
	}
	for i := range cloud.MaxAccountsPerEmail {
		if i >= len(accounts) {
			err = s.hasher.CheckNothing(ctx, pw)
		} else if err = s.hasher.Check(ctx, pw, accounts[i].PasswordHash); err == nil {
			matched = append(matched, accounts[i])
		}
		if err != nil && !errors.Is(err, password.ErrMismatch) {
			return nil, nil, err
		}
	}
	return matched, accounts, nil
}

// oneAccount picks, among the accounts whose password matched (at least
// one), the one signing in: the only active one, or none yet when several
// organizations' accounts match (it sends the browser to choose) or all
// are disabled (it says so). ok is false when it answered.
func (s *Server) oneAccount(w http.ResponseWriter, r *http.Request, matched []cloud.OrgUser, d loginData) (cloud.User, bool) {
	active := slices.DeleteFunc(slices.Clone(matched), func(u cloud.OrgUser) bool { return u.Disabled() })
	switch len(active) {
	case 0:
		d.Error = "This account is disabled. Ask an OWNER of your organization."
		s.render(w, r, nil, http.StatusForbidden, "login", "Sign in", d)
		return cloud.User{}, false
	case 1:
		return active[0].User, true
	}
	c := choice{Next: d.Next, Until: time.Now().Add(choiceTTL).UnixMilli()}
	for _, u := range active {
		c.Accounts = append(c.Accounts, choiceAccount{ID: u.ID, Org: u.OrgName})
	}
	b, err := json.Marshal(c)
	if err != nil {
		s.fail(w, r, nil, err)
		return cloud.User{}, false
	}
	s.sessions.Put(r.Context(), sessChoice, string(b))
	http.Redirect(w, r, chooseRoute, http.StatusSeeOther)
	return cloud.User{}, false
}

// choice is the accounts a password opened, kept in the (server-side)
// session until one is chosen or Until (Unix ms) passes.
type choice struct {
	Accounts []choiceAccount `json:"accounts"`
	Next     string          `json:"next"`
	Until    int64           `json:"until"`
}

type choiceAccount struct {
	ID  string `json:"id"`
	Org string `json:"org"`
}

// pendingChoice returns the session's choice, if one is open.
func (s *Server) pendingChoice(r *http.Request) (choice, bool) {
	var c choice
	raw := s.sessions.GetString(r.Context(), sessChoice)
	if raw == "" || json.Unmarshal([]byte(raw), &c) != nil || time.Now().UnixMilli() > c.Until || len(c.Accounts) == 0 {
		return choice{}, false
	}
	return c, true
}

// choosePage asks in which organization to sign in (after the password
// opened several accounts); without an open choice it sends to sign-in.
func (s *Server) choosePage(w http.ResponseWriter, r *http.Request, _ *request) {
	c, ok := s.pendingChoice(r)
	if !ok {
		http.Redirect(w, r, "/panel/login", http.StatusSeeOther)
		return
	}
	s.render(w, r, nil, http.StatusOK, "choose", "Choose organization", c)
}

// choose signs in to the chosen organization's account, if the password
// opened it (the session says) and it is still active.
func (s *Server) choose(w http.ResponseWriter, r *http.Request, _ *request) {
	ctx := r.Context()
	c, ok := s.pendingChoice(r)
	if !ok {
		http.Redirect(w, r, "/panel/login?notice=ended", http.StatusSeeOther)
		return
	}
	id := r.PostFormValue("account")
	if !slices.ContainsFunc(c.Accounts, func(a choiceAccount) bool { return a.ID == id }) {
		s.render(w, r, nil, http.StatusBadRequest, "choose", "Choose organization", c)
		return
	}
	u, err := s.cfg.Users.UserByID(ctx, id)
	if err != nil {
		s.fail(w, r, nil, err)
		return
	}
	s.sessions.Remove(ctx, sessChoice)
	if u.Disabled() {
		s.render(w, r, nil, http.StatusForbidden, "login", "Sign in", loginData{Next: c.Next, Error: "This account is disabled. Ask an OWNER of your organization."})
		return
	}
	s.passwordOK(w, r, u, c.Next)
}

// mustChangeFirst sends a user whose password is temporary, signed in
// with it, to change it (true when it answered): every route but the
// change itself and sign-out. A session of single sign-on used no password
// and is not held up.
func (s *Server) mustChangeFirst(w http.ResponseWriter, r *http.Request, rt route, u cloud.User) bool {
	if !u.MustChangePassword || rt.Pattern == passwordRoute || rt.Pattern == "/panel/logout" ||
		s.sessions.GetString(r.Context(), sessVia) == "oidc" {
		return false
	}
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("HX-Redirect", passwordRoute)
		w.WriteHeader(http.StatusUnauthorized)
		return true
	}
	to := passwordRoute
	if r.Method == http.MethodGet && rt.Pattern != accountRoute {
		to += "?" + url.Values{"next": {r.URL.RequestURI()}}.Encode()
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
	return true
}

// accountData is the Account page: the user's own settings, each a
// section (other sections go where page_account.html says).
type accountData struct {
	// Forced: the password was set by someone else and must be changed
	// before anything else.
	Forced bool
	// Next is where a forced change goes afterwards.
	Next      string
	MinLength int
	Errors    map[string]string
}

func newAccountData(u cloud.User, next string) *accountData {
	return &accountData{Forced: u.MustChangePassword, Next: safeNext(next), MinLength: password.MinLength, Errors: map[string]string{}}
}

// accountPage is Account: the signed-in user's own settings.
func (s *Server) accountPage(w http.ResponseWriter, r *http.Request, rq *request) {
	s.render(w, r, rq, http.StatusOK, "account", "Account", newAccountData(rq.User, ""))
}

// passwordPage is the change of a temporary password that every page
// leads to until it is done (and, for anyone, the Account page's form on
// its own).
func (s *Server) passwordPage(w http.ResponseWriter, r *http.Request, rq *request) {
	s.render(w, r, rq, http.StatusOK, "account", changePasswordTitle, newAccountData(rq.User, r.URL.Query().Get("next")))
}

// changePassword sets the user's own password: the current one checked
// (a wrong one counts as a failed sign-in of the account and the address,
// and over the throttle's budget the attempt is refused before the hash),
// the new one twice and valid. The user's other sessions end; this one
// stays signed in with a fresh token.
func (s *Server) changePassword(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	u := rq.User
	d := newAccountData(u, r.PostFormValue("next"))
	answer := func(status int) { s.render(w, r, rq, status, "account", changePasswordTitle, d) }
	addr := clientaddr.Key(r)
	done, wait := s.throttle.reserve(u.Email, addr)
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
		d.Errors["current"] = fmt.Sprintf("Too many wrong passwords. Try again in %s.", roundWait(wait))
		answer(http.StatusTooManyRequests)
		return
	}
	current, next, repeat := r.PostFormValue("current"), r.PostFormValue("new"), r.PostFormValue("repeat")
	err := s.hasher.Check(ctx, current, u.PasswordHash)
	done(errors.Is(err, password.ErrMismatch))
	switch {
	case errors.Is(err, password.ErrMismatch):
		s.log.Info("panel password change: wrong current password", "user_id", u.ID, "remote", addr)
		d.Errors["current"] = "The current password is wrong."
		answer(http.StatusUnauthorized)
		return
	case err != nil:
		s.fail(w, r, rq, err)
		return
	}
	switch bad := password.Validate(next); {
	case bad != nil:
		d.Errors["new"] = "The new " + bad.Error() + "."
	case next == current:
		d.Errors["new"] = "Choose a password other than the current one."
	case repeat != next:
		d.Errors["repeat"] = "The two new passwords differ."
	}
	if len(d.Errors) > 0 {
		answer(http.StatusBadRequest)
		return
	}
	hash, err := s.hasher.Hash(ctx, next)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	changed, err := s.cfg.Users.ChangeOwnPassword(ctx, u.OrgID, u.ID, hash)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	// This session stays: a fresh token, signed in after the change
	// (which ends every session signed in before it).
	if err := s.sessions.RenewToken(ctx); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	since := max(time.Now().UnixMilli(), changed.PasswordChangedAt.UnixMilli()+1)
	s.sessions.Put(ctx, sessSignedIn, strconv.FormatInt(since, 10))
	s.log.Info("panel password changed", "user_id", u.ID, "org_id", u.OrgID, "remote", addr)
	s.flash(r, "Your password is changed. Your other sessions are signed out.")
	to := accountRoute
	if u.MustChangePassword {
		to = d.Next
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

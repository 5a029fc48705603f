package panel

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/alexedwards/scs/v2"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
)

// SessionCookie is the name of the panel's session cookie.
const SessionCookie = "fleet_session"

// Session keys.
const (
	sessUser     = "user"     // the user's id
	sessSignedIn = "signedIn" // sign-in time, Unix ms
	sessFlash    = "flash"    // a one-time notice for the next page
	sessVia      = "via"      // how the user signed in: "password", "oidc"
)

func newSessionManager(cfg Config, log *slog.Logger) *scs.SessionManager {
	sm := scs.New()
	sm.Store = newSessionStore(cfg.Sessions, cfg.IdleTimeout)
	sm.Codec = jsonCodec{}
	sm.HashTokenInStore = true // the store never sees a usable token
	sm.IdleTimeout = cfg.IdleTimeout
	sm.Lifetime = cfg.Lifetime
	sm.Cookie = scs.SessionCookie{
		Name: SessionCookie, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: cfg.Secure,
		Persist: false, // gone when the browser closes
	}
	sm.ErrorFunc = func(w http.ResponseWriter, r *http.Request, err error) {
		log.Error("panel session store failed", "path", r.URL.Path, "err", err)
		http.Error(w, "The relay could not read or save the session; try again.", http.StatusInternalServerError)
	}
	return sm
}

// sessionStore adapts a cloud.SessionStore to scs. With an idle timeout
// scs commits the session on every request only to move its expiry; the
// adapter skips that write when the data is what this request read and the
// expiry moves by less than step (a tenth of the idle timeout, at most a
// minute), so a panel page costs no store write. It remembers, per token,
// what the store held when the request began (bounded; any relay may have
// written since, which only makes it write more).
type sessionStore struct {
	s    cloud.SessionStore
	step time.Duration

	mu   sync.Mutex
	read map[string]storedSession
}

type storedSession struct {
	data   string
	expiry time.Time
}

// maxRemembered bounds the sessions sessionStore remembers.
const maxRemembered = 10000

func newSessionStore(s cloud.SessionStore, idle time.Duration) *sessionStore {
	return &sessionStore{s: s, step: min(idle/10, time.Minute), read: make(map[string]storedSession)}
}

var _ scs.CtxStore = (*sessionStore)(nil)

func (st *sessionStore) remember(token string, v *storedSession) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if v == nil {
		delete(st.read, token)
		return
	}
	if _, ok := st.read[token]; !ok && len(st.read) >= maxRemembered {
		for victim := range st.read {
			delete(st.read, victim)
			break
		}
	}
	st.read[token] = *v
}

func (st *sessionStore) FindCtx(ctx context.Context, token string) ([]byte, bool, error) {
	b, ok, err := st.s.FindSession(ctx, token)
	if err != nil || !ok {
		st.remember(token, nil)
		return b, ok, err
	}
	// The stored expiry is not returned by the store: the session's own
	// deadline bounds it, and scs's next commit tells the real one.
	st.mu.Lock()
	prev, seen := st.read[token]
	st.mu.Unlock()
	if !seen || prev.data != string(b) {
		st.remember(token, &storedSession{data: string(b)}) // expiry unknown: the next commit writes
	}
	return b, true, nil
}

func (st *sessionStore) CommitCtx(ctx context.Context, token string, b []byte, expiry time.Time) error {
	st.mu.Lock()
	prev, seen := st.read[token]
	st.mu.Unlock()
	if seen && !prev.expiry.IsZero() && prev.data == string(b) && !expiry.Before(prev.expiry) && expiry.Sub(prev.expiry) < st.step {
		return nil
	}
	if err := st.s.CommitSession(ctx, token, b, expiry); err != nil {
		st.remember(token, nil)
		return err
	}
	st.remember(token, &storedSession{data: string(b), expiry: expiry})
	return nil
}

func (st *sessionStore) DeleteCtx(ctx context.Context, token string) error {
	st.remember(token, nil)
	return st.s.DeleteSession(ctx, token)
}

func (st *sessionStore) Find(token string) ([]byte, bool, error) {
	return st.FindCtx(context.Background(), token)
}

func (st *sessionStore) Commit(token string, b []byte, expiry time.Time) error {
	return st.CommitCtx(context.Background(), token, b, expiry)
}

func (st *sessionStore) Delete(token string) error { return st.DeleteCtx(context.Background(), token) }

// jsonCodec encodes sessions as JSON, readable in either store's table and
// by any relay version. Values are strings only.
type jsonCodec struct{}

type sessionJSON struct {
	Deadline time.Time         `json:"deadline"`
	Values   map[string]string `json:"values"`
}

func (jsonCodec) Encode(deadline time.Time, values map[string]any) ([]byte, error) {
	out := sessionJSON{Deadline: deadline.UTC(), Values: make(map[string]string, len(values))}
	for k, v := range values {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("panel: session value %q is %T, not a string", k, v)
		}
		out.Values[k] = s
	}
	return json.Marshal(out)
}

func (jsonCodec) Decode(b []byte) (time.Time, map[string]any, error) {
	var in sessionJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return time.Time{}, nil, err
	}
	values := make(map[string]any, len(in.Values))
	for k, v := range in.Values {
		values[k] = v
	}
	return in.Deadline, values, nil
}

// signedIn returns the session's user, read from the store on every request
// so that a disabled user or a changed role takes effect at once. Without a
// valid session it answers (a redirect to sign-in, or 401 with HX-Redirect
// for htmx) and returns false; a session whose user was disabled, removed,
// or whose password changed since sign-in is ended.
func (s *Server) signedIn(w http.ResponseWriter, r *http.Request) (cloud.User, bool) {
	ctx := r.Context()
	id := s.sessions.GetString(ctx, sessUser)
	if id == "" {
		notice := ""
		if _, err := r.Cookie(SessionCookie); err == nil {
			notice = "ended" // a cookie the store does not know: expired, signed out elsewhere, or tampered with
		}
		s.toLogin(w, r, notice)
		return cloud.User{}, false
	}
	u, err := s.cfg.Users.UserByID(ctx, id)
	if err != nil && cloud.ErrorCode(err) != cloud.ENOTFOUND {
		s.fail(w, r, nil, err)
		return cloud.User{}, false
	}
	since, _ := strconv.ParseInt(s.sessions.GetString(ctx, sessSignedIn), 10, 64)
	changed := !u.PasswordChangedAt.IsZero() && u.PasswordChangedAt.UnixMilli() >= since
	if err != nil || u.Disabled() || changed {
		if err := s.sessions.Destroy(ctx); err != nil {
			s.fail(w, r, nil, err)
			return cloud.User{}, false
		}
		s.toLogin(w, r, "ended")
		return cloud.User{}, false
	}
	return u, true
}

// toLogin sends the browser to the sign-in page, coming back to this page
// afterwards (GET only).
func (s *Server) toLogin(w http.ResponseWriter, r *http.Request, notice string) {
	q := url.Values{}
	if r.Method == http.MethodGet && r.Header.Get("HX-Request") == "" {
		q.Set("next", r.URL.RequestURI())
	}
	if notice != "" {
		q.Set("notice", notice)
	}
	target := "/panel/login"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("HX-Redirect", target)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

type loginData struct {
	Email, Next, Error, Notice string
	ssoLogin                   // single sign-on's part of the page (sso.go)
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request, _ *request) {
	if s.sessions.GetString(r.Context(), sessUser) != "" && r.URL.Query().Get("notice") == "" {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	d := loginData{Next: safeNext(r.URL.Query().Get("next")), ssoLogin: s.ssoLogin(r, r.URL.Query().Get("org"))}
	switch r.URL.Query().Get("notice") {
	case "ended":
		d.Notice = "Your session ended. Sign in again."
	case "signed-out":
		d.Notice = "You are signed out."
	}
	s.render(w, r, nil, http.StatusOK, "login", "Sign in", d)
}

// login checks email and password. Each attempt is reserved in the
// throttle's budgets (the account from this address, the address, the
// account) before the password is looked at; over a budget it is refused
// (429) unchecked. A wrong password keeps the attempt as a failure, a right
// one gives it back. An unknown email costs as much time as a wrong
// password.
func (s *Server) login(w http.ResponseWriter, r *http.Request, _ *request) {
	ctx := r.Context()
	email := r.PostFormValue("email")
	d := loginData{Email: email, Next: safeNext(r.PostFormValue("next")), ssoLogin: s.ssoLogin(r, "")}
	normal, _ := cloud.NormalizeEmail(email)
	addr := clientaddr.Key(r) // the throttle's identity of a client
	done, wait := s.throttle.reserve(normal, addr)
	if wait > 0 {
		s.signInLog.Note(addr, "throttled")
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
		d.Error = fmt.Sprintf("Too many failed sign-ins. Try again in %s.", roundWait(wait))
		s.render(w, r, nil, http.StatusTooManyRequests, "login", "Sign in", d)
		return
	}
	// Every organization's account with this email (account.go): the
	// password opens none, one, or several (then the user chooses).
	matched, accounts, err := s.passwordAccounts(ctx, email, r.PostFormValue("password"))
	done(err == nil && len(matched) == 0)
	if err != nil {
		s.fail(w, r, nil, err)
		return
	}
	if len(matched) == 0 {
		s.signInLog.Note(addr, "wrong_password")
		for _, a := range accounts { // each organization's account of this email hears of it
			s.auditSignInFailed(r, a.User, "password")
		}
		d.Error = "Wrong email or password."
		s.render(w, r, nil, http.StatusUnauthorized, "login", "Sign in", d)
		return
	}
	u, ok := s.oneAccount(w, r, matched, d)
	if !ok {
		return
	}
	s.passwordOK(w, r, u, d.Next)
}

// passwordOK goes on signing in u, the one account whose password matched
// (the only one, or the one chosen among several organizations': every
// password sign-in comes here), then startSession.
func (s *Server) passwordOK(w http.ResponseWriter, r *http.Request, u cloud.User, next string) {
	if s.secondStep(w, r, u, next) { // two-factor sign-in (totp.go)
		return
	}
	s.startSession(w, r, u, next, "password")
}

// startSession signs u in (every check passed: password or single sign-on,
// second step, disabled) and sends the browser to next: a fresh session id,
// the user and the time in the session. via says how ("password", "oidc")
// for the log and the audit record.
func (s *Server) startSession(w http.ResponseWriter, r *http.Request, u cloud.User, next, via string) {
	ctx := r.Context()
	if err := s.auditSession(r, u, cloud.ActionSignedIn, map[string]string{"via": via}); err != nil {
		s.fail(w, r, nil, err)
		return
	}
	// A fresh session id at sign-in: a token planted before it is useless.
	if err := s.sessions.RenewToken(ctx); err != nil {
		s.fail(w, r, nil, err)
		return
	}
	s.sessions.Put(ctx, sessUser, u.ID)
	s.sessions.Put(ctx, sessSignedIn, strconv.FormatInt(time.Now().UnixMilli(), 10))
	s.sessions.Put(ctx, sessVia, via)
	s.log.Info("panel sign-in", "user_id", u.ID, "org_id", u.OrgID, "via", via, "remote", clientaddr.Key(r))
	http.Redirect(w, r, safeNext(next), http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, rq *request) {
	if err := s.auditSession(r, rq.User, cloud.ActionSignedOut, nil); err != nil {
		s.log.Error("panel sign-out not recorded", "user_id", rq.User.ID, "err", err)
	}
	if err := s.sessions.Destroy(r.Context()); err != nil {
		s.fail(w, r, nil, err)
		return
	}
	http.Redirect(w, r, "/panel/login?notice=signed-out", http.StatusSeeOther)
}

// flash keeps a notice for the user's next page.
func (s *Server) flash(r *http.Request, msg string) { s.sessions.Put(r.Context(), sessFlash, msg) }

func roundWait(d time.Duration) string {
	if d < time.Minute {
		return "a minute"
	}
	return fmt.Sprintf("%d minutes", int(d.Round(time.Minute)/time.Minute))
}

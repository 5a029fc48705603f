package panel

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pquerna/otp"
	"github.com/pquerna/otp/hotp"
	"github.com/pquerna/otp/totp"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
	"github.com/fleet/fleet/cloud/password"
)

// Two-factor sign-in (issue 30, docs/identity.md): TOTP (RFC 6238, 30 s
// steps, 6 digits, SHA-1: what every authenticator app reads from the QR
// code) with ten one-time recovery codes. After the password, a user
// with two-factor sign-in on is not signed in: the session holds only
// their id and the time (pending, for pendingFor), and /panel/login/2fa
// asks for a code, throttled and counted like a password. A code is
// accepted once: the store spends its time step. An organization that
// requires two-factor sign-in sends its members without it to enrol
// before any other page (guard, twoFactorGate).

// Session keys of two-factor sign-in.
const (
	sessPending     = "pending2fa"     // the id of a user who gave their password, awaiting the code
	sessPendingAt   = "pending2faAt"   // when, Unix ms
	sessPendingNext = "pending2faNext" // the page to land on
	sessEnrolSecret = "totpEnrol"      // the secret being enrolled (shown on the page, not stored yet)
)

// pendingFor is how long a password stays good for the second step.
const pendingFor = 5 * time.Minute

// TOTP parameters: the defaults of authenticator apps.
const (
	totpPeriod = 30
	totpIssuer = "Fleet"
	qrSize     = 200 // pixels
)

var totpOpts = hotp.ValidateOpts{Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}

// Routes of two-factor sign-in.
const (
	login2FARoute    = "/panel/login/2fa"
	account2FARoute  = "/panel/account/2fa"
	enrol2FARoute    = "/panel/account/2fa/enrol"
	disable2FARoute  = "/panel/account/2fa/disable"
	securityRoute    = "/panel/settings/security"
	recoveryCodeLen  = 16 // base32 characters, 80 bits
	maxCodeInputSize = 64
)

// twoFactorRoutes are the routes of two-factor sign-in (none without
// Config.TwoFactor).
func (s *Server) twoFactorRoutes() []route {
	if s.cfg.TwoFactor == nil {
		return nil
	}
	return []route{
		{"GET", login2FARoute, "", s.login2FAPage},
		{"POST", login2FARoute, "", s.login2FA},
		{"GET", account2FARoute, cloud.PermView, s.account2FAPage},
		{"POST", enrol2FARoute, cloud.PermView, s.enrol2FA},
		{"POST", disable2FARoute, cloud.PermView, s.disable2FA},
		{"GET", securityRoute, cloud.PermMembers, s.securityPage},
		{"POST", securityRoute, cloud.PermMembers, s.setSecurity},
	}
}

// secondStep is the hook between the password and startSession: a user
// with two-factor sign-in on is sent to the second step (true: answered)
// with only their id in a fresh session; others are signed in at once.
func (s *Server) secondStep(w http.ResponseWriter, r *http.Request, u cloud.User, next string) bool {
	if s.cfg.TwoFactor == nil {
		return false
	}
	ctx := r.Context()
	st, err := s.cfg.TwoFactor.TwoFactorOf(ctx, u.OrgID, u.ID)
	if err != nil {
		s.fail(w, r, nil, err)
		return true
	}
	if !st.Enrolled() {
		return false // a member of an organization that requires it enrols on their first page (twoFactorGate)
	}
	if err := s.sessions.RenewToken(ctx); err != nil {
		s.fail(w, r, nil, err)
		return true
	}
	s.sessions.Put(ctx, sessPending, u.ID)
	s.sessions.Put(ctx, sessPendingAt, strconv.FormatInt(s.now().UnixMilli(), 10))
	s.sessions.Put(ctx, sessPendingNext, safeNext(next))
	http.Redirect(w, r, login2FARoute, http.StatusSeeOther)
	return true
}

type login2FAData struct {
	Error string
}

// pending returns the user awaiting the second step, when the password
// was given less than pendingFor ago.
func (s *Server) pending(r *http.Request) (cloud.User, bool) {
	ctx := r.Context()
	id := s.sessions.GetString(ctx, sessPending)
	at, _ := strconv.ParseInt(s.sessions.GetString(ctx, sessPendingAt), 10, 64)
	if id == "" || s.now().Sub(time.UnixMilli(at)) > pendingFor {
		return cloud.User{}, false
	}
	u, err := s.cfg.Users.UserByID(ctx, id)
	if err != nil || u.Disabled() {
		return cloud.User{}, false
	}
	return u, true
}

// clearPending forgets the second step's state.
func (s *Server) clearPending(r *http.Request) {
	for _, k := range []string{sessPending, sessPendingAt, sessPendingNext} {
		s.sessions.Remove(r.Context(), k)
	}
}

func (s *Server) login2FAPage(w http.ResponseWriter, r *http.Request, _ *request) {
	if _, ok := s.pending(r); !ok {
		s.clearPending(r)
		http.Redirect(w, r, "/panel/login?notice=ended", http.StatusSeeOther)
		return
	}
	s.render(w, r, nil, http.StatusOK, "login2fa", "Two-factor sign-in", login2FAData{})
}

// login2FA checks the second step's code (or a recovery code): throttled
// by the account and the address as the password is, a wrong or replayed
// code counting as a failed sign-in.
func (s *Server) login2FA(w http.ResponseWriter, r *http.Request, _ *request) {
	ctx := r.Context()
	u, ok := s.pending(r)
	if !ok {
		s.clearPending(r)
		http.Redirect(w, r, "/panel/login?notice=ended", http.StatusSeeOther)
		return
	}
	addr := clientaddr.Key(r)
	done, wait := s.throttle.reserve(u.Email, addr)
	if wait > 0 {
		s.signInLog.Note(addr, "throttled")
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
		s.render(w, r, nil, http.StatusTooManyRequests, "login2fa", "Two-factor sign-in",
			login2FAData{Error: fmt.Sprintf("Too many failed sign-ins. Try again in %s.", roundWait(wait))})
		return
	}
	via, err := s.checkSecondFactor(r, u, r.PostFormValue("code"))
	done(err == nil && via == "")
	if err != nil {
		s.fail(w, r, nil, err)
		return
	}
	if via == "" {
		s.signInLog.Note(addr, "wrong_code")
		s.auditSignInFailed(r, u, "totp")
		s.render(w, r, nil, http.StatusUnauthorized, "login2fa", "Two-factor sign-in",
			login2FAData{Error: "Wrong or already used code. Enter the current code of your authenticator app, or an unused recovery code."})
		return
	}
	next := s.sessions.GetString(ctx, sessPendingNext)
	s.clearPending(r)
	s.startSession(w, r, u, next, via)
}

// checkSecondFactor returns how code signs u in ("password+totp",
// "password+recovery"), "" when it does not: a TOTP code of the current
// step or a neighbour not spent yet, or an unused recovery code.
func (s *Server) checkSecondFactor(r *http.Request, u cloud.User, code string) (string, error) {
	ctx := r.Context()
	code = normalizeCode(code)
	if len(code) == int(otp.DigitsSix) && isDigits(code) {
		secret, err := s.cfg.TwoFactor.TOTPSecret(ctx, u.OrgID, u.ID)
		if cloud.ErrorCode(err) == cloud.ENOTFOUND {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		step, ok := matchStep(secret, code, s.now())
		if !ok {
			return "", nil
		}
		if ok, err = s.cfg.TwoFactor.UseTOTPStep(ctx, u.OrgID, u.ID, step); err != nil || !ok {
			return "", err
		}
		return "password+totp", nil
	}
	if len(code) != recoveryCodeLen {
		return "", nil
	}
	ok, err := s.cfg.TwoFactor.UseRecoveryCode(ctx, u.OrgID, u.ID, recoveryHash(u.ID, code))
	if err != nil || !ok {
		return "", err
	}
	return "password+recovery", nil
}

// normalizeCode drops spaces and dashes and lower-cases; a longer input
// than any code is cut (it matches nothing).
func normalizeCode(code string) string {
	if len(code) > maxCodeInputSize {
		return ""
	}
	return strings.ToLower(strings.NewReplacer(" ", "", "-", "", "\t", "").Replace(code))
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// matchStep returns the time step, among now's and its two neighbours
// (a clock a step off), whose code is code; the earliest when several
// are.
func matchStep(secret, code string, now time.Time) (int64, bool) {
	step := now.Unix() / totpPeriod
	for _, st := range []int64{step - 1, step, step + 1} {
		want, err := hotp.GenerateCodeCustom(secret, uint64(st), totpOpts)
		if err == nil && subtle.ConstantTimeCompare([]byte(want), []byte(code)) == 1 {
			return st, true
		}
	}
	return 0, false
}

// recoveryHash is what the store keeps of a recovery code (normalized):
// its SHA-256 with the user's id (80 random bits need no slow hash).
func recoveryHash(userID, code string) string {
	sum := sha256.Sum256([]byte(userID + ":" + code))
	return hex.EncodeToString(sum[:])
}

// newRecoveryCodes returns RecoveryCodeCount codes as shown
// (xxxx-xxxx-xxxx-xxxx) and their hashes.
func newRecoveryCodes(userID string) (codes, hashes []string, err error) {
	enc := base32.StdEncoding.WithPadding(base32.NoPadding)
	for range cloud.RecoveryCodeCount {
		b := make([]byte, recoveryCodeLen*5/8)
		if _, err := rand.Read(b); err != nil {
			return nil, nil, fmt.Errorf("recovery code: %w", err)
		}
		c := strings.ToLower(enc.EncodeToString(b))
		codes = append(codes, c[0:4]+"-"+c[4:8]+"-"+c[8:12]+"-"+c[12:16])
		hashes = append(hashes, recoveryHash(userID, c))
	}
	return codes, hashes, nil
}

// twoFactorGate lets a request through unless the user's organization
// requires two-factor sign-in and the user has none: then every page but
// enrolment and sign-out leads to enrolment (false: answered).
func (s *Server) twoFactorGate(w http.ResponseWriter, r *http.Request, rq *request, rt route) bool {
	if s.cfg.TwoFactor == nil {
		return true
	}
	switch rt.Pattern {
	case account2FARoute, enrol2FARoute, "/panel/logout":
		return true
	}
	st, err := s.cfg.TwoFactor.TwoFactorOf(r.Context(), rq.User.OrgID, rq.User.ID)
	if err != nil {
		s.fail(w, r, rq, err)
		return false
	}
	if !st.OrgRequires || st.Enrolled() {
		return true
	}
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("HX-Redirect", account2FARoute)
		w.WriteHeader(http.StatusForbidden)
		return false
	}
	http.Redirect(w, r, account2FARoute, http.StatusSeeOther)
	return false
}

type account2FAData struct {
	State cloud.TwoFactor
	// Enrolment: the secret in text and its QR code.
	Secret string
	QR     template.URL
	Error  string
	// Codes are the recovery codes just made, shown once.
	Codes string
}

// account2FAPage is Account → Two-factor sign-in: the state, and either
// the enrolment (QR code, secret, confirmation code) or turning it off.
func (s *Server) account2FAPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.account2FAData(r, rq)
	s.show(w, r, rq, "account2fa", "Two-factor sign-in", d, err)
}

// account2FAData reads the user's state and, when it is off, the secret
// being enrolled: the session's, or a new one kept there (a reload shows
// the same QR code).
func (s *Server) account2FAData(r *http.Request, rq *request) (*account2FAData, error) {
	ctx := r.Context()
	st, err := s.cfg.TwoFactor.TwoFactorOf(ctx, rq.User.OrgID, rq.User.ID)
	if err != nil {
		return nil, err
	}
	d := &account2FAData{State: st}
	if st.Enrolled() {
		s.sessions.Remove(ctx, sessEnrolSecret)
		return d, nil
	}
	secret := s.sessions.GetString(ctx, sessEnrolSecret)
	key, err := totpKey(rq.User.Email, secret)
	if err != nil {
		return nil, err
	}
	if secret == "" {
		s.sessions.Put(ctx, sessEnrolSecret, key.Secret())
	}
	img, err := key.Image(qrSize, qrSize)
	if err != nil {
		return nil, fmt.Errorf("qr code: %w", err)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("qr code: %w", err)
	}
	d.Secret = key.Secret()
	d.QR = template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())) // the CSP allows img-src data:
	return d, nil
}

// totpKey is the key of secret ("": a new one, 160 random bits) for the
// account email.
func totpKey(email, secret string) (*otp.Key, error) {
	opts := totp.GenerateOpts{Issuer: totpIssuer, AccountName: email, Period: totpPeriod}
	if secret != "" {
		b, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(secret)
		if err != nil {
			return nil, fmt.Errorf("enrolment secret: %w", err)
		}
		opts.Secret = b
	}
	k, err := totp.Generate(opts)
	if err != nil {
		return nil, fmt.Errorf("totp key: %w", err)
	}
	return k, nil
}

// enrol2FA confirms the enrolment with a code of the secret shown, stores
// it with ten new recovery codes (the confirming code's step spent) and
// shows the codes this once.
func (s *Server) enrol2FA(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	d, err := s.account2FAData(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	if d.State.Enrolled() {
		s.fail(w, r, rq, cloud.Errorf(cloud.ECONFLICT, "Two-factor sign-in is on already."))
		return
	}
	step, ok := matchStep(d.Secret, normalizeCode(r.PostFormValue("code")), s.now())
	if !ok {
		d.Error = "That code does not match. Enter the 6-digit code your authenticator app shows now."
		s.render(w, r, rq, http.StatusBadRequest, "account2fa", "Two-factor sign-in", d)
		return
	}
	codes, hashes, err := newRecoveryCodes(rq.User.ID)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	if err := s.cfg.TwoFactor.EnrollTOTP(ctx, rq.User.OrgID, rq.User.ID, cloud.TOTPEnrolment{Secret: d.Secret, Step: step, RecoveryHashes: hashes}); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.sessions.Remove(ctx, sessEnrolSecret)
	s.log.Info("panel: two-factor sign-in enrolled", "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	d, err = s.account2FAData(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d.Codes = strings.Join(codes, "\n")
	s.render(w, r, rq, http.StatusOK, "account2fa", "Two-factor sign-in", d)
}

// disable2FA turns two-factor sign-in off with the user's password; not
// when the organization requires it. Wrong passwords count as failed
// sign-ins.
func (s *Server) disable2FA(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	d, err := s.account2FAData(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	switch {
	case !d.State.Enrolled():
		s.fail(w, r, rq, cloud.Errorf(cloud.ECONFLICT, "Two-factor sign-in is off already."))
		return
	case d.State.OrgRequires:
		s.fail(w, r, rq, cloud.Errorf(cloud.ECONFLICT, "Your organization requires two-factor sign-in: it cannot be turned off."))
		return
	}
	addr := clientaddr.Key(r)
	done, wait := s.throttle.reserve(rq.User.Email, addr)
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
		d.Error = fmt.Sprintf("Too many failed sign-ins. Try again in %s.", roundWait(wait))
		s.render(w, r, rq, http.StatusTooManyRequests, "account2fa", "Two-factor sign-in", d)
		return
	}
	err = s.hasher.Check(ctx, r.PostFormValue("password"), rq.User.PasswordHash)
	done(errors.Is(err, password.ErrMismatch))
	if err != nil && !errors.Is(err, password.ErrMismatch) {
		s.fail(w, r, rq, err)
		return
	}
	if err != nil {
		d.Error = "Wrong password; two-factor sign-in stays on."
		s.render(w, r, rq, http.StatusUnauthorized, "account2fa", "Two-factor sign-in", d)
		return
	}
	if _, err := s.cfg.TwoFactor.ResetTwoFactor(ctx, rq.User.OrgID, rq.User.ID); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: two-factor sign-in turned off", "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	s.flash(r, "Two-factor sign-in is off.")
	http.Redirect(w, r, account2FARoute, http.StatusSeeOther)
}

type securityData struct {
	Require bool
}

// securityPage is Settings → Security (OWNER): whether the organization
// requires two-factor sign-in.
func (s *Server) securityPage(w http.ResponseWriter, r *http.Request, rq *request) {
	st, err := s.cfg.TwoFactor.TwoFactorOf(r.Context(), rq.User.OrgID, rq.User.ID)
	s.show(w, r, rq, "security", "Security", securityData{Require: st.OrgRequires}, err)
}

func (s *Server) setSecurity(w http.ResponseWriter, r *http.Request, rq *request) {
	require := r.PostFormValue("require2fa") == "true"
	if err := s.cfg.TwoFactor.SetOrgRequire2FA(r.Context(), rq.User.OrgID, require); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	msg := "Two-factor sign-in is optional."
	if require {
		msg = "Two-factor sign-in is required: members without it enrol on their next page."
	}
	s.flash(r, msg)
	http.Redirect(w, r, securityRoute, http.StatusSeeOther)
}

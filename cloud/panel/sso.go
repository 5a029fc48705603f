package panel

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
)

// Single sign-on (docs/identity.md): the sign-in page sends a person to
// their organization's OpenID Connect provider (found by their email's
// domain, or by ?org=ID), and /panel/sso/callback signs them in with the
// provider's answer: the authorization code flow with PKCE (S256), state
// and nonce, the ID token verified by go-oidc (issuer, audience, signature
// against the provider's published keys, expiry). The provider owns the
// person's factors: a single sign-on is not asked for the relay's second
// step.

// Session key of a single sign-on under way: ssoFlow as JSON, taken (and
// removed) by the callback, so that each is used once.
const sessSSO = "sso"

const (
	// ssoFlowTTL bounds the time between leaving for the provider and
	// coming back.
	ssoFlowTTL = 10 * time.Minute
	// ssoNetTimeout bounds every request to a provider (discovery, keys,
	// token, userinfo).
	ssoNetTimeout = 10 * time.Second
	// ssoCallbackPath is where providers send people back.
	ssoCallbackPath = "/panel/sso/callback"
)

// ssoScopes are the scopes the relay asks for.
var ssoScopes = []string{oidc.ScopeOpenID, "email", "profile"}

// ssoFlow is what the browser's session keeps between leaving for the
// provider and coming back.
type ssoFlow struct {
	State    string `json:"state"`
	Nonce    string `json:"nonce"`
	Verifier string `json:"verifier"` // PKCE code verifier
	OrgID    string `json:"org"`
	Redirect string `json:"redirect"` // the redirect URI sent (the token request repeats it)
	Next     string `json:"next"`
	Expires  int64  `json:"exp"` // Unix ms
}

// ssoLogin is single sign-on's part of the sign-in page: SSO offers "Sign
// in with single sign-on" (by email) when an organization has it on; OrgID and OrgName, from ?org=ID of an
// organization whose single sign-on is on, offer "Sign in with <name>".
type ssoLogin struct {
	SSO            bool
	OrgID, OrgName string
}

func (s *Server) ssoLogin(r *http.Request, orgID string) ssoLogin {
	if s.cfg.OIDC == nil {
		return ssoLogin{}
	}
	var l ssoLogin
	if orgID != "" && len(orgID) <= 64 {
		if c, err := s.cfg.OIDC.OrgOIDC(r.Context(), orgID); err == nil && c.Enabled {
			l.OrgID, l.OrgName = c.OrgID, c.OrgName
		}
	}
	// Offered only when some organization signs in this way (a failed
	// read offers it: the start says what is wrong).
	on, err := s.cfg.OIDC.OIDCEnabled(r.Context())
	l.SSO = on || err != nil || l.OrgID != ""
	return l
}

// ssoError is a refused single sign-on: the sign-in page shows Message
// with Status; Reason goes to the log.
type ssoError struct {
	Status  int
	Message string
	Reason  string
}

func (e *ssoError) Error() string { return e.Reason }

func refuse(status int, reason, format string, args ...any) *ssoError {
	return &ssoError{Status: status, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// ssoHTTP returns ctx carrying the client with timeouts that go-oidc and
// oauth2 use for every request to the provider.
func (s *Server) ssoHTTP(ctx context.Context) context.Context {
	ctx = oidc.ClientContext(ctx, s.ssoClient)
	return context.WithValue(ctx, oauth2.HTTPClient, s.ssoClient)
}

// redirectURI is the callback's absolute URL: under the relay's public
// URL when it names a host, else under the request's own host.
func (s *Server) redirectURI(r *http.Request) string {
	if u, err := url.Parse(s.cfg.PublicURL); err == nil && u.Hostname() != "" {
		if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsUnspecified() {
			return strings.TrimRight(s.cfg.PublicURL, "/") + ssoCallbackPath
		}
	}
	scheme := "http"
	if r.TLS != nil || s.cfg.Secure {
		scheme = "https"
	}
	return scheme + "://" + r.Host + ssoCallbackPath
}

// ssoStart leaves for the provider of the organization named by org (the
// ?org= link's button) or by the email's domain.
func (s *Server) ssoStart(w http.ResponseWriter, r *http.Request, _ *request) {
	d := loginData{Email: r.PostFormValue("email"), Next: safeNext(r.PostFormValue("next")), ssoLogin: s.ssoLogin(r, r.PostFormValue("org"))}
	target, org, err := s.ssoBegin(r, d)
	if err != nil {
		s.ssoRefused(w, r, d, err)
		return
	}
	// Not a redirect: browsers hold the redirects of a form's submission
	// to the sign-in page's form-action 'self' and would refuse the
	// provider's origin. A Refresh (and a link without it) is a plain
	// navigation.
	u, _ := url.Parse(target)
	w.Header().Set("Refresh", "0; url="+target)
	s.render(w, r, nil, http.StatusOK, "ssogo", "Continue to sign in", ssoGo{URL: target, Host: u.Host, OrgName: org})
}

// ssoGo is the page that sends the browser on to the provider.
type ssoGo struct{ URL, Host, OrgName string }

// ssoBegin finds the organization, keeps a new flow in the session and
// returns the provider's authorization URL and the organization's name.
func (s *Server) ssoBegin(r *http.Request, d loginData) (target, orgName string, err error) {
	ctx := r.Context()
	var c cloud.OIDCConfig
	if org := r.PostFormValue("org"); org != "" {
		c, err = s.cfg.OIDC.OrgOIDC(ctx, org)
		if err == nil && !c.Enabled {
			err = cloud.Errorf(cloud.ENOTFOUND, "single sign-on is off")
		}
	} else {
		email, nerr := cloud.NormalizeEmail(d.Email)
		if nerr != nil {
			return "", "", refuse(http.StatusBadRequest, "bad email", "Type your work email to sign in with single sign-on.")
		}
		c, err = s.cfg.OIDC.OIDCByDomain(ctx, cloud.EmailDomain(email))
		if cloud.ErrorCode(err) == cloud.ENOTFOUND {
			return "", "", refuse(http.StatusNotFound, "no organization for domain",
				"No organization signs in with single sign-on for @%s. Sign in with your email and password.", cloud.EmailDomain(email))
		}
	}
	if cloud.ErrorCode(err) == cloud.ENOTFOUND {
		return "", "", refuse(http.StatusNotFound, "single sign-on off", "This organization does not offer single sign-on. Sign in with your email and password.")
	}
	if err != nil {
		return "", "", err
	}
	p, err := oidc.NewProvider(s.ssoHTTP(ctx), c.Issuer)
	if err != nil {
		return "", "", refuse(http.StatusBadGateway, "discovery: "+err.Error(), "The sign-in provider of %s could not be reached; try again later.", c.OrgName)
	}
	f := ssoFlow{State: rand.Text(), Nonce: rand.Text(), Verifier: oauth2.GenerateVerifier(), OrgID: c.OrgID,
		Redirect: s.redirectURI(r), Next: d.Next, Expires: s.now().Add(ssoFlowTTL).UnixMilli()}
	b, err := json.Marshal(f)
	if err != nil {
		return "", "", err
	}
	s.sessions.Put(ctx, sessSSO, string(b))
	opts := []oauth2.AuthCodeOption{oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)}
	if d.Email != "" {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", strings.TrimSpace(d.Email)))
	}
	return oauthConfig(c, p, f.Redirect).AuthCodeURL(f.State, opts...), c.OrgName, nil
}

func oauthConfig(c cloud.OIDCConfig, p *oidc.Provider, redirect string) *oauth2.Config {
	return &oauth2.Config{ClientID: c.ClientID, ClientSecret: c.ClientSecret, Endpoint: p.Endpoint(), RedirectURL: redirect, Scopes: ssoScopes}
}

// ssoCallback finishes a single sign-on: the provider's answer is checked
// against the flow this browser started, the code exchanged, the ID token
// verified, and the member found (or made) and signed in. Any refusal
// shows on the sign-in page and changes nothing.
func (s *Server) ssoCallback(w http.ResponseWriter, r *http.Request, _ *request) {
	d := loginData{Next: Prefix, ssoLogin: s.ssoLogin(r, "")}
	u, next, err := s.ssoFinish(r)
	if err != nil {
		s.ssoRefused(w, r, d, err)
		return
	}
	s.startSession(w, r, u, next, "oidc")
}

func (s *Server) ssoFinish(r *http.Request) (cloud.User, string, error) {
	ctx := r.Context()
	q := r.URL.Query()
	var f ssoFlow
	raw := s.sessions.PopString(ctx, sessSSO)
	if raw == "" || json.Unmarshal([]byte(raw), &f) != nil {
		return cloud.User{}, "", refuse(http.StatusBadRequest, "no flow", "This single sign-on is unknown to this browser or was already used; nothing was done. Start again.")
	}
	if s.now().UnixMilli() > f.Expires {
		return cloud.User{}, "", refuse(http.StatusBadRequest, "flow expired", "This single sign-on took longer than %d minutes; nothing was done. Start again.", int(ssoFlowTTL.Minutes()))
	}
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(f.State)) != 1 {
		return cloud.User{}, "", refuse(http.StatusBadRequest, "state mismatch", "The provider's answer does not belong to this sign-in (state differs); nothing was done. Start again.")
	}
	if e := q.Get("error"); e != "" {
		msg := e
		if desc := q.Get("error_description"); desc != "" {
			msg += ": " + desc
		}
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return cloud.User{}, "", refuse(http.StatusForbidden, "provider error "+e, "The sign-in provider refused: %s. Nothing was done.", msg)
	}
	c, err := s.cfg.OIDC.OrgOIDC(ctx, f.OrgID)
	if cloud.ErrorCode(err) == cloud.ENOTFOUND || (err == nil && !c.Enabled) {
		return cloud.User{}, "", refuse(http.StatusForbidden, "single sign-on off", "Single sign-on was turned off for this organization; nothing was done.")
	}
	if err != nil {
		return cloud.User{}, "", err
	}
	nctx := s.ssoHTTP(ctx)
	p, err := oidc.NewProvider(nctx, c.Issuer)
	if err != nil {
		return cloud.User{}, "", refuse(http.StatusBadGateway, "discovery: "+err.Error(), "The sign-in provider of %s could not be reached; try again later.", c.OrgName)
	}
	tok, err := oauthConfig(c, p, f.Redirect).Exchange(nctx, q.Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return cloud.User{}, "", refuse(http.StatusBadGateway, "token exchange: "+err.Error(), "The sign-in provider did not accept the sign-in (code exchange failed); nothing was done. Start again.")
	}
	rawID, _ := tok.Extra("id_token").(string)
	if rawID == "" {
		return cloud.User{}, "", refuse(http.StatusBadGateway, "no id_token", "The sign-in provider sent no ID token; nothing was done.")
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: c.ClientID}).Verify(nctx, rawID)
	if err != nil {
		return cloud.User{}, "", refuse(http.StatusForbidden, "id token: "+err.Error(), "The sign-in provider's ID token did not verify (%s); nothing was done.", verifyReason(err))
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(f.Nonce)) != 1 {
		return cloud.User{}, "", refuse(http.StatusForbidden, "nonce mismatch", "The ID token does not belong to this sign-in (nonce differs); nothing was done.")
	}
	claims := map[string]any{}
	if err := idt.Claims(&claims); err != nil {
		return cloud.User{}, "", err
	}
	if _, hasEmail := claims["email"]; (!hasEmail || (c.RoleClaim != "" && claims[c.RoleClaim] == nil)) && p.UserInfoEndpoint() != "" {
		// Providers may keep profile claims out of the ID token: the
		// userinfo endpoint, for the same subject, adds what it lacks.
		if ui, err := p.UserInfo(nctx, oauth2.StaticTokenSource(tok)); err == nil && ui.Subject == idt.Subject {
			extra := map[string]any{}
			if ui.Claims(&extra) == nil {
				for k, v := range extra {
					if _, ok := claims[k]; !ok {
						claims[k] = v
					}
				}
			}
		}
	}
	u, err := s.ssoMember(r, c, claims)
	return u, f.Next, err
}

// verifyReason says in words why go-oidc refused an ID token.
func verifyReason(err error) string {
	var expired *oidc.TokenExpiredError
	switch msg := err.Error(); {
	case errors.As(err, &expired):
		return "it has expired"
	case strings.Contains(msg, "signature"):
		return "it is not signed by the provider's keys"
	case strings.Contains(msg, "issuer"):
		return "it names another issuer"
	case strings.Contains(msg, "audience"):
		return "it was issued to another client"
	}
	return "it is malformed"
}

// ssoMember finds the organization's member the claims name, or makes one
// with the default (or mapped) role; a disabled member is refused.
func (s *Server) ssoMember(r *http.Request, c cloud.OIDCConfig, claims map[string]any) (cloud.User, error) {
	ctx := r.Context()
	raw, _ := claims["email"].(string)
	if v, ok := claims["email_verified"].(bool); ok && !v {
		return cloud.User{}, refuse(http.StatusForbidden, "email not verified", "The provider has not verified the email %s; nothing was done.", raw)
	}
	email, err := cloud.NormalizeEmail(raw)
	if err != nil {
		return cloud.User{}, refuse(http.StatusForbidden, "no email", "The sign-in provider sent no usable email address (ask for the scope \"email\"); nothing was done.")
	}
	if !c.AllowsEmail(email) {
		return cloud.User{}, refuse(http.StatusForbidden, "foreign domain", "%s is not in an email domain of %s (%s); nothing was done.", email, c.OrgName, strings.Join(c.Domains, ", "))
	}
	u, err := s.cfg.Users.UserByOrgEmail(ctx, c.OrgID, email)
	switch {
	case err == nil:
		if u.Disabled() {
			return cloud.User{}, refuse(http.StatusForbidden, "member disabled", "This account is disabled. Ask an OWNER of your organization.")
		}
		return u, nil
	case cloud.ErrorCode(err) != cloud.ENOTFOUND:
		return cloud.User{}, err
	}
	// A first sign-in: a member with the default or mapped role and a
	// password nobody knows (an OWNER may set one).
	pw, err := apikey.RandomBase62(32)
	if err != nil {
		return cloud.User{}, err
	}
	hash, err := s.hasher.Hash(ctx, pw)
	if err != nil {
		return cloud.User{}, err
	}
	u, err = s.cfg.OIDC.CreateOIDCMember(ctx, cloud.NewUser{OrgID: c.OrgID, Email: email, Role: c.RoleFor(claims), PasswordHash: hash}, clientaddr.Host(r))
	if cloud.ErrorCode(err) == cloud.ECONFLICT {
		return cloud.User{}, refuse(http.StatusConflict, "email taken", "%s already has an account on this relay outside %s; nothing was done.", email, c.OrgName)
	}
	if err != nil {
		return cloud.User{}, err
	}
	s.log.Info("panel: member added by single sign-on", "user_id", u.ID, "role", string(u.Role), "org_id", u.OrgID)
	return u, nil
}

// ssoRefused shows a refused single sign-on on the sign-in page.
func (s *Server) ssoRefused(w http.ResponseWriter, r *http.Request, d loginData, err error) {
	var se *ssoError
	if !errors.As(err, &se) {
		s.fail(w, r, nil, err)
		return
	}
	reason := se.Reason
	if len(reason) > 300 {
		reason = reason[:300]
	}
	s.log.Info("panel single sign-on refused", "reason", reason, "remote", clientaddr.Key(r))
	d.Error = se.Message
	s.render(w, r, nil, se.Status, "login", "Sign in", d)
}

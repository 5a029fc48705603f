package panel

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/hw/catalog"
)

// Rollouts → Claims: claim tokens with which gateways register themselves
// (zero-touch provisioning, DESIGN.md "Claiming"). A token is shown once,
// in the answer to the form that made it, with the agent's command line
// and configuration file that use it.

// claimExpiries are the choices of "Expires".
var claimExpiries = []struct {
	Value, Label string
	D            time.Duration
}{
	{"1", "1 day", 24 * time.Hour},
	{"7", "7 days", 7 * 24 * time.Hour},
	{"30", "30 days", 30 * 24 * time.Hour},
	{"90", "90 days", 90 * 24 * time.Hour},
	{"never", "Never", 0},
}

// maxClaimUses is the most devices one claim may create.
const maxClaimUses = 100000

type claimRow struct {
	cloud.Claim
	State string // active, used_up, expired, revoked
}

type claimForm struct {
	Model, Tags, Uses, Expires string
}

type claimsData struct {
	Claims   []claimRow
	Form     claimForm
	Models   []option
	Expiries []option
	Errors   map[string]string
	// Created is the claim just made, its token shown this once with
	// Relay, the URL agents reach this relay at.
	Created      *cloud.Claim
	CreatedToken string
	Relay        string
}

func (s *Server) claimsData(r *http.Request, rq *request, f claimForm) (*claimsData, error) {
	claims, err := s.cfg.Claims.ListClaims(r.Context(), rq.User.OrgID)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(claims, func(a, b cloud.Claim) int { return b.CreatedAt.Compare(a.CreatedAt) })
	d := &claimsData{Form: f, Errors: map[string]string{}}
	now := s.now()
	for _, c := range claims {
		d.Claims = append(d.Claims, claimRow{Claim: c, State: c.State(now)})
	}
	for _, m := range catalog.Names() {
		d.Models = append(d.Models, option{Value: m, Label: m, Selected: m == f.Model})
	}
	for _, e := range claimExpiries {
		d.Expiries = append(d.Expiries, option{Value: e.Value, Label: e.Label, Selected: e.Value == f.Expires})
	}
	return d, nil
}

// claimsPage lists the claims and the form of a new one.
func (s *Server) claimsPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.claimsData(r, rq, claimForm{Uses: "1", Expires: "7"})
	s.show(w, r, rq, "claims", "Claims", d, err)
}

// createClaim makes a claim and shows its token this once, in the answer to
// the POST (never stored, never redirected through the session); an error
// is shown beside its field with what was typed.
func (s *Server) createClaim(w http.ResponseWriter, r *http.Request, rq *request) {
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	f := claimForm{Model: v("model"), Tags: v("tags"), Uses: v("uses"), Expires: v("expires")}
	d, err := s.claimsData(r, rq, f)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	nc := cloud.NewClaim{OrgID: rq.User.OrgID, Model: f.Model, Tags: splitList(f.Tags)}
	if f.Uses != "" {
		n, err := strconv.Atoi(f.Uses)
		if err != nil || n < 1 || n > maxClaimUses {
			d.Errors["uses"] = "uses: how many gateways may register with it, 1 to 100000"
		}
		nc.Uses = n
	}
	known := false
	for _, e := range claimExpiries {
		if e.Value == f.Expires {
			nc.ExpiresIn, known = e.D, true
		}
	}
	if !known {
		d.Errors["expires"] = "expires: choose when the claim expires"
	}
	if len(d.Errors) == 0 {
		c, token, err := s.cfg.Claims.CreateClaim(r.Context(), nc)
		switch cloud.ErrorCode(err) {
		case cloud.EINTERNAL:
			if err != nil {
				s.fail(w, r, rq, err)
				return
			}
			s.log.Info("panel: claim created", "claim_id", c.ID, "model", c.Model, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
			if d, err = s.claimsData(r, rq, claimForm{Uses: "1", Expires: "7"}); err != nil {
				s.fail(w, r, rq, err)
				return
			}
			d.Created, d.CreatedToken, d.Relay = &c, token, s.relayURL(r)
			s.render(w, r, rq, http.StatusOK, "claims", "Claims", d)
			return
		case cloud.EINVALID:
			msg := cloud.ErrorMessage(err)
			field := formField(msg, "model", "tags", "uses", "expires")
			if strings.HasPrefix(msg, "expiresIn") {
				field = "expires"
			}
			d.Errors[field] = msg
		default:
			s.fail(w, r, rq, err)
			return
		}
	}
	s.render(w, r, rq, http.StatusBadRequest, "claims", "Claims", d)
}

// relayURL is the base URL the browser reached the relay at, which agents
// are given with --relay.
func (s *Server) relayURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || s.cfg.Secure {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// revokeClaim asks for confirmation, then (confirm=yes) revokes the claim:
// no gateway registers with it any more (those it registered keep their
// device tokens).
func (s *Server) revokeClaim(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	id := r.PathValue("id")
	claims, err := s.cfg.Claims.ListClaims(ctx, rq.User.OrgID)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	i := slices.IndexFunc(claims, func(c cloud.Claim) bool { return c.ID == id })
	if i < 0 {
		s.fail(w, r, rq, cloud.Errorf(cloud.ENOTFOUND, "claim %q not found", id))
		return
	}
	c := claims[i]
	if s.askFirst(w, r, rq, "Revoke claim", confirmData{
		Heading: "Revoke the claim " + c.ID + " (" + c.Model + ")?",
		Message: "Gateways can no longer register with its token; those it registered keep working. This cannot be undone.",
		Action:  "/panel/claims/" + url.PathEscape(c.ID) + "/revoke", Button: "Revoke claim", Cancel: "/panel/claims",
	}) {
		return
	}
	if _, err := s.cfg.Claims.RevokeClaim(ctx, rq.User.OrgID, c.ID); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: claim revoked", "claim_id", c.ID, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	s.flash(r, "Claim "+c.ID+" revoked.")
	http.Redirect(w, r, "/panel/claims", http.StatusSeeOther)
}

package panel

import (
	"net/http"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
)

// deliveryLogSize is how many deliveries Settings → Webhooks lists.
const deliveryLogSize = 50

// The choices of the rotation's grace period.
var graces = []struct {
	Value, Label string
	D            time.Duration
}{
	{"0", "none: the old secret stops at once", 0},
	{"1h", "1 hour", time.Hour},
	{"24h", "24 hours", 24 * time.Hour},
	{"168h", "7 days", 7 * 24 * time.Hour},
}

type webhooksData struct {
	Settings   cloud.WebhookSettings
	URL        string
	Errors     map[string]string
	Graces     []option
	Deliveries []cloud.DeliverySummary
	// NewSecret is the secret just made, shown with its grace.
	NewSecret string
}

func (s *Server) webhooksData(r *http.Request, rq *request) (*webhooksData, error) {
	ctx := r.Context()
	st, err := s.cfg.Webhooks.WebhookSettings(ctx, rq.User.OrgID)
	if err != nil {
		return nil, err
	}
	ds, err := s.cfg.Webhooks.RecentDeliveries(ctx, rq.User.OrgID, deliveryLogSize)
	if err != nil {
		return nil, err
	}
	d := &webhooksData{Settings: st, URL: st.AlertURL, Deliveries: ds, Errors: map[string]string{}}
	for _, g := range graces {
		d.Graces = append(d.Graces, option{Value: g.Value, Label: g.Label, Selected: g.Value == "24h"})
	}
	return d, nil
}

// webhooksPage is Settings → Webhooks: the alert URL, the signing secret
// and its rotation, and the delivery log with redeliver.
func (s *Server) webhooksPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.webhooksData(r, rq)
	s.show(w, r, rq, "webhooks", "Webhooks", d, err)
}

// setAlertURL sets or clears the organization's alert webhook URL.
func (s *Server) setAlertURL(w http.ResponseWriter, r *http.Request, rq *request) {
	u := strings.TrimSpace(r.PostFormValue("url"))
	err := s.cfg.Webhooks.SetOrgAlertWebhook(r.Context(), rq.User.OrgID, u)
	if cloud.ErrorCode(err) == cloud.EINVALID {
		d, derr := s.webhooksData(r, rq)
		if derr != nil {
			s.fail(w, r, rq, derr)
			return
		}
		d.URL, d.Errors["url"] = u, cloud.ErrorMessage(err)
		s.render(w, r, rq, http.StatusBadRequest, "webhooks", "Webhooks", d)
		return
	}
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	if u == "" {
		s.flash(r, "Alert webhook URL cleared: alerts are no longer sent.")
	} else {
		s.flash(r, "Alert webhooks now go to "+u+".")
	}
	http.Redirect(w, r, "/panel/settings/webhooks", http.StatusSeeOther)
}

// rotateSecret makes a new signing secret and shows it; the old one keeps
// signing for the chosen grace period.
func (s *Server) rotateSecret(w http.ResponseWriter, r *http.Request, rq *request) {
	grace, found := time.Duration(0), false
	for _, g := range graces {
		if g.Value == r.PostFormValue("grace") {
			grace, found = g.D, true
		}
	}
	if !found {
		s.fail(w, r, rq, cloud.Errorf(cloud.EINVALID, "choose a grace period"))
		return
	}
	secret, err := s.cfg.Webhooks.RotateOrgSecret(r.Context(), rq.User.OrgID, grace)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: webhook secret rotated", "grace", grace.String(), "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	d, err := s.webhooksData(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d.NewSecret = secret
	s.render(w, r, rq, http.StatusOK, "webhooks", "Webhooks", d)
}

// redeliver queues a copy of a delivery (a new delivery id).
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request, rq *request) {
	id, err := s.cfg.Webhooks.RedeliverOrgWebhook(r.Context(), rq.User.OrgID, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.flash(r, "Queued again as delivery "+id+".")
	http.Redirect(w, r, "/panel/settings/webhooks#deliveries", http.StatusSeeOther)
}

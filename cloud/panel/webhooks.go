package panel

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/notify"
	"github.com/fleet/fleet/cloud/webhook"
)

// webhooksRoute is Settings → Webhooks; its delivery log pages and filters
// by query (state, event, device, before, after).
const webhooksRoute = "/panel/settings/webhooks"

// deliveryEvents are the event filter's choices: what the relay delivers.
var deliveryEvents = []string{webhook.EventAlertOpened, webhook.EventAlertAcknowledged, webhook.EventAlertResolved,
	notify.EventReminder, webhook.EventSignal, notify.EventTest}

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
	// The delivery log's filters as typed, their choices, why they were
	// refused, and the links to the pages beside this one.
	Log                           deliveryQuery
	States, Events                []option
	LogError                      string
	NewerURL, OlderURL, NewestURL string
	PageSize                      int
	// NewSecret is the secret just made, shown with its grace.
	NewSecret string
}

func (s *Server) webhooksData(r *http.Request, rq *request) (*webhooksData, error) {
	ctx := r.Context()
	st, err := s.cfg.Webhooks.WebhookSettings(ctx, rq.User.OrgID)
	if err != nil {
		return nil, err
	}
	d := &webhooksData{Settings: st, URL: st.AlertURL, Errors: map[string]string{}}
	for _, g := range graces {
		d.Graces = append(d.Graces, option{Value: g.Value, Label: g.Label, Selected: g.Value == "24h"})
	}
	return d, s.deliveryLog(r, rq, d)
}

// deliveryQuery is the delivery log's filter as the query has it.
type deliveryQuery struct{ State, Event, Device string }

// deliveryLog reads the page of the delivery log r's query asks for into
// d: a filter or page link the store refuses is said in d.LogError.
func (s *Server) deliveryLog(r *http.Request, rq *request, d *webhooksData) error {
	v := r.URL.Query()
	d.Log = deliveryQuery{State: v.Get("state"), Event: v.Get("event"), Device: strings.TrimSpace(v.Get("device"))}
	d.States = []option{{Value: "", Label: "any", Selected: d.Log.State == ""}}
	for _, st := range cloud.DeliveryStates {
		d.States = append(d.States, option{Value: string(st), Label: string(st), Selected: string(st) == d.Log.State})
	}
	d.Events = []option{{Value: "", Label: "any", Selected: d.Log.Event == ""}}
	for _, ev := range deliveryEvents {
		d.Events = append(d.Events, option{Value: ev, Label: ev, Selected: ev == d.Log.Event})
	}
	f := cloud.DeliveryFilter{State: cloud.DeliveryState(d.Log.State), Event: d.Log.Event, DeviceID: d.Log.Device, Limit: cloud.DefaultDeliveryPage}
	d.PageSize = f.Limit
	var err error
	if f.Before, err = cursorParam(v, "before"); err == nil {
		f.After, err = cursorParam(v, "after")
	}
	var page cloud.DeliveryLogPage
	if err == nil {
		page, err = s.cfg.Webhooks.DeliveryLog(r.Context(), rq.User.OrgID, f)
	}
	if code := cloud.ErrorCode(err); code == cloud.EINVALID || code == cloud.ECURSOR {
		d.LogError = cloud.ErrorMessage(err)
		return nil
	} else if err != nil {
		return err
	}
	d.Deliveries = page.Deliveries
	link := func(name string, cursor int64) string {
		q := url.Values{}
		for k, val := range map[string]string{"state": d.Log.State, "event": d.Log.Event, "device": d.Log.Device} {
			if val != "" {
				q.Set(k, val)
			}
		}
		if cursor > 0 {
			q.Set(name, strconv.FormatInt(cursor, 10))
		}
		if len(q) == 0 {
			return webhooksRoute + "#deliveries"
		}
		return webhooksRoute + "?" + q.Encode() + "#deliveries"
	}
	if page.Newer != 0 {
		d.NewerURL = link("after", page.Newer)
	}
	if f.Before != 0 || f.After != 0 {
		d.NewestURL = link("", 0)
	}
	if page.Older != 0 {
		d.OlderURL = link("before", page.Older)
	}
	return nil
}

// cursorParam reads a page link's cursor from the query (0 when absent):
// anything but a positive number is ECURSOR.
func cursorParam(v url.Values, name string) (int64, error) {
	s := v.Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, cloud.Errorf(cloud.ECURSOR, "the page link is not valid: start from the newest deliveries")
	}
	return n, nil
}

// webhooksPage is Settings → Webhooks: the alert URL, the signing secret
// and its rotation, and the delivery log with redeliver.
func (s *Server) webhooksPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.webhooksData(r, rq)
	if err == nil && d.LogError != "" {
		s.render(w, r, rq, http.StatusBadRequest, "webhooks", "Webhooks", d)
		return
	}
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
	http.Redirect(w, r, webhooksRoute, http.StatusSeeOther)
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
	http.Redirect(w, r, webhooksRoute+"#deliveries", http.StatusSeeOther)
}

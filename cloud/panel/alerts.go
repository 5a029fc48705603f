package panel

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// alertsPageSize is the number of alerts per page.
const alertsPageSize = 50

type alertRow struct {
	resource.Alert
	DeviceName string
}

type alertsData struct {
	State      resource.AlertState
	Severity   resource.Severity
	States     []resource.AlertState
	Severities []resource.Severity
	Alerts     []alertRow
	OlderURL   string
	NewestURL  string
	Back       string // this list, to come back to after an action
}

// alertsPage lists the organization's alerts by state (ACTIVE by default)
// and severity, newest first.
func (s *Server) alertsPage(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	q := r.URL.Query()
	d := alertsData{State: resource.AlertState(strings.ToUpper(q.Get("state"))), Severity: resource.Severity(strings.ToUpper(q.Get("severity"))),
		States: []resource.AlertState{resource.AlertActive, resource.AlertAcknowledged, resource.AlertResolved}, Severities: resource.Severities,
		Back: r.URL.RequestURI()}
	if !d.State.Valid() {
		d.State = resource.AlertActive
	}
	if !d.Severity.Valid() {
		d.Severity = ""
	}
	f := cloud.AlertFilter{Page: cloud.Page{Limit: alertsPageSize, Cursor: q.Get("before")}, State: d.State, Severity: d.Severity}
	list, err := s.cfg.Alerts.ListAlerts(ctx, rq.User.OrgID, f)
	if cloud.ErrorCode(err) == cloud.ECURSOR {
		f.Cursor = ""
		list, err = s.cfg.Alerts.ListAlerts(ctx, rq.User.OrgID, f)
	}
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	names := map[string]string{}
	for _, a := range list.Data {
		name, seen := names[a.DeviceID]
		if !seen {
			if dev, err := s.cfg.Devices.Device(ctx, rq.User.OrgID, a.DeviceID); err == nil {
				name = dev.Name
			}
			names[a.DeviceID] = name
		}
		d.Alerts = append(d.Alerts, alertRow{Alert: a, DeviceName: name})
	}
	if list.Pagination.HasMore {
		v := cloneValues(q)
		v.Set("before", *list.Pagination.NextCursor)
		d.OlderURL = "/panel/alerts?" + v.Encode()
	}
	if f.Cursor != "" {
		v := cloneValues(q)
		v.Del("before")
		d.NewestURL = "/panel/alerts?" + v.Encode()
	}
	s.render(w, r, rq, http.StatusOK, "alerts", "Alerts", d)
}

// maxBulkAlerts bounds the alerts one action changes.
const maxBulkAlerts = 200

// alertsAction acknowledges or resolves one alert (/panel/alerts/{id}/...)
// or the selected ones (form field id, repeated), then returns to the list.
func (s *Server) alertsAction(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	verb := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	ids := r.PostForm["id"]
	if id := r.PathValue("id"); id != "" {
		ids = []string{id}
	}
	back := safeNext(r.PostFormValue("back"))
	if back == Prefix {
		back = "/panel/alerts"
	}
	if len(ids) == 0 {
		s.flash(r, "Select at least one alert.")
		http.Redirect(w, r, back, http.StatusSeeOther)
		return
	}
	if len(ids) > maxBulkAlerts {
		s.fail(w, r, rq, cloud.Errorf(cloud.EINVALID, "at most %d alerts at once", maxBulkAlerts))
		return
	}
	done := 0
	var problems []string
	for _, id := range ids {
		var err error
		if verb == "acknowledge" {
			_, err = s.cfg.Alerts.Acknowledge(ctx, rq.User.OrgID, id)
		} else {
			_, err = s.cfg.Alerts.Resolve(ctx, rq.User.OrgID, id)
		}
		switch {
		case err == nil:
			done++
		case cloud.ErrorCode(err) == cloud.EINTERNAL:
			s.fail(w, r, rq, err)
			return
		default:
			problems = append(problems, cloud.ErrorMessage(err))
		}
	}
	past := map[string]string{"acknowledge": "acknowledged", "resolve": "resolved"}[verb]
	msg := fmt.Sprintf("%d alert%s %s.", done, plural(done), past)
	if len(problems) > 0 {
		msg += " Not changed: " + strings.Join(problems, "; ")
	}
	s.flash(r, msg)
	http.Redirect(w, r, back, http.StatusSeeOther)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

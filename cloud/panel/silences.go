package panel

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// Alerts → Silences: maintenance windows. An alert of a silenced device
// still opens and is listed, but notifies nobody.

// silencesPageSize is the number of silences per page.
const silencesPageSize = 100

// localTime is the layout of a datetime-local input (the panel's times
// are UTC).
const localTime = "2006-01-02T15:04"

// silenceDurations are the choices of "Duration", used when To is empty.
var silenceDurations = []struct {
	Value, Label string
	D            time.Duration
}{{"", "none: until To", 0}, {"1h", "1 h", time.Hour}, {"4h", "4 h", 4 * time.Hour}, {"24h", "24 h", 24 * time.Hour}}

type silenceForm struct {
	ScopeKind, DeviceIDs, Tags string
	From, To, Duration         string
	Comment                    string
}

type silenceRow struct {
	resource.Silence
	Scope string
}

type silencesData struct {
	Silences  []silenceRow
	NextURL   string
	FirstURL  string
	Form      silenceForm
	Durations []option
	Errors    map[string]string
	CanEdit   bool
}

func (s *Server) silencesData(r *http.Request, rq *request, f silenceForm) (*silencesData, error) {
	ctx := r.Context()
	org := rq.User.OrgID
	filter := cloud.SilenceFilter{Page: cloud.Page{Limit: silencesPageSize, Cursor: r.URL.Query().Get("after")}}
	list, err := firstOnBadCursor(&filter.Page, func(p cloud.Page) (resource.List[resource.Silence], error) {
		return s.cfg.Rules.ListSilences(ctx, org, cloud.SilenceFilter{Page: p})
	})
	if err != nil {
		return nil, err
	}
	d := &silencesData{Form: f, Errors: map[string]string{}, CanEdit: rq.User.Role.Can(cloud.PermAlerts)}
	words := s.scopeWords(ctx, org)
	for _, sl := range list.Data {
		d.Silences = append(d.Silences, silenceRow{Silence: sl, Scope: words.say(sl.Scope)})
	}
	if list.Pagination.HasMore && list.Pagination.NextCursor != nil {
		d.NextURL = "/panel/alerts/silences?after=" + url.QueryEscape(*list.Pagination.NextCursor)
	}
	if filter.Cursor != "" {
		d.FirstURL = "/panel/alerts/silences"
	}
	for _, du := range silenceDurations {
		d.Durations = append(d.Durations, option{Value: du.Value, Label: du.Label, Selected: du.Value == f.Duration})
	}
	return d, nil
}

// silencesPage lists the active silences and, for roles that may, the
// form of a new one (prefilled by ?device=ID or ?tag=T, as the device
// page's "Silence this device" links).
func (s *Server) silencesPage(w http.ResponseWriter, r *http.Request, rq *request) {
	q := r.URL.Query()
	f := silenceForm{ScopeKind: "all", From: s.now().UTC().Format(localTime), Duration: "1h"}
	if ids := q["device"]; len(ids) > 0 {
		f.ScopeKind, f.DeviceIDs = "devices", strings.Join(ids, ", ")
	} else if tags := q["tag"]; len(tags) > 0 {
		f.ScopeKind, f.Tags = "tags", strings.Join(tags, ", ")
	}
	d, err := s.silencesData(r, rq, f)
	s.show(w, r, rq, "silences", "Silences", d, err)
}

// createSilence starts a silence; a field's error is shown beside it and
// nothing is saved.
func (s *Server) createSilence(w http.ResponseWriter, r *http.Request, rq *request) {
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	f := silenceForm{ScopeKind: v("scope"), DeviceIDs: v("deviceIds"), Tags: v("tags"), From: v("from"), To: v("to"),
		Duration: v("duration"), Comment: r.PostFormValue("comment")}
	d, err := s.silencesData(r, rq, f)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	now := s.now()
	n := cloud.NewSilence{Comment: strings.TrimSpace(f.Comment), CreatedBy: "user:" + rq.User.Email}
	n.Scope = formScope(f.ScopeKind, f.DeviceIDs, f.Tags, d.Errors)
	if f.From != "" {
		if n.From, err = time.ParseInLocation(localTime, f.From, time.UTC); err != nil {
			d.Errors["from"] = "from: not a date and time (YYYY-MM-DDThh:mm, UTC)"
		}
	}
	dur, known := time.Duration(0), false
	for _, du := range silenceDurations {
		if du.Value == f.Duration {
			dur, known = du.D, true
		}
	}
	switch {
	case f.To != "":
		if n.To, err = time.ParseInLocation(localTime, f.To, time.UTC); err != nil {
			d.Errors["to"] = "to: not a date and time (YYYY-MM-DDThh:mm, UTC)"
		}
	case !known:
		d.Errors["duration"] = "duration: choose 1 h, 4 h or 24 h, or give To"
	case dur > 0:
		start := n.From
		if start.IsZero() {
			start = now
		}
		n.To = start.Add(dur)
	default:
		d.Errors["to"] = "to is required (or choose a duration)"
	}
	if len(d.Errors) == 0 {
		sl, err := s.cfg.Rules.CreateSilence(r.Context(), rq.User.OrgID, n)
		switch cloud.ErrorCode(err) {
		case cloud.EINTERNAL:
			if err != nil {
				s.fail(w, r, rq, err)
				return
			}
			s.log.Info("panel: silence created", "silence_id", sl.ID, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
			s.flash(r, "Silence of "+s.scopeWords(r.Context(), rq.User.OrgID).say(sl.Scope)+" until "+when(sl.To.Time)+" created.")
			http.Redirect(w, r, "/panel/alerts/silences", http.StatusSeeOther)
			return
		case cloud.EINVALID, cloud.ECONFLICT:
			msg := cloud.ErrorMessage(err)
			d.Errors[formField(msg, "from", "to", "comment")] = msg
		default:
			s.fail(w, r, rq, err)
			return
		}
	}
	s.render(w, r, rq, http.StatusBadRequest, "silences", "Silences", d)
}

// endSilence ends a silence now.
func (s *Server) endSilence(w http.ResponseWriter, r *http.Request, rq *request) {
	id := r.PathValue("id")
	if err := s.cfg.Rules.DeleteSilence(r.Context(), rq.User.OrgID, id); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: silence ended", "silence_id", id, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	s.flash(r, "Silence ended: alerts notify again.")
	http.Redirect(w, r, "/panel/alerts/silences", http.StatusSeeOther)
}

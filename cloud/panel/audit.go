package panel

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
)

// Settings → Audit log (issue 30, docs/audit.md): the organization's
// records newest first, with filters, keyset pages and a CSV export of
// every page. Both routes are GETs: nothing in the panel writes or deletes
// a record.

const (
	auditRoute    = "/panel/settings/audit"
	auditCSVRoute = "/panel/settings/audit.csv"
	// maxAuditCSV bounds the rows of one CSV export.
	maxAuditCSV = 100000
	// maxAuditTarget bounds the target id filter.
	maxAuditTarget = 200
)

// auditSince are the choices of "Since": how far back from now.
var auditSince = []struct {
	Value, Label string
	D            time.Duration
}{
	{"24h", "Last 24 hours", 24 * time.Hour},
	{"7d", "Last 7 days", 7 * 24 * time.Hour},
	{"30d", "Last 30 days", 30 * 24 * time.Hour},
	{"all", "All", 0},
}

// auditQuery is the filter form as typed (the page's and the CSV's query).
type auditQuery struct {
	Since, From, To, ActorKind, Action, Target, Before string
}

// auditFilter reads the query of r into the store's filter; an error names
// the field people should fix.
func (s *Server) auditFilter(r *http.Request) (auditQuery, cloud.AuditFilter, error) {
	v := r.URL.Query()
	q := auditQuery{Since: v.Get("since"), From: v.Get("from"), To: v.Get("to"), ActorKind: v.Get("actor"),
		Action: v.Get("action"), Target: strings.TrimSpace(v.Get("target")), Before: v.Get("before")}
	if q.Since == "" {
		q.Since = "all"
	}
	f := cloud.AuditFilter{ActorKind: cloud.ActorKind(q.ActorKind), Action: q.Action, TargetID: q.Target, Cursor: q.Before}
	known := false
	for _, c := range auditSince {
		if c.Value == q.Since {
			known = true
			if c.D > 0 {
				f.Since = s.now().Add(-c.D)
			}
		}
	}
	if !known {
		return q, f, cloud.Errorf(cloud.EINVALID, "since: choose 24 hours, 7 days, 30 days or all")
	}
	if q.From != "" {
		from, err := time.Parse(time.DateOnly, q.From)
		if err != nil {
			return q, f, cloud.Errorf(cloud.EINVALID, "from: a date such as 2026-11-27")
		}
		if from.After(f.Since) {
			f.Since = from
		}
	}
	if q.To != "" {
		to, err := time.Parse(time.DateOnly, q.To)
		if err != nil {
			return q, f, cloud.Errorf(cloud.EINVALID, "to: a date such as 2026-11-27")
		}
		f.Until = to.Add(24 * time.Hour) // the whole day
	}
	if !cloud.ValidActorKind(f.ActorKind) {
		return q, f, cloud.Errorf(cloud.EINVALID, "actor: choose user, API key or command line")
	}
	if !cloud.ValidAuditAction(f.Action) {
		return q, f, cloud.Errorf(cloud.EINVALID, "action: choose one of the list")
	}
	if len(q.Target) > maxAuditTarget {
		return q, f, cloud.Errorf(cloud.EINVALID, "target: at most %d characters", maxAuditTarget)
	}
	return q, f, nil
}

// auditRow is a record as the page shows it.
type auditRow struct {
	cloud.AuditRecord
	ISO, Local string // the time: RFC 3339 with milliseconds, and for people
}

type auditData struct {
	Query               auditQuery
	Since, Actors       []option
	Actions             []auditActionGroup
	Error               string
	Records             []auditRow
	OlderURL, NewestURL string
	CSVURL              string
}

// auditActionGroup is one kind of the action filter: "all of" the kind,
// then each of its actions.
type auditActionGroup struct {
	Kind    string
	All     option
	Options []option
}

// auditPage lists a page of the organization's records, newest first.
func (s *Server) auditPage(w http.ResponseWriter, r *http.Request, rq *request) {
	q, f, err := s.auditFilter(r)
	d := auditData{Query: q}
	for _, c := range auditSince {
		d.Since = append(d.Since, option{Value: c.Value, Label: c.Label, Selected: c.Value == q.Since})
	}
	for _, a := range []struct{ v, l string }{{"", "Anyone"}, {"user", "A user (panel)"}, {"api_key", "An API key"}, {"cli", "The command line"}} {
		d.Actors = append(d.Actors, option{Value: a.v, Label: a.l, Selected: a.v == q.ActorKind})
	}
	for _, kind := range cloud.AuditActionKinds() {
		g := auditActionGroup{Kind: strings.TrimSuffix(kind, "."), All: option{Value: kind, Label: "all " + kind + "*", Selected: kind == q.Action}}
		for _, a := range cloud.AuditActions {
			if strings.HasPrefix(a, kind) {
				g.Options = append(g.Options, option{Value: a, Label: a, Selected: a == q.Action})
			}
		}
		d.Actions = append(d.Actions, g)
	}
	v := r.URL.Query()
	v.Del("before")
	d.CSVURL = auditCSVRoute + "?" + v.Encode()
	status := http.StatusOK
	if err == nil {
		f.Limit = cloud.DefaultAuditPage
		var page cloud.AuditPage
		if page, err = s.cfg.Audit.ListAudit(r.Context(), rq.User.OrgID, f); err == nil {
			for _, rec := range page.Records {
				d.Records = append(d.Records, auditRow{AuditRecord: rec, ISO: rec.AuditTime(), Local: rec.At.UTC().Format("2006-01-02 15:04:05.000 UTC")})
			}
			if page.Next != "" {
				older := cloneValues(r.URL.Query())
				older.Set("before", page.Next)
				d.OlderURL = auditRoute + "?" + older.Encode()
			}
			if f.Cursor != "" {
				d.NewestURL = auditRoute + "?" + v.Encode()
			}
		}
	}
	if err != nil {
		if code := cloud.ErrorCode(err); code != cloud.EINVALID && code != cloud.ECURSOR {
			s.fail(w, r, rq, err)
			return
		}
		d.Error, status = cloud.ErrorMessage(err), http.StatusBadRequest
	}
	s.render(w, r, rq, status, "audit", "Audit log", d)
}

// auditCSV downloads the records the filters select, newest first, every
// page up to maxAuditCSV rows, written as they are read.
func (s *Server) auditCSV(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	_, f, err := s.auditFilter(r)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	f.Cursor, f.Limit = "", cloud.MaxAuditPage
	page, err := s.cfg.Audit.ListAudit(ctx, rq.User.OrgID, f)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", "audit-log-"+s.now().UTC().Format(time.DateOnly)+".csv"))
	cw := csv.NewWriter(w)
	cw.Write([]string{"id", "at", "actor_kind", "actor_id", "actor_name", "action", "target_kind", "target_id", "ip", "details"})
	rows := 0
	for {
		for _, rec := range page.Records {
			if rows == maxAuditCSV {
				break
			}
			cw.Write(csvCells(rec.ID, rec.AuditTime(), string(rec.Actor.Kind), rec.Actor.ID, rec.Actor.Name, rec.Action,
				rec.Target.Kind, rec.Target.ID, rec.IP, rec.DetailsText()))
			rows++
		}
		cw.Flush()
		if page.Next == "" || rows == maxAuditCSV || cw.Error() != nil {
			break
		}
		f.Cursor = page.Next
		if page, err = s.cfg.Audit.ListAudit(ctx, rq.User.OrgID, f); err != nil {
			break // the status is sent: the file ends short, the log says why
		}
	}
	if err == nil {
		err = cw.Error()
	}
	if err != nil && ctx.Err() == nil {
		s.log.Warn("audit CSV cut short", "org_id", rq.User.OrgID, "rows", rows, "err", err)
	}
}

// csvCells guards cells against formula injection: a spreadsheet runs a
// cell that starts with = + - @ (or a tab or carriage return) as a
// formula, so such a cell is written after a single quote.
func csvCells(cells ...string) []string {
	for i, c := range cells {
		if c != "" && strings.ContainsRune("=+-@\t\r", rune(c[0])) {
			cells[i] = "'" + c
		}
	}
	return cells
}

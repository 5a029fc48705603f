package panel

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// FleetPageSize is the number of devices per page of the fleet table.
const FleetPageSize = 50

// maxQueryLength bounds the fleet search.
const maxQueryLength = 200

type statusCount struct {
	Status resource.DeviceStatus
	N      int
	URL    string
	Active bool
}

// alertCount is one severity of the overview strip's open alerts, linking
// to the alerts page filtered by it.
type alertCount struct {
	Severity resource.Severity
	N        int
	URL      string
}

// fleetRow is one device of the table with what it shows at a glance.
type fleetRow struct {
	resource.Device
	// Glance is the device at a glance; HasGlance is false without
	// Config.Glance (the columns are hidden).
	Glance cloud.DeviceGlance
	SeenAt time.Time // last seen; zero: never
	Seen   string    // SeenAt, "12 s ago" (glance.js ticks it on)
	CPU    string    // "43%", "—" for no sample
	Memory string
	Disk   string
}

type fleetData struct {
	Counts    []statusCount
	All       int
	AllURL    string
	Alerts    []alertCount // open alerts by severity, worst first; nil without Config.Glance
	HasGlance bool
	Status    resource.DeviceStatus
	Query     string
	Sort      cloud.DeviceSort
	OldestURL string // the same search oldest first, and worst first
	WorstURL  string
	Tag       string // the tag filter as typed back: the tags joined by ", "
	TagErr    string // why the tag filter matches nothing
	Devices   []fleetRow
	Matches   int
	From      int // 1-based index of the first row shown
	To        int
	PrevURL   string
	NextURL   string
}

// fleetPage is the fleet: the overview strip (open alerts by severity,
// devices by status), then the device table, each device at a glance, with
// a status filter, a tag filter, a search, a sort and paging.
func (s *Server) fleetPage(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	q := r.URL.Query()
	d := fleetData{Status: resource.DeviceStatus(strings.ToUpper(q.Get("status"))), Query: strings.TrimSpace(q.Get("q")), HasGlance: s.cfg.Glance != nil}
	if d.Status != "" && !d.Status.Valid() {
		d.Status = ""
	}
	if cloud.DeviceSort(q.Get("sort")) == cloud.SortWorst {
		d.Sort = cloud.SortWorst
	}
	if len(d.Query) > maxQueryLength {
		d.Query = d.Query[:maxQueryLength]
	}
	tags, tagErr := tagFilter(q["tag"])
	d.Tag, d.TagErr = strings.Join(tags, ", "), tagErr
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	summary, err := s.fleetSummary(ctx, rq.User.OrgID)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	link := func(status resource.DeviceStatus, sort cloud.DeviceSort, page int) string {
		v := url.Values{}
		if status != "" {
			v.Set("status", string(status))
		}
		if d.Query != "" {
			v.Set("q", d.Query)
		}
		if len(tags) > 0 {
			v.Set("tag", strings.Join(tags, ","))
		}
		if sort != cloud.SortDefault {
			v.Set("sort", string(sort))
		}
		if page > 1 {
			v.Set("page", strconv.Itoa(page))
		}
		if len(v) == 0 {
			return Prefix
		}
		return Prefix + "?" + v.Encode()
	}
	for _, st := range resource.DeviceStatuses {
		d.All += summary.Devices[st]
		d.Counts = append(d.Counts, statusCount{Status: st, N: summary.Devices[st], URL: link(st, d.Sort, 1), Active: st == d.Status})
	}
	if d.HasGlance {
		for _, sev := range slices.Backward(resource.Severities) {
			d.Alerts = append(d.Alerts, alertCount{Severity: sev, N: summary.OpenAlerts[sev], URL: "/panel/alerts?" + url.Values{"severity": {string(sev)}}.Encode()})
		}
	}
	d.AllURL = link("", d.Sort, 1)
	d.OldestURL, d.WorstURL = link(d.Status, cloud.SortDefault, 1), link(d.Status, cloud.SortWorst, 1)
	if d.TagErr != "" {
		s.render(w, r, rq, http.StatusOK, "fleet", "Fleet", d)
		return
	}
	res, err := s.cfg.Fleet.SearchDevices(ctx, rq.User.OrgID, cloud.DeviceSearch{Status: d.Status, Query: d.Query, Tags: tags, Sort: d.Sort,
		Offset: (page - 1) * FleetPageSize, Limit: FleetPageSize})
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	if d.Devices, err = s.fleetRows(ctx, rq.User.OrgID, res.Devices); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d.Matches = res.Total
	if len(d.Devices) > 0 {
		d.From = (page-1)*FleetPageSize + 1
		d.To = d.From + len(d.Devices) - 1
	}
	if page > 1 {
		d.PrevURL = link(d.Status, d.Sort, page-1)
	}
	if page*FleetPageSize < d.Matches {
		d.NextURL = link(d.Status, d.Sort, page+1)
	}
	s.render(w, r, rq, http.StatusOK, "fleet", "Fleet", d)
}

// fleetSummary is the overview strip's counts: from Config.Glance, or the
// devices by status alone without it.
func (s *Server) fleetSummary(ctx context.Context, orgID string) (cloud.FleetSummary, error) {
	if s.cfg.Glance != nil {
		return s.cfg.Glance.FleetSummary(ctx, orgID)
	}
	counts, err := s.cfg.Fleet.StatusCounts(ctx, orgID)
	return cloud.FleetSummary{Devices: counts}, err
}

// fleetRows are the table's rows of devs, each at a glance when
// Config.Glance is set.
func (s *Server) fleetRows(ctx context.Context, orgID string, devs []resource.Device) ([]fleetRow, error) {
	var glances map[string]cloud.DeviceGlance
	if s.cfg.Glance != nil && len(devs) > 0 {
		ids := make([]string, len(devs))
		for i, dev := range devs {
			ids[i] = dev.ID
		}
		var err error
		if glances, err = s.cfg.Glance.Glance(ctx, orgID, ids); err != nil {
			return nil, err
		}
	}
	now := s.now()
	rows := make([]fleetRow, len(devs))
	for i, dev := range devs {
		g, ok := glances[dev.ID]
		if !ok {
			g = cloud.DeviceGlance{ID: dev.ID, Status: dev.Status}
			if dev.LastSeen != nil {
				t := dev.LastSeen.Time
				g.LastSeen = &t
			}
		}
		dev.Status = g.Status
		rows[i] = fleetRow{Device: dev, Glance: g, Seen: "never", CPU: pct(g.CPU), Memory: pct(g.Memory), Disk: pct(g.Disk)}
		if g.LastSeen != nil {
			rows[i].SeenAt, rows[i].Seen = *g.LastSeen, tickAgo(now, *g.LastSeen)
		}
	}
	return rows, nil
}

// pct is a percentage as the fleet table shows it, rounded to a whole
// number as glance.js rounds it ("43%"), "—" for none.
func pct(v *float64) string {
	if v == nil {
		return "—"
	}
	return strconv.Itoa(int(math.Round(*v))) + "%"
}

// tickAgo says how long before now t was as glance.js ticks it: seconds
// under a minute ("12 s ago"), then as ago does.
func tickAgo(now, t time.Time) string {
	if d := now.Sub(t); d < time.Minute {
		return fmt.Sprintf("%d s ago", int(max(d, 0)/time.Second))
	}
	return ago(now, t)
}

// tagFilter reads the fleet page's tag filter: the values of ?tag=,
// repeatable, each comma-separated; sorted, without duplicates. An error
// says which one is not a tag (or that there are too many), for the field.
func tagFilter(values []string) ([]string, string) {
	var tags []string
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if t = strings.ToLower(strings.TrimSpace(t)); t != "" {
				tags = append(tags, t)
			}
		}
		if len(tags) > cloud.MaxDeviceTags {
			return tags[:cloud.MaxDeviceTags], fmt.Sprintf("At most %d tags.", cloud.MaxDeviceTags)
		}
	}
	tags = slices.Compact(slices.Sorted(slices.Values(tags)))
	for _, t := range tags {
		if !cloud.TagPattern.MatchString(t) {
			return tags, fmt.Sprintf("%q is not a tag: lowercase letters, digits and _.:- , at most 32.", clipTag(t))
		}
	}
	return tags, ""
}

// clipTag shortens a mistyped tag for its error message.
func clipTag(t string) string {
	if r := []rune(t); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return t
}

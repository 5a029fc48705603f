package panel

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

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

type fleetData struct {
	Counts  []statusCount
	All     int
	AllURL  string
	Status  resource.DeviceStatus
	Query   string
	Tag     string // the tag filter as typed back: the tags joined by ", "
	TagErr  string // why the tag filter matches nothing
	Devices []resource.Device
	Matches int
	From    int // 1-based index of the first row shown
	To      int
	PrevURL string
	NextURL string
}

// fleetPage is the fleet: counts by status, then the device table with a
// status filter, a tag filter, a search and paging.
func (s *Server) fleetPage(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	q := r.URL.Query()
	d := fleetData{Status: resource.DeviceStatus(strings.ToUpper(q.Get("status"))), Query: strings.TrimSpace(q.Get("q"))}
	if d.Status != "" && !d.Status.Valid() {
		d.Status = ""
	}
	if len(d.Query) > maxQueryLength {
		d.Query = d.Query[:maxQueryLength]
	}
	tags, tagErr := tagFilter(q["tag"])
	d.Tag, d.TagErr = strings.Join(tags, ", "), tagErr
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	counts, err := s.cfg.Fleet.StatusCounts(ctx, rq.User.OrgID)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	link := func(status resource.DeviceStatus, query string, page int) string {
		v := url.Values{}
		if status != "" {
			v.Set("status", string(status))
		}
		if query != "" {
			v.Set("q", query)
		}
		if len(tags) > 0 {
			v.Set("tag", strings.Join(tags, ","))
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
		d.All += counts[st]
		d.Counts = append(d.Counts, statusCount{Status: st, N: counts[st], URL: link(st, d.Query, 1), Active: st == d.Status})
	}
	d.AllURL = link("", d.Query, 1)
	if d.TagErr != "" {
		s.render(w, r, rq, http.StatusOK, "fleet", "Fleet", d)
		return
	}
	res, err := s.cfg.Fleet.SearchDevices(ctx, rq.User.OrgID, cloud.DeviceSearch{Status: d.Status, Query: d.Query, Tags: tags, Offset: (page - 1) * FleetPageSize, Limit: FleetPageSize})
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d.Devices, d.Matches = res.Devices, res.Total
	if len(d.Devices) > 0 {
		d.From = (page-1)*FleetPageSize + 1
		d.To = d.From + len(d.Devices) - 1
	}
	if page > 1 {
		d.PrevURL = link(d.Status, d.Query, page-1)
	}
	if page*FleetPageSize < d.Matches {
		d.NextURL = link(d.Status, d.Query, page+1)
	}
	s.render(w, r, rq, http.StatusOK, "fleet", "Fleet", d)
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

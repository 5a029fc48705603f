package panel

import (
	"net/http"
	"net/url"
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
	Devices []resource.Device
	Matches int
	From    int // 1-based index of the first row shown
	To      int
	PrevURL string
	NextURL string
}

// fleetPage is the fleet: counts by status, then the device table with a
// status filter, a search and paging.
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
	res, err := s.cfg.Fleet.SearchDevices(ctx, rq.User.OrgID, cloud.DeviceSearch{Status: d.Status, Query: d.Query, Offset: (page - 1) * FleetPageSize, Limit: FleetPageSize})
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

package panel

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// Points on the device page and a point's chart page (DESIGN.md "Points",
// docs/panel.md): the list refreshes itself through htmx like the channel
// table; a point's chart is drawn by panel.js from `step` buckets of the
// chosen range; the CSV route answers the same rows as the API's
// `Accept: text/csv`.

// pointRanges are the chart page's ranges, smallest first, each with the
// bucket width that gives it 600-800 buckets. Without one in the URL the
// page opens on the smallest that holds the point's first sample
// (defaultPointRange).
var pointRanges = []struct {
	Name, Label string
	D, Step     time.Duration
}{
	{"1h", "1 h", time.Hour, 5 * time.Second},
	{"24h", "24 h", 24 * time.Hour, 2 * time.Minute},
	{"7d", "7 d", 7 * 24 * time.Hour, 15 * time.Minute},
}

// maxPointBuckets bounds one chart's buckets (a range holds at most 721).
const maxPointBuckets = 1000

// maxRawCSV is how many raw samples the raw CSV holds: the API's largest
// page, the newest when the range has more.
const maxRawCSV = 10000

// pointRow is a point as the list shows it, every part already text.
type pointRow struct {
	ID, Name, ChannelID, Type, Unit string
	Value                           string // "—" without a good reading; "on"/"off" for bool
	Quality                         string // good, bad, stale
	Error                           string
	At                              time.Time // zero: never read
	Age                             string    // "3 s ago"
	URL                             string
}

// pointsData is the points fragment: the list, or why there is none.
type pointsData struct {
	DeviceID string
	Points   []pointRow
	Note     string // the model has no serial I/O
}

// pointRows turns the store's points into rows seen at now.
func pointRows(deviceID string, pts []resource.Point, now time.Time) []pointRow {
	base := "/panel/devices/" + url.PathEscape(deviceID) + "/points/"
	rows := make([]pointRow, len(pts))
	for i, p := range pts {
		r := pointRow{ID: p.ID, Name: p.Name, ChannelID: p.ChannelID, Type: p.Type, Unit: p.Unit,
			Value: pointValue(p.Value, p.Type), Quality: p.Quality, Error: p.Error, Age: "never", URL: base + url.PathEscape(p.ID)}
		if p.At != nil && !p.At.IsZero() {
			r.At = p.At.Time
			r.Age = ago(now, p.At.Time)
		}
		rows[i] = r
	}
	return rows
}

// points reads the device's points for the device page and the fragment.
// A model without serial I/O has none, and says so.
func (s *Server) points(ctx context.Context, org string, dev resource.DeviceDetail) (pointsData, error) {
	d := pointsData{DeviceID: dev.ID}
	if s.cfg.Points == nil {
		return d, nil
	}
	now := s.now()
	pts, err := s.cfg.Points.Points(ctx, org, dev.ID, now)
	switch {
	case cloud.ErrorCode(err) == cloud.ECAPABILITY:
		d.Note = "The " + dev.Model + " has no serial I/O port, so it has no points."
		return d, nil
	case err != nil:
		return d, err
	}
	d.Points = pointRows(dev.ID, pts, now)
	return d, nil
}

// pointsFragment is the points list alone; htmx replaces it every few
// seconds.
func (s *Server) pointsFragment(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	dev, err := s.cfg.Devices.Device(ctx, rq.User.OrgID, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d, err := s.points(ctx, rq.User.OrgID, dev)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.renderPart(w, "device", "points", d)
}

// pointValue is a point's value as text: "on"/"off" for a bool (a gpio
// level, a coil), a number without float noise, "—" without a reading.
func pointValue(v any, typ string) string {
	var f float64
	switch v := v.(type) {
	case nil:
		return "—"
	case bool:
		if v {
			return "on"
		}
		return "off"
	case float64:
		f = v
	case float32:
		f = float64(v)
	case int:
		f = float64(v)
	case int64:
		f = float64(v)
	case uint64:
		return strconv.FormatUint(v, 10)
	case json.Number:
		if typ == "bool" {
			return pointValue(v.String() != "0", typ)
		}
		return v.String()
	default:
		return fmt.Sprint(v)
	}
	if typ == "bool" {
		return pointValue(f != 0, typ)
	}
	return formatNumber(f)
}

// formatNumber writes f as people read a measurement: whole numbers in
// full, others to float32's precision (an f32 register's 21.3 is not
// 21.299999237060547).
func formatNumber(f float64) string {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return strconv.FormatFloat(f, 'g', -1, 64)
	case f == math.Trunc(f) && math.Abs(f) < 1e15:
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', 7, 64)
}

// pointData is the chart page of one point.
type pointData struct {
	Device    resource.DeviceDetail
	Point     pointRow
	Ranges    []pointRangeLink
	Range     string
	Label     string // the range as people read it, "24 h"
	Step      time.Duration
	StepLabel string // "2 min"
	Buckets   int
	Chart     string // chart data, JSON (see pointChartJSON)
	ChartURL  string // the chart data's route, for buckets since the last (panel.js)
	From, To  int64  // the chart's window, Unix seconds
	CSV       string // the buckets as CSV
	RawCSV    string // the raw samples as CSV
}

type pointRangeLink struct {
	Name, Label, URL string
	Active           bool
}

// pointRange returns the range named name, or the largest.
func pointRange(name string) (string, string, time.Duration, time.Duration) {
	for _, pr := range pointRanges {
		if pr.Name == name {
			return pr.Name, pr.Label, pr.D, pr.Step
		}
	}
	pr := pointRanges[len(pointRanges)-1]
	return pr.Name, pr.Label, pr.D, pr.Step
}

// defaultPointRange names the smallest range that holds the point's first
// sample (the largest when none does; 1h for a point without samples),
// reading at most one sample per range passed over.
func (s *Server) defaultPointRange(ctx context.Context, org, devID, pointID string) (string, error) {
	now := s.now().UTC()
	for _, pr := range pointRanges[:len(pointRanges)-1] {
		older, err := s.cfg.Points.PointSamples(ctx, org, devID, pointID, cloud.PointQuery{From: firstSampleTime, To: now.Add(-pr.D - time.Millisecond), Limit: 1})
		if err != nil {
			return "", err
		}
		if len(older.Raw) == 0 {
			return pr.Name, nil
		}
	}
	return pointRanges[len(pointRanges)-1].Name, nil
}

// point finds one point of the device; an unknown one is ENOTFOUND.
func (s *Server) point(ctx context.Context, org, devID, pointID string) (resource.DeviceDetail, pointRow, error) {
	dev, err := s.cfg.Devices.Device(ctx, org, devID)
	if err != nil {
		return dev, pointRow{}, err
	}
	pd, err := s.points(ctx, org, dev)
	if err != nil {
		return dev, pointRow{}, err
	}
	for _, p := range pd.Points {
		if p.ID == pointID {
			return dev, p, nil
		}
	}
	return dev, pointRow{}, cloud.Errorf(cloud.ENOTFOUND, "no point %q", pointID)
}

// pointPage shows one point: its latest state and a chart of the chosen
// range's buckets (min/max band, average line), with CSV downloads.
func (s *Server) pointPage(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	org := rq.User.OrgID
	dev, p, err := s.point(ctx, org, r.PathValue("id"), r.PathValue("point"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d := &pointData{Device: dev, Point: p}
	name := r.URL.Query().Get("range")
	if n, _, _, _ := pointRange(name); n != name {
		if name, err = s.defaultPointRange(ctx, org, dev.ID, p.ID); err != nil {
			s.fail(w, r, rq, err)
			return
		}
	}
	var span time.Duration
	d.Range, d.Label, span, d.Step = pointRange(name)
	d.StepLabel = stepLabel(d.Step)
	for _, pr := range pointRanges {
		v := url.Values{"range": {pr.Name}}
		d.Ranges = append(d.Ranges, pointRangeLink{Name: pr.Name, Label: pr.Label, URL: p.URL + "?" + v.Encode() + "#chart", Active: pr.Name == d.Range})
	}
	to := s.now().UTC()
	from := to.Add(-span)
	series, err := s.cfg.Points.PointSamples(ctx, org, dev.ID, p.ID, cloud.PointQuery{From: from, To: to, Step: d.Step, Limit: maxPointBuckets})
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d.From, d.To = from.Unix(), to.Unix()
	d.Buckets = len(series.Buckets)
	d.Chart = pointChartJSON(series.Buckets, d.Step)
	v := url.Values{"range": {d.Range}}
	d.ChartURL = p.URL + "/chart.json?" + v.Encode()
	d.CSV = p.URL + "/samples.csv?" + v.Encode()
	v.Set("raw", "1")
	d.RawCSV = p.URL + "/samples.csv?" + v.Encode()
	s.render(w, r, rq, http.StatusOK, "point", p.Name+" · "+dev.Name, d)
}

// pointChartData answers a point's chart data as JSON for panel.js's live
// updates: {"from": s, "to": s, "chart": pointChartJSON} of the buckets of
// the range (?range=, the largest when unknown) from the bucket holding
// ?since= (Unix seconds, the chart's last bucket, which may have grown)
// on. since is bounded by the range: an older one, or none, reads the
// whole range.
func (s *Server) pointChartData(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	org := rq.User.OrgID
	dev, p, err := s.point(ctx, org, r.PathValue("id"), r.PathValue("point"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	_, _, span, step := pointRange(r.URL.Query().Get("range"))
	q := cloud.PointQuery{To: s.now().UTC(), Step: step, Limit: maxPointBuckets}
	q.From = q.To.Add(-span)
	start := q.From
	if since, ok := parseSince(r.URL.Query().Get("since")); ok && since.After(q.From) {
		ms, st := since.UnixMilli(), step.Milliseconds()
		q.From = time.UnixMilli(ms - ms%st).UTC() // buckets are multiples of step since the epoch
	}
	if q.From.After(q.To) {
		q.From = q.To
	}
	series, err := s.cfg.Points.PointSamples(ctx, org, dev.ID, p.ID, q)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	b := make([]byte, 0, 64+len(series.Buckets)*4*12)
	b = append(b, `{"from":`...)
	b = strconv.AppendInt(b, start.Unix(), 10)
	b = append(b, `,"to":`...)
	b = strconv.AppendInt(b, q.To.Unix(), 10)
	b = append(b, `,"chart":`...)
	b = append(b, pointChartJSON(series.Buckets, step)...)
	writeChartJSON(w, append(b, '}'))
}

// stepLabel is a bucket width as people read it: "5 s", "15 min".
func stepLabel(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(d/time.Second))
	}
	return fmt.Sprintf("%d min", int(d/time.Minute))
}

// pointChartJSON is the chart data panel.js reads: {"t":[unix seconds],
// "min":[...], "max":[...], "avg":[...]}, a null in every series where
// buckets are missing (uPlot breaks the lines there), written without
// reflection.
func pointChartJSON(buckets []resource.PointBucket, step time.Duration) string {
	b := make([]byte, 0, 32+len(buckets)*4*12)
	type col struct {
		name string
		get  func(*resource.PointBucket) float64
	}
	cols := []col{
		{"min", func(p *resource.PointBucket) float64 { return p.Min }},
		{"max", func(p *resource.PointBucket) float64 { return p.Max }},
		{"avg", func(p *resource.PointBucket) float64 { return p.Avg }},
	}
	// gap reports whether a bucket is missing before buckets[i].
	gap := func(i int) bool {
		return i > 0 && buckets[i].At.Sub(buckets[i-1].At.Time) > step
	}
	b = append(b, `{"t":[`...)
	for i := range buckets {
		if i > 0 {
			b = append(b, ',')
		}
		if gap(i) {
			b = strconv.AppendInt(b, buckets[i-1].At.Add(step).Unix(), 10)
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, buckets[i].At.Unix(), 10)
	}
	b = append(b, ']')
	for _, c := range cols {
		b = append(b, `,"`...)
		b = append(b, c.name...)
		b = append(b, `":[`...)
		for i := range buckets {
			if i > 0 {
				b = append(b, ',')
			}
			if gap(i) {
				b = append(b, "null,"...)
			}
			b = appendJSONNumber(b, c.get(&buckets[i]))
		}
		b = append(b, ']')
	}
	return string(append(b, '}'))
}

// appendJSONNumber appends f, or null for what JSON cannot hold.
func appendJSONNumber(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// pointCSV downloads the chosen range of a point as CSV: the chart's
// buckets (at,min,max,avg,last,count) or, with raw=1, the raw samples
// (at,value; the newest 10,000), the API's columns.
func (s *Server) pointCSV(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	org := rq.User.OrgID
	dev, p, err := s.point(ctx, org, r.PathValue("id"), r.PathValue("point"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	name, _, span, step := pointRange(r.URL.Query().Get("range"))
	raw := r.URL.Query().Get("raw") == "1"
	q := cloud.PointQuery{To: s.now().UTC(), Step: step, Limit: maxPointBuckets}
	q.From = q.To.Add(-span)
	if raw {
		q.Step, q.Limit = 0, maxRawCSV
	}
	series, err := s.cfg.Points.PointSamples(ctx, org, dev.ID, p.ID, q)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	kind := "buckets"
	if raw {
		kind = "raw"
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", p.ID+"-"+name+"-"+kind+".csv"))
	cw := csv.NewWriter(w)
	at := func(t resource.Time) string { return resource.FormatTime(t.Time) }
	if raw {
		cw.Write([]string{"at", "value"})
		for _, smp := range series.Raw {
			cw.Write([]string{at(smp.At), csvValue(smp.Value)})
		}
	} else {
		cw.Write([]string{"at", "min", "max", "avg", "last", "count"})
		for _, bk := range series.Buckets {
			cw.Write([]string{at(bk.At), csvValue(bk.Min), csvValue(bk.Max), csvValue(bk.Avg), csvValue(bk.Last), strconv.Itoa(bk.Count)})
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil && ctx.Err() == nil {
		s.log.Warn("point CSV cut short", "point", p.ID, "err", err)
	}
}

// csvValue is a value in CSV as the API writes it: as JSON writes it (a
// number, true or false), empty for a bad reading or what JSON cannot hold.
func csvValue(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

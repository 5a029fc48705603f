package api

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// Points (DESIGN.md "Points"): GET /devices/{id}/points lists a device's
// points with their latest state; GET /devices/{id}/points/{pointId}/samples
// answers a point's history, raw or in `step` buckets, as JSON or (Accept:
// text/csv) CSV. A raw page is up to 10,000 samples: it is encoded by hand
// (appendPointSamples) into a pooled buffer, byte for byte what
// encoding/json writes.

// Limits of the samples route.
const pointSamplesDefault, pointSamplesMax = 1000, 10000

// Content types of the samples route's answers.
const (
	contentJSON = "application/json"
	contentCSV  = "text/csv; charset=utf-8"
)

func (s *Server) listPoints(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	return getOfDevice(s, w, r, key, func(ctx context.Context, orgID, deviceID string) ([]resource.Point, error) {
		return s.cfg.Points.Points(ctx, orgID, deviceID, s.now())
	}, func(l *[]resource.Point) { *l = nonNil(*l) })
}

// getPointSamples answers the samples route. Order of checks: the device id
// and the point id's shape (404), the query (400 naming the parameter),
// then the store: 404 device, 409 capability_unavailable, 404 point.
func (s *Server) getPointSamples(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	p := params{r: r}
	id, pointID := p.pathID("device"), p.pointID()
	p.query("from", "to", "limit", "step")
	var q cloud.PointQuery
	q.From, q.To = p.metricsWindow(s.now())
	q.Limit = p.limit(pointSamplesDefault, pointSamplesMax)
	q.Step = p.step()
	if p.err != nil {
		return p.err
	}
	series, err := s.cfg.Points.PointSamples(r.Context(), key.OrgID, id, pointID, q)
	if err != nil {
		return err
	}
	w.Header().Add("Vary", "Accept")
	if wantsCSV(r.Header.Values("Accept")) {
		return s.writeAppendedAs(w, r, contentCSV, func(b []byte) ([]byte, error) { return appendPointCSV(b, q.Step != 0, &series) })
	}
	return s.writeAppendedAs(w, r, contentJSON, func(b []byte) ([]byte, error) {
		if q.Step != 0 {
			return appendPointBuckets(b, series.Buckets, &series.Window), nil
		}
		return appendPointSamples(b, series.Raw, &series.Window)
	})
}

// wantsCSV reports whether the Accept header values ask for text/csv over
// JSON: text/csv listed with a q above 0 and above application/json's (a
// tie goes to the one listed first). Anything else is answered with JSON,
// the default.
func wantsCSV(accept []string) bool {
	csvQ, jsonQ := -1.0, -1.0
	first := ""
	for _, h := range accept {
		for part := range strings.SplitSeq(h, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f <= 1 {
					q = f
				}
			}
			switch mt {
			case "text/csv":
				csvQ = max(csvQ, q)
			case "application/json":
				jsonQ = max(jsonQ, q)
			default:
				continue
			}
			if first == "" {
				first = mt
			}
		}
	}
	switch {
	case csvQ <= 0:
		return false
	case csvQ != jsonQ:
		return csvQ > jsonQ
	}
	return first == "text/csv"
}

// appendPointSamples appends {"data":[{"at","value"}...],"window":{...}}
// and a newline.
func appendPointSamples(b []byte, data []resource.PointSample, win *resource.Window) ([]byte, error) {
	var ta timeAppender
	b = append(b, `{"data":[`...)
	for i := range data {
		if i > 0 {
			b = append(b, ',')
		}
		b = ta.appendTime(append(b, `{"at":`...), data[i].At)
		b = append(b, `,"value":`...)
		var err error
		if b, err = appendPointValue(b, data[i].Value); err != nil {
			return b, err
		}
		b = append(b, '}')
	}
	return appendWindow(b, win), nil
}

// appendPointBuckets appends {"data":[{"at","min","max","avg","last",
// "count"}...],"window":{...}} and a newline.
func appendPointBuckets(b []byte, data []resource.PointBucket, win *resource.Window) []byte {
	var ta timeAppender
	b = append(b, `{"data":[`...)
	for i := range data {
		k := &data[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = ta.appendTime(append(b, `{"at":`...), k.At)
		b = appendFloat(append(b, `,"min":`...), k.Min)
		b = appendFloat(append(b, `,"max":`...), k.Max)
		b = appendFloat(append(b, `,"avg":`...), k.Avg)
		b = appendFloat(append(b, `,"last":`...), k.Last)
		b = strconv.AppendInt(append(b, `,"count":`...), int64(k.Count), 10)
		b = append(b, '}')
	}
	return appendWindow(b, win)
}

func appendWindow(b []byte, win *resource.Window) []byte {
	b = appendTimeField(b, `],"window":{"from":`, win.From)
	b = appendTimeField(b, `,"to":`, win.To)
	return append(b, "}}\n"...)
}

// appendPointValue appends a sample's value: a number, true or false, or
// null (a bad reading). Other types, which the stores do not make, are
// encoded by encoding/json.
func appendPointValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case float64:
		return appendFloat(b, v), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	}
	j, err := json.Marshal(v)
	return append(b, j...), err
}

// appendFloat appends f as encoding/json does (the shortest representation
// that reads back the same; exponent form below 1e-6 and from 1e21). A
// value JSON cannot carry (NaN, ±Inf: a float register can hold them) is
// null.
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendPointCSV appends the rows of series as CSV (RFC 4180, by
// encoding/csv) with a header line: "at,value" (raw; a bool as true or
// false, a bad reading empty) or "at,min,max,avg,last,count" (buckets).
// Numbers are written as in JSON.
func appendPointCSV(b []byte, buckets bool, series *cloud.PointSeries) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	cw := csv.NewWriter(buf)
	var num []byte
	var ta timeAppender
	at := func(t resource.Time) string {
		num = ta.appendBare(num[:0], t)
		return string(num)
	}
	// text is num as a CSV field: JSON's null is an empty field.
	text := func() string {
		if string(num) == "null" {
			return ""
		}
		return string(num)
	}
	field := func(f float64) string {
		num = appendFloat(num[:0], f)
		return text()
	}
	if buckets {
		_ = cw.Write([]string{"at", "min", "max", "avg", "last", "count"})
		for i := range series.Buckets {
			k := &series.Buckets[i]
			_ = cw.Write([]string{at(k.At), field(k.Min), field(k.Max), field(k.Avg), field(k.Last), strconv.Itoa(k.Count)})
		}
	} else {
		_ = cw.Write([]string{"at", "value"})
		for i := range series.Raw {
			var err error
			if num, err = appendPointValue(num[:0], series.Raw[i].Value); err != nil {
				return b, err
			}
			val := text() // before at reuses num
			_ = cw.Write([]string{at(series.Raw[i].At), val})
		}
	}
	cw.Flush()
	return buf.Bytes(), cw.Error()
}

// timeAppender appends timestamps as resource.TimeLayout does, for the long
// runs of one point's samples: the date part is formatted once per day
// and the time of day from the Unix milliseconds by arithmetic (time's
// AppendFormat was three quarters of a raw page's encoding).
type timeAppender struct {
	day  int64 // days since the Unix epoch of date; valid when ok
	ok   bool
	date [11]byte // "2006-01-02T"
}

const msPerDay = 24 * 60 * 60 * 1000

// appendTime appends t quoted, as appendTime (the package function) does.
func (a *timeAppender) appendTime(b []byte, t resource.Time) []byte {
	b = append(b, '"')
	b = a.appendBare(b, t)
	return append(b, '"')
}

// appendBare appends t in resource.TimeLayout, unquoted.
func (a *timeAppender) appendBare(b []byte, t resource.Time) []byte {
	ms := t.UnixMilli()
	day, rem := ms/msPerDay, ms%msPerDay
	if rem < 0 {
		day, rem = day-1, rem+msPerDay
	}
	if !a.ok || day != a.day {
		time.UnixMilli(day*msPerDay).UTC().AppendFormat(a.date[:0], "2006-01-02T")
		a.day, a.ok = day, true
	}
	b = append(b, a.date[:]...)
	h, m, s, frac := rem/3_600_000, rem/60_000%60, rem/1000%60, rem%1000
	return append(b, byte('0'+h/10), byte('0'+h%10), ':', byte('0'+m/10), byte('0'+m%10), ':', byte('0'+s/10), byte('0'+s%10), '.',
		byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10), 'Z')
}

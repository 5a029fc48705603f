package panel

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/resource"
)

// Chart ranges of the device page, smallest first. Without one in the URL
// the page opens on the smallest that holds the device's first sample
// (defaultChartRange).
var chartRanges = []struct {
	Name, Label string
	D           time.Duration
}{{"1h", "1 h", time.Hour}, {"24h", "24 h", 24 * time.Hour}, {"7d", "7 d", 7 * 24 * time.Hour}}

// firstSampleTime is before any sample a relay stores (the agent link
// refuses times before 2020).
var firstSampleTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// metricsBatch is how many samples one store call returns (the store's
// bound); a 7-day chart takes a few calls.
const metricsBatch = 1000

// maxChartSamples bounds one chart's samples (a week at one a minute).
const maxChartSamples = 7 * 24 * 60

// eventsPageSize is the number of events per page of the device page.
const eventsPageSize = 50

// chartSeries are the device page's charts, one per metric.
var chartSeries = [...]struct{ Name, Caption string }{
	{"cpuPct", "CPU (%)"},
	{"memPct", "Memory (%)"},
	{"diskUsedPct", "Disk used (%)"},
	{"tempCpu", "CPU temperature (°C)"},
	{"loadAvg1", "Load average, 1 min"},
}

// chartFigure is one chart of the device page. Note, when set, stands in
// for the plot: "No samples yet", or "No sensor" (NoSensor: no sample of
// the range has a sensor for the metric).
type chartFigure struct {
	Name, Caption, Note string
	NoSensor            bool
}

type rangeLink struct {
	Name, URL string
	Active    bool
}

type deviceData struct {
	Device     resource.DeviceDetail
	Edit       deviceForm
	Ranges     []rangeLink
	Range      string
	RangeLabel string // "24 h"
	Metrics    string // chart data, JSON (see metricsJSON)
	MetricsURL string // the chart data's route, for samples since the last (panel.js)
	Samples    int
	Charts     []chartFigure
	From, To   int64 // the charts' window, Unix seconds

	Events         []resource.Event
	EventType      string
	EventSeverity  resource.Severity
	Severities     []resource.Severity
	OlderEventsURL string
	EventsURL      string

	Points pointsData

	// Serial is nil for a model without serial I/O (SerialNote says so).
	Serial     *resource.SerialState
	SerialNote string
	SerialForm serialForm
	Forms      []channelForm

	// CanReboot: the relay offers "Reboot" (Config.Rollouts); RebootError
	// says why a reboot was refused.
	CanReboot   bool
	RebootError string
}

// devicePage shows one device: details, charts, events, channels and their
// configuration, mode and forwarding. Another organization's device is 404.
func (s *Server) devicePage(w http.ResponseWriter, r *http.Request, rq *request) {
	d, err := s.deviceData(r.Context(), rq, r.PathValue("id"), r.URL.Query())
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.render(w, r, rq, http.StatusOK, "device", d.Device.Name, d)
}

func (s *Server) deviceData(ctx context.Context, rq *request, id string, q url.Values) (*deviceData, error) {
	org := rq.User.OrgID
	dev, err := s.cfg.Devices.Device(ctx, org, id)
	if err != nil {
		return nil, err
	}
	d := &deviceData{Device: dev, Edit: newDeviceForm(dev), Range: q.Get("range"), Severities: resource.Severities, CanReboot: s.cfg.Rollouts != nil}
	base := "/panel/devices/" + url.PathEscape(dev.ID)
	span, label := chartRange(d.Range)
	if span == 0 {
		if d.Range, err = s.defaultChartRange(ctx, org, dev.ID); err != nil {
			return nil, err
		}
		span, label = chartRange(d.Range)
	}
	d.RangeLabel = label
	for _, cr := range chartRanges {
		v := cloneValues(q)
		v.Set("range", cr.Name)
		d.Ranges = append(d.Ranges, rangeLink{Name: cr.Name, URL: base + "?" + v.Encode() + "#charts", Active: cr.Name == d.Range})
	}
	now := s.now().UTC()
	d.To = now.Unix()
	d.From = d.To - int64(span/time.Second)
	samples, err := s.samples(ctx, org, dev.ID, now.Add(-span), now)
	if err != nil {
		return nil, err
	}
	d.Samples = len(samples)
	d.Metrics = metricsJSON(samples)
	d.MetricsURL = base + "/metrics.json?" + url.Values{"range": {d.Range}}.Encode()
	ns := noSensor(samples)
	for _, c := range chartSeries {
		f := chartFigure{Name: c.Name, Caption: c.Caption + ", last " + label, NoSensor: ns[c.Name]}
		switch {
		case len(samples) == 0:
			f.Note = "No samples yet"
		case f.NoSensor:
			f.Note = "No sensor"
		}
		d.Charts = append(d.Charts, f)
	}

	d.EventType = strings.TrimSpace(q.Get("type"))
	if len(d.EventType) > 100 {
		d.EventType = d.EventType[:100]
	}
	if sev := resource.Severity(strings.ToUpper(q.Get("severity"))); sev.Valid() {
		d.EventSeverity = sev
	}
	cursor := q.Get("before")
	events, err := s.cfg.Devices.Events(ctx, org, dev.ID, cloud.EventFilter{Page: cloud.Page{Limit: eventsPageSize, Cursor: cursor}, Type: d.EventType, Severity: d.EventSeverity})
	if cloud.ErrorCode(err) == cloud.ECURSOR {
		events, err = s.cfg.Devices.Events(ctx, org, dev.ID, cloud.EventFilter{Page: cloud.Page{Limit: eventsPageSize}, Type: d.EventType, Severity: d.EventSeverity})
	}
	if err != nil {
		return nil, err
	}
	d.Events = events.Data
	if events.Pagination.HasMore {
		v := cloneValues(q)
		v.Set("before", *events.Pagination.NextCursor)
		d.OlderEventsURL = base + "?" + v.Encode() + "#events"
	}
	if cursor != "" {
		v := cloneValues(q)
		v.Del("before")
		d.EventsURL = base + "?" + v.Encode() + "#events"
	}

	if d.Points, err = s.points(ctx, org, dev); err != nil {
		// The rest of the page is still worth showing.
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		s.log.Error("panel: points of a device could not be read", "device", dev.ID, "err", err)
		d.Points.Note = "The points could not be read; it has been logged."
	}

	st, err := s.cfg.Serial.Serial(ctx, org, dev.ID)
	switch {
	case cloud.ErrorCode(err) == cloud.ECAPABILITY:
		d.SerialNote = "The " + dev.Model + " has no serial I/O port."
	case err != nil:
		return nil, err
	default:
		d.Serial = &st
		d.SerialForm = newSerialForm(st)
		for _, ch := range st.Channels {
			if ch.Configurable {
				f := newChannelForm(ch)
				f.Action, f.Editable = base+"/channels/"+url.PathEscape(ch.ID), rq.User.Role.Can(cloud.PermConfigure)
				if f.DBC != nil {
					f.DBC.Action = base + "/channels/" + url.PathEscape(ch.ID) + "/dbc"
				}
				d.Forms = append(d.Forms, f)
			}
		}
	}
	return d, nil
}

func cloneValues(q url.Values) url.Values {
	v := url.Values{}
	for k, vs := range q {
		v[k] = append([]string(nil), vs...)
	}
	return v
}

// chartRange returns the span and label of the chart range named name, 0
// for an unknown one.
func chartRange(name string) (time.Duration, string) {
	for _, cr := range chartRanges {
		if cr.Name == name {
			return cr.D, cr.Label
		}
	}
	return 0, ""
}

// defaultChartRange names the smallest chart range that holds the device's
// first sample, the largest when none does: a new device (no samples, or
// all of the last hour) opens on 1h, one with three days of data on 7d.
// It reads at most one sample per range passed over.
func (s *Server) defaultChartRange(ctx context.Context, org, id string) (string, error) {
	now := s.now().UTC()
	for _, cr := range chartRanges[:len(chartRanges)-1] {
		older, err := s.cfg.Devices.Metrics(ctx, org, id, cloud.MetricsQuery{From: firstSampleTime, To: now.Add(-cr.D - time.Millisecond), Limit: 1})
		if err != nil {
			return "", err
		}
		if len(older.Data) == 0 {
			return cr.Name, nil
		}
	}
	return chartRanges[len(chartRanges)-1].Name, nil
}

// noSensor returns the metrics that no sample of samples has a sensor for
// (each sample lists it as missing), nil without samples: their charts say
// "No sensor" instead of drawing a line at 0.
func noSensor(samples []resource.MetricSample) map[string]bool {
	if len(samples) == 0 || len(samples[0].Missing) == 0 {
		return nil
	}
	out := map[string]bool{}
	for _, name := range samples[0].Missing {
		out[name] = true
	}
	for i := range samples[1:] {
		for name := range out {
			if !samples[i+1].Lacks(name) {
				delete(out, name)
			}
		}
	}
	return out
}

// samples returns the device's samples in [from, to], oldest first,
// reading the store in batches of its largest page, at most
// maxChartSamples (the newest).
func (s *Server) samples(ctx context.Context, org, id string, from, to time.Time) ([]resource.MetricSample, error) {
	var batches [][]resource.MetricSample
	n := 0
	for n < maxChartSamples {
		res, err := s.cfg.Devices.Metrics(ctx, org, id, cloud.MetricsQuery{From: from, To: to, Limit: metricsBatch})
		if err != nil {
			return nil, err
		}
		batches = append(batches, res.Data)
		n += len(res.Data)
		if len(res.Data) < metricsBatch {
			break
		}
		to = res.Data[0].CapturedAt.Time.Add(-time.Millisecond)
		if to.Before(from) {
			break
		}
	}
	out := make([]resource.MetricSample, 0, n)
	for i := len(batches) - 1; i >= 0; i-- {
		out = append(out, batches[i]...)
	}
	return out, nil
}

// metricsData answers the device page's chart data as JSON for panel.js's
// live updates: {"from": s, "to": s, "metrics": metricsJSON} of the samples
// of the range (?range=, the largest when unknown) newer than ?since= (Unix
// seconds, the chart's last sample), so a live chart fetches only what it
// lacks. since is bounded by the range: an older one, or none, reads the
// whole range.
func (s *Server) metricsData(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	org := rq.User.OrgID
	dev, err := s.cfg.Devices.Device(ctx, org, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	q := r.URL.Query()
	span, _ := chartRange(q.Get("range"))
	if span == 0 {
		span = chartRanges[len(chartRanges)-1].D
	}
	now := s.now().UTC()
	from := now.Add(-span)
	if since, ok := parseSince(q.Get("since")); ok && since.After(from) {
		from = since.Add(time.Millisecond) // samples are stored to the millisecond
	}
	if from.After(now) {
		from = now
	}
	samples, err := s.samples(ctx, org, dev.ID, from, now)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	b := make([]byte, 0, 64+len(samples)*6*8)
	b = append(b, `{"from":`...)
	b = strconv.AppendInt(b, now.Add(-span).Unix(), 10)
	b = append(b, `,"to":`...)
	b = strconv.AppendInt(b, now.Unix(), 10)
	b = append(b, `,"metrics":`...)
	b = append(b, metricsJSON(samples)...)
	writeChartJSON(w, append(b, '}'))
}

// parseSince reads a since parameter, Unix seconds with up to millisecond
// fractions ("1764226800.125"); false for none or nonsense.
func parseSince(v string) (time.Time, bool) {
	if v == "" || len(v) > 32 {
		return time.Time{}, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > 1e11 {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(math.Round(f * 1000))).UTC(), true
}

// writeChartJSON answers chart data, never cached.
func writeChartJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

// metricsJSON is the chart data panel.js reads: {"t":[unix seconds...],
// "cpuPct":[...], "memPct":[...], "diskUsedPct":[...], "tempCpu":[...],
// "loadAvg1":[...]}, null where a sample's host has no sensor for the
// metric, written without reflection (a week is 10,000 numbers).
func metricsJSON(samples []resource.MetricSample) string {
	b := make([]byte, 0, 64+len(samples)*6*8)
	series := [...]struct {
		name string
		get  func(m *resource.MetricSample) float64
	}{
		{"cpuPct", func(m *resource.MetricSample) float64 { return m.CPUPct }},
		{"memPct", func(m *resource.MetricSample) float64 { return m.MemPct }},
		{"diskUsedPct", func(m *resource.MetricSample) float64 { return m.DiskUsedPct }},
		{"tempCpu", func(m *resource.MetricSample) float64 { return m.TempCPU }},
		{"loadAvg1", func(m *resource.MetricSample) float64 { return m.LoadAvg1 }},
	}
	b = append(b, `{"t":[`...)
	for i := range samples {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(samples[i].CapturedAt.Time.UnixMilli())/1000, 'f', -1, 64)
	}
	b = append(b, ']')
	for _, se := range series {
		b = append(b, `,"`...)
		b = append(b, se.name...)
		b = append(b, `":[`...)
		for i := range samples {
			if i > 0 {
				b = append(b, ',')
			}
			if len(samples[i].Missing) > 0 && samples[i].Lacks(se.name) {
				b = append(b, "null"...)
				continue
			}
			b = strconv.AppendFloat(b, se.get(&samples[i]), 'f', -1, 64)
		}
		b = append(b, ']')
	}
	b = append(b, '}')
	return string(b)
}

// channelsFragment is the live channel table alone; htmx replaces it every
// few seconds.
func (s *Server) channelsFragment(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	dev, err := s.cfg.Devices.Device(ctx, rq.User.OrgID, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	st, err := s.cfg.Serial.Serial(ctx, rq.User.OrgID, dev.ID)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.renderPart(w, "device", "channels", &deviceData{Device: dev, Serial: &st})
}

// serialForm is the mode and forwarding form.
type serialForm struct {
	Modes          []string
	Mode           string
	WebhookURL     string
	WebhookEnabled bool
	Errors         map[string]string // by field: mode, webhookUrl; "" for the form
	Saved          bool
}

func newSerialForm(st resource.SerialState) serialForm {
	f := serialForm{Modes: []string{resource.ModeManaged, resource.ModePassthrough, resource.ModeBoth}, Mode: st.Mode, WebhookEnabled: st.Forwarding.WebhookEnabled}
	if st.Forwarding.WebhookURL != nil {
		f.WebhookURL = *st.Forwarding.WebhookURL
	}
	return f
}

// patchSerial saves mode and forwarding; errors are shown beside their
// field and nothing is saved.
func (s *Server) patchSerial(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	d, err := s.deviceData(ctx, rq, r.PathValue("id"), url.Values{})
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	if d.Serial == nil {
		s.fail(w, r, rq, cloud.Errorf(cloud.ECAPABILITY, "%s", d.SerialNote))
		return
	}
	f := &d.SerialForm
	f.Mode = r.PostFormValue("mode")
	f.WebhookURL = strings.TrimSpace(r.PostFormValue("webhookUrl"))
	f.WebhookEnabled = r.PostFormValue("webhookEnabled") != ""
	f.Errors = map[string]string{}
	if !resource.ValidMode(f.Mode) {
		f.Errors["mode"] = "Choose managed, passthrough or both."
	}
	p := cloud.SerialPatch{Mode: &f.Mode, WebhookEnabled: &f.WebhookEnabled}
	if f.WebhookURL == "" {
		p.ClearWebhookURL = true
		if f.WebhookEnabled {
			f.Errors["webhookUrl"] = "Forwarding needs a webhook URL."
		}
	} else if err := cloud.ValidateWebhookURL("webhookUrl", f.WebhookURL); err != nil {
		f.Errors["webhookUrl"] = cloud.ErrorMessage(err)
	} else {
		p.WebhookURL = &f.WebhookURL
	}
	if len(f.Errors) == 0 {
		if _, err := s.cfg.Serial.PatchSerial(ctx, rq.User.OrgID, d.Device.ID, p); err != nil {
			if cloud.ErrorCode(err) == cloud.EINTERNAL {
				s.fail(w, r, rq, err)
				return
			}
			f.Errors[""] = cloud.ErrorMessage(err)
		}
	}
	if len(f.Errors) > 0 {
		s.render(w, r, rq, http.StatusBadRequest, "device", d.Device.Name, d)
		return
	}
	s.flash(r, "Mode and forwarding saved; the agent receives them at once if connected.")
	http.Redirect(w, r, "/panel/devices/"+url.PathEscape(d.Device.ID)+"#serial", http.StatusSeeOther)
}

// putChannel saves one channel's configuration after serialcfg validated
// it; the first error is shown beside its field and nothing is saved.
func (s *Server) putChannel(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	d, f, err := s.channelPage(r, rq)
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	chID := f.Channel.ID
	if f.submit(r.PostForm) { // Add or Remove: shown again, nothing saved
		f.Open = true
		s.render(w, r, rq, http.StatusOK, "device", d.Device.Name, d)
		return
	}
	cfg, err := f.config()
	if err == nil {
		_, err = s.cfg.Serial.PutChannel(ctx, rq.User.OrgID, d.Device.ID, chID, cfg)
	}
	if err != nil {
		var fe *jsonstrict.FieldError
		switch {
		case errors.Is(err, errForm):
		case errors.As(err, &fe):
			if !f.setError(fe.Field, fe.Msg) {
				f.Error = fe.Error()
			}
		case cloud.ErrorCode(err) == cloud.EINTERNAL:
			s.fail(w, r, rq, err)
			return
		default:
			f.Error = cloud.ErrorMessage(err)
		}
		f.Open = true
		s.render(w, r, rq, http.StatusBadRequest, "device", d.Device.Name, d)
		return
	}
	s.flash(r, "Configuration of "+chID+" saved; the agent applies it at once if connected.")
	http.Redirect(w, r, "/panel/devices/"+url.PathEscape(d.Device.ID)+"#config-"+chID, http.StatusSeeOther)
}

// channelPage reads the device page of the request's device, and the
// configuration form of its channel ch (ENOTFOUND when it has no
// configurable channel of that id), for the forms that change a channel.
func (s *Server) channelPage(r *http.Request, rq *request) (*deviceData, *channelForm, error) {
	d, err := s.deviceData(r.Context(), rq, r.PathValue("id"), url.Values{})
	if err != nil {
		return nil, nil, err
	}
	chID := r.PathValue("ch")
	for i := range d.Forms {
		if d.Forms[i].Channel.ID == chID {
			return d, &d.Forms[i], nil
		}
	}
	return nil, nil, cloud.Errorf(cloud.ENOTFOUND, "no configurable channel %q", chID)
}

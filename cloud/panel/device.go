package panel

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/resource"
)

// Chart ranges of the device page, and the default.
var chartRanges = []struct {
	Name string
	D    time.Duration
}{{"1h", time.Hour}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}}

const defaultRange = "24h"

// metricsBatch is how many samples one store call returns (the store's
// bound); a 7-day chart takes a few calls.
const metricsBatch = 1000

// maxChartSamples bounds one chart's samples (a week at one a minute).
const maxChartSamples = 7 * 24 * 60

// eventsPageSize is the number of events per page of the device page.
const eventsPageSize = 50

type rangeLink struct {
	Name, URL string
	Active    bool
}

type deviceData struct {
	Device   resource.DeviceDetail
	Edit     deviceForm
	Ranges   []rangeLink
	Range    string
	Metrics  string // chart data, JSON (see metricsJSON)
	Samples  int
	From, To int64 // the charts' window, Unix seconds

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
	span := time.Duration(0)
	for _, cr := range chartRanges {
		if cr.Name == d.Range {
			span = cr.D
		}
	}
	if span == 0 {
		d.Range, span = defaultRange, 24*time.Hour
	}
	for _, cr := range chartRanges {
		v := cloneValues(q)
		v.Set("range", cr.Name)
		d.Ranges = append(d.Ranges, rangeLink{Name: cr.Name, URL: base + "?" + v.Encode() + "#charts", Active: cr.Name == d.Range})
	}
	d.To = s.now().Unix()
	d.From = d.To - int64(span/time.Second)
	samples, err := s.samples(ctx, org, dev.ID, span)
	if err != nil {
		return nil, err
	}
	d.Samples = len(samples)
	d.Metrics = metricsJSON(samples)

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

// samples returns the device's samples of the last span, oldest first,
// reading the store in batches of its largest page.
func (s *Server) samples(ctx context.Context, org, id string, span time.Duration) ([]resource.MetricSample, error) {
	to := s.now().UTC()
	from := to.Add(-span)
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

// metricsJSON is the chart data panel.js reads: {"t":[unix seconds...],
// "cpuPct":[...], "memPct":[...], "diskUsedPct":[...], "tempCpu":[...],
// "loadAvg1":[...]}, written without reflection (a week is 10,000 numbers).
func metricsJSON(samples []resource.MetricSample) string {
	b := make([]byte, 0, 64+len(samples)*6*8)
	series := []struct {
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

package alert

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// metricValue returns the value of metric i (an index in
// cloud.RuleMetrics) of a sample.
func metricValue(s *resource.MetricSample, i int) float64 {
	switch i {
	case 0:
		return s.CPUPct
	case 1:
		return s.MemPct
	case 2:
		return s.DiskUsedPct
	case 3:
		return s.TempCPU
	}
	return s.LoadAvg1
}

// metricLabels name the metrics (by index in cloud.RuleMetrics) in alert
// messages, and metricUnits give their units.
var (
	metricLabels = [...]string{"CPU usage", "Memory usage", "Disk usage", "CPU temperature", "Load average"}
	metricUnits  = [...]string{"%", "%", "%", "°C", "load"}
)

// MetricsStored evaluates the threshold rules on metrics over the samples
// (in capture order), but not on a metric a sample's host has no sensor
// for (MetricSample.Missing).
func (e *Engine) MetricsStored(ctx context.Context, dev cloud.DeviceRef, samples []resource.MetricSample) {
	if !slices.IsSortedFunc(samples, func(a, b resource.MetricSample) int { return a.CapturedAt.Compare(b.CapturedAt.Time) }) {
		samples = slices.Clone(samples)
		slices.SortStableFunc(samples, func(a, b resource.MetricSample) int { return a.CapturedAt.Compare(b.CapturedAt.Time) })
	}
	d := e.sampled(ctx, dev, len(samples))
	if d == nil {
		return
	}
	defer d.mu.Unlock()
	for i := range samples {
		s := &samples[i]
		at := s.CapturedAt.UnixNano()
		for m := range d.metric {
			if len(s.Missing) > 0 && s.Lacks(cloud.RuleMetrics[m]) {
				continue // the host has no sensor: its 0 is no reading
			}
			v := metricValue(s, m)
			for _, sl := range d.metric[m] {
				if !sl.quiet(at, v) {
					e.step(ctx, d, sl, s.CapturedAt.Time, v)
				}
			}
		}
	}
}

// PointsStored evaluates the threshold rules on points over the good
// samples (a bool as 0 or 1); bad readings are ignored.
func (e *Engine) PointsStored(ctx context.Context, dev cloud.DeviceRef, samples []protocol.PointSample) {
	d := e.sampled(ctx, dev, len(samples))
	if d == nil {
		return
	}
	defer d.mu.Unlock()
	for i := range samples {
		s := &samples[i]
		if s.Error != "" {
			continue
		}
		at := s.At.UnixNano()
		for _, sl := range d.point[s.Point] {
			if !sl.quiet(at, s.Value) {
				e.step(ctx, d, sl, s.At.Time, s.Value)
			}
		}
	}
}

// sampled returns, locked and current, the device that stored n samples
// when its organization has threshold rules; nil otherwise.
func (e *Engine) sampled(ctx context.Context, dev cloud.DeviceRef, n int) *device {
	if n == 0 {
		return nil
	}
	now := e.cfg.Now()
	o := e.orgRules(ctx, dev.OrgID, now)
	if o == nil || !o.samples {
		return nil
	}
	return e.lockDevice(ctx, dev, o, now, ttl)
}

// step feeds one sample to a device's threshold rule and carries out what
// it decides.
func (e *Engine) step(ctx context.Context, d *device, s *slot, at time.Time, v float64) {
	if !s.primed {
		s.primed = true
		if c := &s.rule.Cond; !s.open && s.since == 0 && c.For > 0 && c.Breaches(v) {
			e.rebuildRun(ctx, d, s, at)
		}
	}
	th := s.threshold()
	dec := th.Step(at, v)
	s.open = th.Open
	s.setSince(th.Since)
	switch dec {
	case Opens:
		e.openThreshold(ctx, d, s, at, v)
	case Resolve:
		e.resolveThreshold(ctx, d, s, v)
	}
}

// historyLimit bounds the samples a rebuilt run reads per query.
const historyLimit = 2000

// rebuildRun learns, after a restart (or a device first seen), since when
// the condition has held before at: the start of the newest unbroken run
// of samples over the threshold in the stored history, looked for over
// twice the rule's `for` and never before its last alert resolved.
func (e *Engine) rebuildRun(ctx context.Context, d *device, s *slot, at time.Time) {
	c := s.rule.Cond
	from := at.Add(-2 * c.For)
	if !s.resolved.IsZero() && !from.After(s.resolved) {
		from = s.resolved.Add(time.Millisecond)
	}
	to := at
	var start time.Time
	for to.After(from) || to.Equal(from) {
		hs, err := e.cfg.Store.History(ctx, d.ref.OrgID, d.ref.ID, c, from, to, historyLimit)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Error("rule history", "device", d.ref.ID, "rule", s.rule.Name, "err", err)
			}
			return
		}
		for i := len(hs) - 1; i >= 0; i-- {
			if !c.Breaches(hs[i].Value) {
				s.setSince(start)
				return
			}
			start = hs[i].At
		}
		if len(hs) < historyLimit {
			break
		}
		to = hs[0].At.Add(-time.Millisecond)
	}
	s.setSince(start)
}

// openThreshold opens the alert a threshold's sample decided.
func (e *Engine) openThreshold(ctx context.Context, d *device, s *slot, at time.Time, v float64) {
	r := s.rule
	unit := e.unitOf(ctx, d, r)
	payload := payloadOf(thresholdPayload{Rule: r.Name, RuleID: r.ID, Source: r.Cond.Source, Op: r.Cond.Op, Value: v,
		Threshold: r.Cond.Value, Clear: r.Cond.Clear, For: cloud.FormatRuleDuration(r.Cond.For), Unit: unit, CapturedAt: resource.T(at)})
	msg := fmt.Sprintf("%s %s %s %s", sourceLabel(r), formatValue(r, v, unit), r.Cond.Op, formatValue(r, r.Cond.Value, unit))
	if r.Cond.For > 0 {
		msg += " for " + cloud.FormatRuleDuration(r.Cond.For)
	}
	a, ok, err := e.open(ctx, Opening{OrgID: d.ref.OrgID, DeviceID: d.ref.ID, Rule: r.AlertRule, Message: msg, Payload: payload,
		At: e.cfg.Now(), WithEvent: true})
	switch {
	case err != nil:
		s.open = false // the next sample over the threshold tries again
	case ok:
		s.setOpen(a.ID)
	default:
		s.setOpen(openUnknown) // one is open already (another relay)
	}
}

// resolveThreshold resolves the alert a threshold's sample ended.
func (e *Engine) resolveThreshold(ctx context.Context, d *device, s *slot, v float64) {
	r := s.rule
	unit := e.unitOf(ctx, d, r)
	cmp := "<"
	if r.Cond.Op == "<" || r.Cond.Op == "<=" {
		cmp = ">"
	}
	msg := fmt.Sprintf("%s resolved: %s %s %s %s", r.Name, sourceLabel(r), formatValue(r, v, unit), cmp, formatValue(r, r.Cond.Clear, unit))
	now := e.cfg.Now()
	if _, err := e.resolve(ctx, d.ref, r.AlertRule, msg, now); err != nil {
		s.open = true // the next sample past clear tries again
		return
	}
	s.setClosed(now)
}

// thresholdPayload is an open threshold alert's payload.
type thresholdPayload struct {
	Rule       string        `json:"rule"`
	RuleID     string        `json:"ruleId"`
	Source     string        `json:"source"`
	Op         string        `json:"op"`
	Value      float64       `json:"value"`
	Threshold  float64       `json:"threshold"`
	Clear      float64       `json:"clear"`
	For        string        `json:"for"`
	Unit       string        `json:"unit"`
	CapturedAt resource.Time `json:"capturedAt"`
}

// sourceLabel names a rule's source in messages: "CPU usage", or the
// point's id.
func sourceLabel(r *rule) string {
	if r.metric >= 0 {
		return metricLabels[r.metric]
	}
	return r.Cond.PointID
}

// unitOf returns the unit of a threshold rule's source: the metric's, or
// the point's as its channel's configuration names it ("" when unknown).
func (e *Engine) unitOf(ctx context.Context, d *device, r *rule) string {
	if r.metric >= 0 {
		return metricUnits[r.metric]
	}
	if d.units == nil {
		d.units = map[string]string{}
		if e.cfg.Points != nil {
			ps, err := e.cfg.Points.Points(ctx, d.ref.OrgID, d.ref.ID, e.cfg.Now())
			if err != nil && ctx.Err() == nil {
				e.log.Warn("point units", "device", d.ref.ID, "err", err)
			}
			for _, p := range ps {
				d.units[p.ID] = p.Unit
			}
		}
	}
	return d.units[r.Cond.PointID]
}

// formatValue writes a value of the rule's source with its unit: "95.0%",
// "52.5 °C", "1.25", "92.5 °C".
func formatValue(r *rule, v float64, unit string) string {
	switch {
	case r.metric == 4:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case r.metric >= 0 && unit == "%":
		return strconv.FormatFloat(v, 'f', 1, 64) + "%"
	case r.metric >= 0:
		return strconv.FormatFloat(v, 'f', 1, 64) + " " + unit
	}
	s := strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
	if unit != "" {
		s += " " + unit
	}
	return s
}

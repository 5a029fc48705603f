package sqlstore

import (
	"context"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// The history of a threshold rule's source (issue 27): the values the
// engine would have weighed, read back for AlertEngineStore.History and
// for the preview (RuleService.PreviewRule). A metric source is a column
// of the metrics table; a point source is the point's good samples in the
// point history (its head rows and compressed chunks, pointhistory.go),
// bools as the 0/1 they travel as.

// MetricColumns maps a metric source's name (cloud.RuleMetrics) to its
// column of the metrics table (SampleColumns).
var MetricColumns = map[string]string{
	"cpuPct": "cpu_pct", "memPct": "mem_pct", "diskUsedPct": "disk_used_pct", "tempCpu": "temp_cpu", "loadAvg1": "load_avg1",
}

// RuleHistoryPage is how many metric rows RuleHistory reads a statement.
const RuleHistoryPage = 2000

// metricColumn returns c's column of the metrics table, or EINVALID.
func metricColumn(c cloud.RuleCondition) (string, error) {
	col, ok := MetricColumns[c.Metric]
	if !ok {
		return "", cloud.Errorf(cloud.EINVALID, "condition.source: unknown metric %q", c.Metric)
	}
	return col, nil
}

// sensed is the condition that leaves out the samples whose host has no
// sensor for c's metric (their value is 0 and means nothing).
func sensed(c cloud.RuleCondition) string {
	return ` AND (missing & ` + strconv.FormatInt(resource.MissingMask([]string{c.Metric}), 10) + `) = 0`
}

// deviceOfOrg returns ENOTFOUND unless deviceID is a device of orgID.
func (s *Store) deviceOfOrg(ctx context.Context, orgID, deviceID string) error {
	_, err := s.DeviceModel(ctx, orgID, deviceID)
	return err
}

// RuleHistory calls each with the values of threshold condition c's
// source for the organization's device captured in [from, to], ascending,
// a page at a time (the slice is reused from one call to the next): never
// more than a page of metric rows or a chunk of point samples in memory.
// Bad point samples are left out.
func (s *Store) RuleHistory(ctx context.Context, orgID, deviceID string, c cloud.RuleCondition, from, to time.Time, each func([]cloud.RuleSample) error) error {
	if err := s.deviceOfOrg(ctx, orgID, deviceID); err != nil {
		return err
	}
	var buf []cloud.RuleSample
	if c.PointID != "" {
		_, err := s.PointHistory(ctx, deviceID, c.PointID, from.UnixMilli(), to.UnixMilli(), func(xs []ChunkSample) error {
			buf = appendGood(buf[:0], xs)
			if len(buf) == 0 {
				return nil
			}
			return each(buf)
		})
		return err
	}
	col, err := metricColumn(c)
	if err != nil {
		return err
	}
	q := `SELECT captured_at, ` + col + ` FROM metrics WHERE device_id = ? AND captured_at > ? AND captured_at <= ?` + sensed(c) + ` ORDER BY captured_at LIMIT ?`
	after := from.UnixMilli() - 1
	for {
		buf = buf[:0]
		err := Each(ctx, s.R, q, []any{deviceID, after, to.UnixMilli(), RuleHistoryPage}, func(r Row) error {
			var at int64
			var v float64
			if err := r.Scan(&at, &v); err != nil {
				return err
			}
			buf = append(buf, cloud.RuleSample{At: time.UnixMilli(at).UTC(), Value: v})
			after = at
			return nil
		})
		if err != nil {
			return s.Wrap("metric history", err)
		}
		if len(buf) > 0 {
			if err := each(buf); err != nil {
				return err
			}
		}
		if len(buf) < RuleHistoryPage {
			return nil
		}
	}
}

// appendGood appends the good samples of xs (a bad reading is a NaN) to
// out.
func appendGood(out []cloud.RuleSample, xs []ChunkSample) []cloud.RuleSample {
	for _, x := range xs {
		if math.IsNaN(x.Value) || math.IsInf(x.Value, 0) {
			continue
		}
		out = append(out, cloud.RuleSample{At: time.UnixMilli(x.At).UTC(), Value: x.Value})
	}
	return out
}

// History implements cloud.AlertEngineStore: the values of threshold
// condition c's source for the device captured in [from, to], ascending,
// the newest limit of them.
func (s AlertEngineStore) History(ctx context.Context, orgID, deviceID string, c cloud.RuleCondition, from, to time.Time, limit int) ([]cloud.RuleSample, error) {
	if limit <= 0 {
		return []cloud.RuleSample{}, nil
	}
	if err := s.deviceOfOrg(ctx, orgID, deviceID); err != nil {
		return nil, err
	}
	if c.PointID != "" {
		return s.newestPointValues(ctx, deviceID, c.PointID, from.UnixMilli(), to.UnixMilli(), limit)
	}
	col, err := metricColumn(c)
	if err != nil {
		return nil, err
	}
	out, err := Collect(ctx, s.R, func(r Row) (cloud.RuleSample, error) {
		var at int64
		var v float64
		err := r.Scan(&at, &v)
		return cloud.RuleSample{At: time.UnixMilli(at).UTC(), Value: v}, err
	}, `SELECT captured_at, `+col+` FROM metrics WHERE device_id = ? AND captured_at >= ? AND captured_at <= ?`+sensed(c)+` ORDER BY captured_at DESC LIMIT ?`,
		deviceID, from.UnixMilli(), to.UnixMilli(), limit)
	if err != nil {
		return nil, s.Wrap("metric history", err)
	}
	slices.Reverse(out)
	return out, nil
}

// newestPointValues returns the newest n good samples of the device's
// point in [from, to] (Unix ms), ascending: it reads the newest n samples,
// and twice as many again while bad ones left it short and there are
// more.
func (s *Store) newestPointValues(ctx context.Context, deviceID, pointID string, from, to int64, n int) ([]cloud.RuleSample, error) {
	for want := n; ; want *= 2 {
		stored, _, err := s.NewestPointSamples(ctx, deviceID, pointID, from, to, want)
		if err != nil {
			return nil, err
		}
		out := make([]cloud.RuleSample, 0, min(n, len(stored)))
		for i := len(stored) - 1; i >= 0 && len(out) < n; i-- {
			x := stored[i]
			if x.Bad || math.IsNaN(x.Value) || math.IsInf(x.Value, 0) {
				continue
			}
			out = append(out, cloud.RuleSample{At: time.UnixMilli(x.At).UTC(), Value: x.Value})
		}
		if len(out) == n || len(stored) < want {
			slices.Reverse(out)
			return out, nil
		}
	}
}

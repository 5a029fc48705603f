package relaymetrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gather returns the registry's families by name.
func gather(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		m[f.GetName()] = f
	}
	return m
}

// labels renders a series' labels as "k=v,k=v" (sorted by name, as
// gathered).
func labels(m *dto.Metric) string {
	s := ""
	for i, l := range m.Label {
		if i > 0 {
			s += ","
		}
		s += l.GetName() + "=" + l.GetValue()
	}
	return s
}

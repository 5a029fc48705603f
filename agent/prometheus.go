package agent

import (
	"errors"

	"github.com/fleet/fleet/agent/agentmetrics"
	"github.com/fleet/fleet/agent/iomgr"
	"github.com/fleet/fleet/agent/metrics"
	"github.com/fleet/fleet/shared/protocol"
)

// newPrometheus builds the agent's own metrics (--metrics-listen) over its
// parts.
func (a *Agent) newPrometheus() *agentmetrics.Metrics {
	channels := make([]string, 0, len(a.model.Channels))
	for _, c := range a.model.Channels {
		channels = append(channels, c.ID)
	}
	return agentmetrics.New(agentmetrics.Source{
		Link:          a.link.Stats,
		Spool:         a.spool,
		ConfigVersion: a.io.Version,
		Channels:      a.io.States,
		Version:       Version,
		Now:           a.now,
	}, channels)
}

// MetricsAddr returns the address the agent's metrics are served on, once
// Run started serving them ("" without --metrics-listen).
func (a *Agent) MetricsAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.metricsAddr
}

// countChannelError counts a serial.error event of the channel manager.
func (a *Agent) countChannelError(ev iomgr.Event) {
	if a.prom == nil || ev.Type != protocol.EventSerialError {
		return
	}
	ch, _ := ev.Data["channelId"].(string)
	a.prom.ChannelError(ch)
}

// countCollectorErrors counts each failed collector of a Sampler's error.
func (a *Agent) countCollectorErrors(err error) {
	if a.prom == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var ce *metrics.CollectorError
		if errors.As(e, &ce) {
			a.prom.CollectorError(ce.Collector)
		}
	}
}

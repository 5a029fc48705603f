package relay

import (
	"context"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// The fan-outs below let several parts of the relay observe the same
// source. Extensions append to Main's lists while they start, before the
// listener accepts; the lists are read-only afterwards.

// observerList tells every cloud.Observer in turn.
type observerList []cloud.Observer

var _ cloud.Observer = (*observerList)(nil)

func (l *observerList) MetricsStored(ctx context.Context, dev cloud.DeviceRef, s []resource.MetricSample) {
	for _, o := range *l {
		o.MetricsStored(ctx, dev, s)
	}
}

func (l *observerList) HeartbeatStored(ctx context.Context, dev cloud.DeviceRef, hb cloud.Heartbeat) {
	for _, o := range *l {
		o.HeartbeatStored(ctx, dev, hb)
	}
}

func (l *observerList) EventsStored(ctx context.Context, dev cloud.DeviceRef, ev []resource.Event) {
	for _, o := range *l {
		o.EventsStored(ctx, dev, ev)
	}
}

func (l *observerList) StatusChanged(ctx context.Context, dev cloud.DeviceRef, from, to resource.DeviceStatus) {
	for _, o := range *l {
		o.StatusChanged(ctx, dev, from, to)
	}
}

// alertObserverList tells every cloud.AlertObserver in turn.
type alertObserverList []cloud.AlertObserver

var _ cloud.AlertObserver = (*alertObserverList)(nil)

func (l *alertObserverList) AlertChanged(ctx context.Context, event string, a resource.Alert) {
	for _, o := range *l {
		o.AlertChanged(ctx, event, a)
	}
}

// configObserverList tells every cloud.DesiredConfigObserver in turn.
type configObserverList []cloud.DesiredConfigObserver

var _ cloud.DesiredConfigObserver = (*configObserverList)(nil)

func (l *configObserverList) DesiredConfigChanged(deviceID string) {
	for _, o := range *l {
		o.DesiredConfigChanged(deviceID)
	}
}

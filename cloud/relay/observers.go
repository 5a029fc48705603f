package relay

import (
	"context"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// The fan-outs below let several parts of the relay observe the same
// source. Parts append to Main's lists while they start, before the API
// serves; the lists are read-only afterwards.

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

// commandObserverList tells every cloud.CommandsObserver in turn.
type commandObserverList []cloud.CommandsObserver

var _ cloud.CommandsObserver = (*commandObserverList)(nil)

func (l *commandObserverList) CommandsChanged(deviceID string) {
	for _, o := range *l {
		o.CommandsChanged(deviceID)
	}
}

package alert_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// midSweep is the engine's store with a step run once between a sweep's
// read of the silent devices and the alerts it opens for them: what
// another relay (or this one's agent endpoint) commits in that gap.
type midSweep struct {
	alert.Store
	step func()
	once sync.Once
}

func (s *midSweep) OfflineDevices(ctx context.Context, now time.Time, deviceID, cursor string, limit int) ([]alert.Offline, error) {
	out, err := s.Store.OfflineDevices(ctx, now, deviceID, cursor, limit)
	if len(out) > 0 {
		s.once.Do(s.step)
	}
	return out, err
}

// TestDeviceBackDuringTheSweepIsLeftNoAlert: the sweep reads a device
// silent for three heartbeat intervals; before it opens device_offline the
// agent is back (its hello stored: ONLINE, a new last heartbeat) and the
// engine, told the device is ONLINE, finds no alert to resolve. The sweep
// then opens none: an alert opened now would stay ACTIVE for a device that
// is online until its next outage ends. Once the device is silent again,
// that outage opens its alert.
func TestDeviceBackDuringTheSweepIsLeftNoAlert(t *testing.T) {
	stores.Run(t, testDeviceBackDuringTheSweepIsLeftNoAlert)
}

func testDeviceBackDuringTheSweepIsLeftNoAlert(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	ctx := context.Background()
	lastSeen := e.clock.Now()
	storetest.Offline(t, e.s.Agent, e.agent, lastSeen, 30*time.Second)
	e.clock.Set(lastSeen.Add(91 * time.Second)) // three intervals of 30 s
	var session string
	back := func() {
		session = storetest.Connect(t, e.s.Agent, e.agent, e.clock.Now(), protocol.Hello{AgentVersion: "1.0.0", HeartbeatInterval: protocol.Duration{Duration: 30 * time.Second}})
		e.engine.StatusChanged(ctx, e.dev, resource.StatusOffline, resource.StatusOnline)
	}
	e.engine = alert.New(alert.Config{Store: &midSweep{Store: e.s.Engine, step: back}, Observer: e.notify, Now: e.clock.Now})
	e.engine.StatusChanged(ctx, e.dev, resource.StatusOnline, resource.StatusOffline)
	for _, state := range []resource.AlertState{resource.AlertActive, resource.AlertResolved} {
		if as := e.alerts(state); len(as) != 0 {
			t.Fatalf("%d %s alerts for a device back online before the sweep opened one: %+v", len(as), state, as)
		}
	}
	e.noHook()

	// Silent again for three intervals: this outage opens its alert.
	wentQuiet := e.clock.Now()
	if _, _, err := e.s.Agent.Disconnect(ctx, e.agent, session, wentQuiet, "test"); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(wentQuiet.Add(91 * time.Second))
	e.engine.StatusChanged(ctx, e.dev, resource.StatusOnline, resource.StatusOffline)
	if h := e.hook(); h.Event != "alert.opened" {
		t.Fatalf("webhook %s", h.Event)
	}
	if as := e.alerts(resource.AlertActive); len(as) != 1 {
		t.Fatalf("%d active alerts for the next outage, want 1", len(as))
	}
}

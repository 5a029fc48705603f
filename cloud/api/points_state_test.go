package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestPointStateFromSamples checks the rule of the points list: a point's
// state is the newer of the heartbeat's report and the newest stored
// sample (samples spooled while the link was down arrive after the
// heartbeats that came before them).
func TestPointStateFromSamples(t *testing.T) {
	t.Parallel()
	stores.Run(t, testPointStateFromSamples)
}

func testPointStateFromSamples(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	now := time.Now().UTC().Truncate(time.Millisecond)
	// gpio-1: reported 0 a minute ago, then a sample of 1 since.
	// gpio-2: a sample of 1 two minutes ago, reported 0 since.
	storetest.Channels(t, e.s.Agent, e.agent(d.ID), now.Add(-time.Minute),
		protocol.ChannelState{ID: "gpio-1", Available: true, Points: []protocol.PointState{{Name: "level", Value: 0, Quality: "good", At: resource.T(now.Add(-time.Minute))}}},
		protocol.ChannelState{ID: "gpio-2", Available: true, Points: []protocol.PointState{{Name: "level", Value: 0, Quality: "good", At: resource.T(now.Add(-time.Minute))}}})
	pointSamples(t, e.s.Agent, e.agent(d.ID),
		protocol.PointSample{Point: "gpio-1.level", At: resource.T(now.Add(-10 * time.Second)), Value: 1},
		protocol.PointSample{Point: "gpio-2.level", At: resource.T(now.Add(-2 * time.Minute)), Value: 1})
	r := e.get("/devices/"+d.ID+"/points", e.keyA)
	r.want(t, http.StatusOK, "")
	var l resource.One[[]resource.Point]
	r.decode(t, &l)
	byID := map[string]resource.Point{}
	for _, p := range l.Data {
		byID[p.ID] = p
	}
	if p := byID["gpio-1.level"]; p.Value != true || p.At == nil || !p.At.Equal(now.Add(-10*time.Second)) {
		t.Errorf("gpio-1.level, a sample newer than the heartbeat: %+v", p)
	}
	if p := byID["gpio-2.level"]; p.Value != false || p.At == nil || !p.At.Equal(now.Add(-time.Minute)) {
		t.Errorf("gpio-2.level, a heartbeat newer than the samples: %+v", p)
	}
}

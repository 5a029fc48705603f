package alert

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// TestQuietSkipsOnlyNoOps: over random samples and conditions, a slot
// that skips the samples quiet calls quiet and steps the others ends every
// sample in the state, and with the decisions, of a Threshold stepped
// through every sample: the hot path's shortcut is Step's semantics.
func TestQuietSkipsOnlyNoOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		c := cloud.RuleCondition{Kind: resource.ConditionThreshold, Op: cloud.RuleOps[rng.IntN(4)], Value: 50,
			For: time.Duration(rng.IntN(4)) * 10 * time.Second}
		c.Clear = c.Value
		if rng.IntN(2) == 0 {
			if c.Op[0] == '>' {
				c.Clear = 40
			} else {
				c.Clear = 60
			}
		}
		ref := Threshold{Cond: c}
		s := &slot{}
		s.setRule(&rule{AlertRule: cloud.AlertRule{Cond: c}})
		s.primed = true
		at := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
		for i := range 60 {
			at = at.Add(time.Duration(rng.IntN(15)-2) * time.Second) // now and then out of order
			v := float64(30 + rng.IntN(41))
			want := ref.Step(at, v)
			got := Hold
			if !s.quiet(at.UnixNano(), v) {
				th := s.threshold()
				got = th.Step(at, v)
				s.open = th.Open
				s.setSince(th.Since)
			}
			if th := s.threshold(); got != want || th.Open != ref.Open || !th.Since.Equal(ref.Since) {
				t.Fatalf("round %d sample %d (%s %v, %v at %s): got %v %+v, want %v %+v", round, i, c.Op, c.For, v, at, got, th, want, ref)
			}
		}
	}
}

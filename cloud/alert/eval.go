package alert

import (
	"time"

	"github.com/fleet/fleet/cloud"
)

// Threshold is one device's state for one threshold rule: whether an alert
// is open and since when the condition has held without a break. The
// engine keeps one per device and rule; the preview replays a history
// through one. Step is the rule's whole semantics: an alert opens once the
// condition held for For (from the first sample of the run to the current
// one; For 0 opens on the first), and an open alert resolves on the first
// sample past Clear.
type Threshold struct {
	Cond  cloud.RuleCondition
	Open  bool
	Since time.Time // first sample of the current run over the threshold; zero when not in one
}

// Decision is what one sample made of a Threshold.
type Decision int

// Decisions.
const (
	Hold    Decision = iota // nothing changes
	Opens                   // an alert opens
	Resolve                 // the open alert resolves
)

// Step feeds one sample (in capture order) and says what it decides. The
// caller moves Open back when the store refuses the decision.
func (t *Threshold) Step(at time.Time, v float64) Decision {
	if t.Open {
		if t.Cond.Clears(v) {
			t.Open, t.Since = false, time.Time{}
			return Resolve
		}
		return Hold
	}
	if !t.Cond.Breaches(v) {
		t.Since = time.Time{}
		return Hold
	}
	if t.Since.IsZero() || at.Before(t.Since) {
		t.Since = at
	}
	if at.Sub(t.Since) >= t.Cond.For {
		t.Open = true
		return Opens
	}
	return Hold
}

package alert_test

import (
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
)

func TestThresholdStep(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	th := alert.Threshold{Cond: cloud.RuleCondition{Kind: "threshold", Op: ">", Value: 80, Clear: 75, For: 20 * time.Second}}
	steps := []struct {
		s    int
		v    float64
		want alert.Decision
	}{
		{0, 81, alert.Hold}, {10, 85, alert.Hold}, {15, 79, alert.Hold}, // broken run
		{20, 81, alert.Hold}, {30, 90, alert.Hold}, {40, 81, alert.Opens}, // held 20 s
		{50, 76, alert.Hold}, {60, 90, alert.Hold}, {70, 74.9, alert.Resolve}, // hysteresis
		{80, 95, alert.Hold},
	}
	for _, s := range steps {
		if got := th.Step(t0.Add(time.Duration(s.s)*time.Second), s.v); got != s.want {
			t.Fatalf("at %ds value %v: got %v, want %v", s.s, s.v, got, s.want)
		}
	}
	zero := alert.Threshold{Cond: cloud.RuleCondition{Kind: "threshold", Op: "<=", Value: 0, Clear: 1}}
	if zero.Step(t0, 0) != alert.Opens || zero.Step(t0.Add(time.Second), 1) != alert.Hold || zero.Step(t0.Add(2*time.Second), 1.5) != alert.Resolve {
		t.Fatal("for 0s with <=")
	}
}

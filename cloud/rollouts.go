package cloud

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/fleet/fleet/shared/resource"
)

// Rollout limits and defaults (POST /rollouts).
const (
	MaxRolloutWaves         = 10
	MaxRolloutDevices       = 10000 // scope.deviceIds
	MaxRolloutFailures      = 100000
	MaxVersionLength        = 64
	DefaultRolloutHealthFor = 2 * time.Minute // healthFor
	MinRolloutHealthFor     = 10 * time.Second
	MaxRolloutHealthFor     = time.Hour
)

// RolloutNoArch is a rollout device's error when its agent announced no
// architecture (an agent from before updates).
const RolloutNoArch = "agent reports no architecture; update it by hand"

// CheckedRollout is a NewRollout checked by CheckNewRollout, with its
// defaults.
type CheckedRollout struct {
	Version     string
	Scope       resource.RolloutScope
	Waves       []int
	MaxFailures int
	HealthFor   time.Duration
}

// CheckNewRollout checks what of nr needs no store (EINVALID naming the
// field: version, scope, scope.deviceIds[i], scope.tags[i], waves,
// waves[i], maxFailures, healthFor) and fills the defaults: waves [100],
// maxFailures 0, healthFor 2m. Device ids are deduplicated, tags
// deduplicated and sorted. Whether a release of the version exists and the
// scope's devices do is the store's to check (RolloutNoRelease,
// RolloutUnknownDevice, RolloutEmptyScope).
func CheckNewRollout(nr resource.NewRollout) (CheckedRollout, error) {
	var c CheckedRollout
	v := strings.TrimSpace(nr.Version)
	switch {
	case v == "":
		return c, Errorf(EINVALID, "version: is required")
	case len(v) > MaxVersionLength:
		return c, Errorf(EINVALID, "version: longer than %d bytes", MaxVersionLength)
	case strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return c, Errorf(EINVALID, "version: %q has spaces or characters that do not print", clip(v))
	}
	c.Version = v
	var err error
	if c.Scope, err = checkRolloutScope(nr.Scope); err != nil {
		return CheckedRollout{}, err
	}
	if c.Waves, err = checkWaves(nr.Waves); err != nil {
		return CheckedRollout{}, err
	}
	if nr.MaxFailures != nil {
		c.MaxFailures = *nr.MaxFailures
	}
	if c.MaxFailures < 0 || c.MaxFailures > MaxRolloutFailures {
		return CheckedRollout{}, Errorf(EINVALID, "maxFailures: %d is outside 0..%d", c.MaxFailures, MaxRolloutFailures)
	}
	if c.HealthFor, err = parseRuleDuration("healthFor", nr.HealthFor, DefaultRolloutHealthFor, MinRolloutHealthFor, MaxRolloutHealthFor); err != nil {
		return CheckedRollout{}, err
	}
	return c, nil
}

func checkRolloutScope(s resource.RolloutScope) (resource.RolloutScope, error) {
	var out resource.RolloutScope
	if len(s.DeviceIDs) > 0 && len(s.Tags) > 0 {
		return out, Errorf(EINVALID, "scope: give deviceIds or tags, not both")
	}
	if len(s.DeviceIDs) > MaxRolloutDevices {
		return out, Errorf(EINVALID, "scope.deviceIds: at most %d devices", MaxRolloutDevices)
	}
	for i, id := range s.DeviceIDs {
		if id == "" || len(id) > 64 {
			return out, Errorf(EINVALID, "scope.deviceIds[%d]: %q is not a device id", i, clip(id))
		}
		if !slices.Contains(out.DeviceIDs, id) {
			out.DeviceIDs = append(out.DeviceIDs, id)
		}
	}
	if len(s.Tags) > MaxDeviceTags {
		return out, Errorf(EINVALID, "scope.tags: at most %d tags", MaxDeviceTags)
	}
	for i, t := range s.Tags {
		if !TagPattern.MatchString(t) {
			return out, Errorf(EINVALID, "scope.tags[%d]: %q is not a tag", i, clip(t))
		}
	}
	if len(s.Tags) > 0 {
		out.Tags = slices.Compact(slices.Sorted(slices.Values(s.Tags)))
	}
	return out, nil
}

func checkWaves(waves []int) ([]int, error) {
	if len(waves) == 0 {
		return []int{100}, nil
	}
	if len(waves) > MaxRolloutWaves {
		return nil, Errorf(EINVALID, "waves: at most %d waves", MaxRolloutWaves)
	}
	prev := 0
	for i, p := range waves {
		if p <= prev || p > 100 {
			return nil, Errorf(EINVALID, "waves[%d]: %d is not above %d and at most 100 (waves are cumulative percents, increasing, the last 100)", i, p, prev)
		}
		prev = p
	}
	if prev != 100 {
		return nil, Errorf(EINVALID, "waves: the last wave must be 100, not %d", prev)
	}
	return slices.Clone(waves), nil
}

// RolloutNoRelease is the EINVALID of a version of which the organization
// has no release.
func RolloutNoRelease(version string) error {
	return Errorf(EINVALID, "version: no release of version %q (add one with fleet-relay release add)", clip(version))
}

// RolloutUnknownDevice is the EINVALID of scope.deviceIds[i], id, which is
// no device of the organization (or one whose token was revoked).
func RolloutUnknownDevice(i int, id string) error {
	return Errorf(EINVALID, "scope.deviceIds[%d]: no device %q in the organization, or its token is revoked", i, clip(id))
}

// RolloutEmptyScope is the EINVALID of a scope that names no device.
func RolloutEmptyScope() error {
	return Errorf(EINVALID, "scope: no device of the organization matches")
}

// RolloutWaveOf returns, for n devices in order, the index of the wave of
// each: wave k ends at ceil(waves[k]*n/100) devices (cumulative), the first
// at least 1. A wave may hold no device (waves 1 and 10 of 10 devices both
// end at the first).
func RolloutWaveOf(waves []int, n int) []int {
	out := make([]int, n)
	k := 0
	for i := range out {
		for k < len(waves)-1 && i >= waveEnd(waves[k], n, k) {
			k++
		}
		out[i] = k
	}
	return out
}

func waveEnd(percent, n, k int) int {
	end := (percent*n + 99) / 100
	if k == 0 {
		end = max(end, 1)
	}
	return end
}

// RolloutStopReason says why a rollout stopped.
func RolloutStopReason(failures, maxFailures int) string {
	if failures == 1 {
		return fmt.Sprintf("1 device failed, more than maxFailures %d", maxFailures)
	}
	return fmt.Sprintf("%d devices failed, more than maxFailures %d", failures, maxFailures)
}

// RolloutTimeout is the error of a device that did not report healthy
// within healthFor and RolloutDownloadGrace of being sent its update.
func RolloutTimeout(healthFor time.Duration) string {
	return fmt.Sprintf("no report within %s of the update being sent (healthFor %s and %s to download and install)",
		FormatRuleDuration(healthFor+RolloutDownloadGrace), FormatRuleDuration(healthFor), FormatRuleDuration(RolloutDownloadGrace))
}

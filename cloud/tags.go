package cloud

import "slices"

// MaxDeviceTags is how many tags a device holds at most.
const MaxDeviceTags = 16

// CheckDeviceTags checks a device's tags (each TagPattern, at most
// MaxDeviceTags) and returns them deduplicated and sorted, never nil.
// Errors are EINVALID naming the field: "tags", "tags[i]".
func CheckDeviceTags(tags []string) ([]string, error) {
	if len(tags) > MaxDeviceTags {
		return nil, Errorf(EINVALID, "tags: at most %d tags", MaxDeviceTags)
	}
	for i, t := range tags {
		if !TagPattern.MatchString(t) {
			return nil, Errorf(EINVALID, "tags[%d]: %q is not a tag (lowercase letters, digits and _.:- , at most 32)", i, clip(t))
		}
	}
	out := slices.Compact(slices.Sorted(slices.Values(tags)))
	if out == nil {
		out = []string{}
	}
	return out, nil
}

package api

import (
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// query holds a request's query parameters after the strict checks: every
// name must be one the endpoint knows and appear at most once (400
// validation_error naming the parameter otherwise).
type query struct{ v url.Values }

func parseQuery(raw string, allowed ...string) (query, error) {
	if raw == "" {
		return query{}, nil
	}
	v, err := url.ParseQuery(raw)
	if err != nil {
		return query{}, cloud.Errorf(cloud.EINVALID, "the query string is malformed")
	}
	var unknown, repeated []string
	for name, vals := range v {
		known := false
		for _, a := range allowed {
			if name == a {
				known = true
				break
			}
		}
		if !known {
			unknown = append(unknown, name)
		} else if len(vals) > 1 {
			repeated = append(repeated, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return query{}, cloud.Errorf(cloud.EINVALID, "%s: unknown query parameter (this endpoint accepts: %s)", bounded(unknown[0]), strings.Join(allowed, ", "))
	}
	if len(repeated) > 0 {
		sort.Strings(repeated)
		return query{}, cloud.Errorf(cloud.EINVALID, "%s: must be given at most once", repeated[0])
	}
	return query{v}, nil
}

func bounded(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}

// get returns the parameter's value and whether it was present.
func (q query) get(name string) (string, bool) {
	if q.v == nil {
		return "", false
	}
	vs, ok := q.v[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// limit parses "limit" in [1, max], default def.
func (q query) limit(def, max int) (int, error) {
	s, ok := q.get("limit")
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		return 0, cloud.Errorf(cloud.EINVALID, "limit: must be an integer between 1 and %d (got %s)", max, bounded(s))
	}
	return n, nil
}

// cursor returns the cursor; a value that cannot be an id is invalid_cursor
// at once, one that is not an item of the list is left to the store.
func (q query) cursor() (string, error) {
	s, ok := q.get("cursor")
	if !ok {
		return "", nil
	}
	if !ids.Valid(s) {
		return "", cloud.Errorf(cloud.ECURSOR, "cursor: not a cursor of this list")
	}
	return s, nil
}

func (q query) page(def, max int) (cloud.Page, error) {
	n, err := q.limit(def, max)
	if err != nil {
		return cloud.Page{}, err
	}
	c, err := q.cursor()
	if err != nil {
		return cloud.Page{}, err
	}
	return cloud.Page{Limit: n, Cursor: c}, nil
}

func (q query) severity() (resource.Severity, error) {
	s, ok := q.get("severity")
	if !ok {
		return "", nil
	}
	if v := resource.Severity(s); v.Valid() {
		return v, nil
	}
	return "", cloud.Errorf(cloud.EINVALID, "severity: must be one of INFO, WARNING, ERROR, CRITICAL (got %s)", bounded(s))
}

func (q query) status() (resource.DeviceStatus, error) {
	s, ok := q.get("status")
	if !ok {
		return "", nil
	}
	if v := resource.DeviceStatus(s); v.Valid() {
		return v, nil
	}
	return "", cloud.Errorf(cloud.EINVALID, "status: must be one of ONLINE, OFFLINE, CONNECTING, ERROR, PROVISIONING, REBOOTING, UPDATING (got %s)", bounded(s))
}

func (q query) state() (resource.AlertState, error) {
	s, ok := q.get("state")
	if !ok {
		return resource.AlertActive, nil
	}
	if v := resource.AlertState(s); v.Valid() {
		return v, nil
	}
	return "", cloud.Errorf(cloud.EINVALID, "state: must be one of ACTIVE, ACKNOWLEDGED, RESOLVED (got %s)", bounded(s))
}

// eventType is the exact-match filter of GET /events: 1..100 characters of
// letters, digits, '.', '_' and '-'.
func (q query) eventType() (string, error) {
	s, ok := q.get("type")
	if !ok {
		return "", nil
	}
	if len(s) == 0 || len(s) > 100 {
		return "", cloud.Errorf(cloud.EINVALID, "type: must be 1 to 100 characters")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "", cloud.Errorf(cloud.EINVALID, "type: may hold only letters, digits, '.', '_' and '-' (got %s)", bounded(s))
		}
	}
	return s, nil
}

func (q query) deviceID() (string, error) {
	s, ok := q.get("deviceId")
	if !ok {
		return "", nil
	}
	if !ids.Valid(s) {
		return "", cloud.Errorf(cloud.EINVALID, "deviceId: not a device id (got %s)", bounded(s))
	}
	return s, nil
}

func (q query) timestamp(name string) (time.Time, bool, error) {
	s, ok := q.get(name)
	if !ok {
		return time.Time{}, false, nil
	}
	t, err := resource.ParseTime(s)
	if err != nil {
		return time.Time{}, false, cloud.Errorf(cloud.EINVALID, "%s: must be an RFC 3339 timestamp in years 0001 to 9999, such as 2026-01-02T15:04:05.000Z (got %s)", name, bounded(s))
	}
	return t, true, nil
}

// metricsWindow resolves from/to: to defaults to now, from to one hour
// before to; from after to is a validation error.
func (q query) metricsWindow(now time.Time) (from, to time.Time, err error) {
	from, hasFrom, err := q.timestamp("from")
	if err != nil {
		return
	}
	to, hasTo, err := q.timestamp("to")
	if err != nil {
		return
	}
	if !hasTo {
		to = now.UTC()
	}
	if !hasFrom {
		from = to.Add(-time.Hour)
		if from.Before(resource.MinTime) {
			from = resource.MinTime
		}
	}
	if from.After(to) {
		err = cloud.Errorf(cloud.EINVALID, "from: must not be after to (from %s, to %s)", resource.FormatTime(from), resource.FormatTime(to))
	}
	return
}

package api

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// params reads one request's parameters, path first, then the query, in
// the order its handler asks for them: the order in which the contract
// answers their problems. The first problem is kept in err and every later
// read answers its zero value, so a handler reads all it needs and then
// checks err once.
type params struct {
	r   *http.Request
	v   url.Values
	err error
}

// fail keeps err unless an earlier problem is already kept.
func (p *params) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// pathID returns the {id} path parameter; one that cannot be an id is
// not_found (so garbage never reaches the store).
func (p *params) pathID(what string) string {
	id := chi.URLParam(p.r, "id")
	if p.err == nil && !ids.Valid(id) {
		p.fail(cloud.Errorf(cloud.ENOTFOUND, "%s not found", what))
	}
	return id
}

// channelID returns {channelId}; anything longer than a channel id can be
// is not_found without asking the store.
func (p *params) channelID() string {
	c := chi.URLParam(p.r, "channelId")
	if p.err == nil && (c == "" || len(c) > 32) {
		p.fail(cloud.Errorf(cloud.ENOTFOUND, "channel not found"))
	}
	return c
}

// query reads the query string strictly: every name must be one the
// endpoint allows and appear at most once, unless allowed names it with
// the suffix repeatable ("tag..."): 400 validation_error naming the
// parameter otherwise.
func (p *params) query(allowed ...string) {
	if p.err != nil || p.r.URL.RawQuery == "" {
		return
	}
	v, err := parseQuery(p.r.URL.RawQuery, allowed...)
	p.v = v
	p.fail(err)
}

// repeatable ends an allowed query parameter's name that may be repeated.
const repeatable = "..."

func parseQuery(raw string, allowed ...string) (url.Values, error) {
	v, err := url.ParseQuery(raw)
	if err != nil {
		return nil, cloud.Errorf(cloud.EINVALID, "the query string is malformed")
	}
	var unknown, repeated []string
	for name, vals := range v {
		known, many := false, false
		for _, a := range allowed {
			if name == strings.TrimSuffix(a, repeatable) {
				known, many = true, a != name
				break
			}
		}
		if !known {
			unknown = append(unknown, name)
		} else if len(vals) > 1 && !many {
			repeated = append(repeated, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		names := make([]string, len(allowed))
		for i, a := range allowed {
			names[i] = strings.TrimSuffix(a, repeatable)
		}
		return nil, cloud.Errorf(cloud.EINVALID, "%s: unknown query parameter (this endpoint accepts: %s)", bounded(unknown[0]), strings.Join(names, ", "))
	}
	if len(repeated) > 0 {
		sort.Strings(repeated)
		return nil, cloud.Errorf(cloud.EINVALID, "%s: must be given at most once", repeated[0])
	}
	return v, nil
}

func bounded(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}

// param returns the query parameter name read by parse, or def when it is
// absent or a problem came first.
func param[T any](p *params, name string, def T, parse func(string) (T, error)) T {
	if p.err != nil || p.v == nil {
		return def
	}
	vs, ok := p.v[name]
	if !ok || len(vs) == 0 {
		return def
	}
	v, err := parse(vs[0])
	if err != nil {
		p.fail(err)
		return def
	}
	return v
}

// enum returns the query parameter name when valid says it is one of
// oneOf, or def when it is absent.
func enum[T ~string](p *params, name string, def T, valid func(T) bool, oneOf string) T {
	return param(p, name, def, func(s string) (T, error) {
		if v := T(s); valid(v) {
			return v, nil
		}
		return def, cloud.Errorf(cloud.EINVALID, "%s: must be one of %s (got %s)", name, oneOf, bounded(s))
	})
}

// limit reads "limit" in [1, max], default def.
func (p *params) limit(def, max int) int {
	return param(p, "limit", def, func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > max {
			return 0, cloud.Errorf(cloud.EINVALID, "limit: must be an integer between 1 and %d (got %s)", max, bounded(s))
		}
		return n, nil
	})
}

// cursor reads the cursor; a value that cannot be an id is invalid_cursor
// at once, one that is not an item of the list is left to the store.
func (p *params) cursor() string {
	return param(p, "cursor", "", func(s string) (string, error) {
		if !ids.Valid(s) {
			return "", cloud.Errorf(cloud.ECURSOR, "cursor: not a cursor of this list")
		}
		return s, nil
	})
}

// page reads limit (in [1, max], default def) and cursor.
func (p *params) page(def, max int) cloud.Page {
	n := p.limit(def, max)
	return cloud.Page{Limit: n, Cursor: p.cursor()}
}

func (p *params) severity() resource.Severity {
	return enum(p, "severity", "", resource.Severity.Valid, "INFO, WARNING, ERROR, CRITICAL")
}

func (p *params) status() resource.DeviceStatus {
	return enum(p, "status", "", resource.DeviceStatus.Valid, "ONLINE, OFFLINE, CONNECTING, ERROR, PROVISIONING, REBOOTING, UPDATING")
}

func (p *params) state() resource.AlertState {
	return enum(p, "state", resource.AlertActive, resource.AlertState.Valid, "ACTIVE, ACKNOWLEDGED, RESOLVED")
}

// eventType is the exact-match filter of GET /events: 1..100 characters of
// letters, digits, '.', '_' and '-'.
func (p *params) eventType() string {
	return param(p, "type", "", func(s string) (string, error) {
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
	})
}

func (p *params) deviceID() string {
	return param(p, "deviceId", "", func(s string) (string, error) {
		if !ids.Valid(s) {
			return "", cloud.Errorf(cloud.EINVALID, "deviceId: not a device id (got %s)", bounded(s))
		}
		return s, nil
	})
}

// timestamp reads an RFC 3339 timestamp; nil when absent.
func (p *params) timestamp(name string) *time.Time {
	return param(p, name, nil, func(s string) (*time.Time, error) {
		t, err := resource.ParseTime(s)
		if err != nil {
			return nil, cloud.Errorf(cloud.EINVALID, "%s: must be an RFC 3339 timestamp in years 0001 to 9999, such as 2026-01-02T15:04:05.000Z (got %s)", name, bounded(s))
		}
		return &t, nil
	})
}

// metricsWindow reads from/to: to defaults to now, from to one hour before
// to; from after to is a validation error.
func (p *params) metricsWindow(now time.Time) (from, to time.Time) {
	f, t := p.timestamp("from"), p.timestamp("to")
	if p.err != nil {
		return
	}
	if to = now.UTC(); t != nil {
		to = *t
	}
	if f != nil {
		from = *f
	} else if from = to.Add(-time.Hour); from.Before(resource.MinTime) {
		from = resource.MinTime
	}
	if from.After(to) {
		p.fail(cloud.Errorf(cloud.EINVALID, "from: must not be after to (from %s, to %s)", resource.FormatTime(from), resource.FormatTime(to)))
	}
	return
}

// pointID returns {pointId}: "<channelId>.<name>" with a channel id of at
// most 32 characters and a name as DESIGN.md allows ([a-z][a-z0-9_]{0,31}).
// Anything else cannot name a point: not_found without asking the store,
// as a channel id that cannot be one is.
func (p *params) pointID() string {
	id := chi.URLParam(p.r, "pointId")
	if p.err == nil && !validPointID(id) {
		p.fail(cloud.Errorf(cloud.ENOTFOUND, "point not found (a point id is <channelId>.<name>, such as rs485-1.boiler_temp)"))
	}
	return id
}

// validPointID reports whether id has the shape of a point id.
func validPointID(id string) bool {
	ch, name, ok := serialcfg.SplitPointID(id)
	if !ok || len(ch) > 32 || len(name) > serialcfg.MaxPointName || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Bounds of the samples route's step.
const (
	minStep = time.Second
	maxStep = 24 * time.Hour
)

// step reads "step", the bucket width of the samples route: a Go duration
// ("30s", "5m", "1h30m") or a whole number of days ("1d"), a whole number
// of seconds from 1s to 1d; 0 when absent (raw samples).
func (p *params) step() time.Duration {
	return param(p, "step", 0, func(s string) (time.Duration, error) {
		d, err := parseStep(s)
		if err != nil {
			return 0, cloud.Errorf(cloud.EINVALID, "step: %s (got %s)", err.Error(), bounded(s))
		}
		return d, nil
	})
}

// parseStep parses a step; its error says what a step must be.
func parseStep(s string) (time.Duration, error) {
	const must = "must be a duration from 1s to 1d in whole seconds, such as 30s, 5m, 1h or 1d"
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 1 || days[0] == '+' {
			return 0, errors.New(must)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, errors.New(must)
		}
	}
	if d < minStep || d > maxStep || d%time.Second != 0 {
		return 0, errors.New(must)
	}
	return d, nil
}

// tags returns the repeatable tag parameter (GET /devices?tag=T&tag=U):
// each cloud.TagPattern, at most cloud.MaxDeviceTags, sorted, deduplicated
// and joined by "," (cloud.DeviceFilter.Tags); "" when absent.
func (p *params) tags() string {
	if p.err != nil || p.v == nil {
		return ""
	}
	vs := p.v["tag"]
	if len(vs) > cloud.MaxDeviceTags {
		p.fail(cloud.Errorf(cloud.EINVALID, "tag: at most %d tags", cloud.MaxDeviceTags))
		return ""
	}
	for _, t := range vs {
		if !cloud.TagPattern.MatchString(t) {
			p.fail(cloud.Errorf(cloud.EINVALID, "tag: %s is not a tag (lowercase letters, digits and _.:- , at most 32)", bounded(t)))
			return ""
		}
	}
	return strings.Join(slices.Compact(slices.Sorted(slices.Values(vs))), ",")
}

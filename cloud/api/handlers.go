package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Every handler has one shape: read its parameters (params keeps the first
// problem), check once, ask the service, answer (reply for {"data": ...},
// cachedList for the two hot lists), returning the error to answer with.

// Limits of the list endpoints: default and maximum page sizes.
const (
	devicesDefault, devicesMax = 25, 100
	alertsDefault, alertsMax   = 25, 100
	eventsDefault, eventsMax   = 50, 200
	metricsDefault, metricsMax = 200, 1000
)

// objectOrEmpty returns raw, or {} for an absent or null data or payload
// object.
func objectOrEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || isNull(raw) {
		return json.RawMessage(`{}`)
	}
	return raw
}

// reply answers 200 {"data": v}, or returns err when there is one.
func reply[T any](s *Server, w http.ResponseWriter, v T, err error) error {
	return replyBody(s, w, resource.One[T]{Data: v}, err)
}

// replyBody answers 200 with body as it is (a list that carries its own
// "data"), or returns err when there is one.
func replyBody(s *Server, w http.ResponseWriter, body any, err error) error {
	if err == nil {
		s.writeJSON(w, http.StatusOK, body)
	}
	return err
}

// nonNil returns l, or an empty slice for nil: a list answers [], never null.
func nonNil[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}

// cachedList answers a hot list (GET /devices, GET /alerts): from its page
// cache while the store's data version allows, else from the store, encoded
// by appendList and kept in the cache.
func cachedList[F comparable, L any](s *Server, w http.ResponseWriter, r *http.Request, org string, pages *pageCache[F], f F,
	list func(ctx context.Context, orgID string, f F) (L, error), appendList func([]byte, *L) ([]byte, error)) error {
	ver, cached := s.dataVersion(w, r)
	if cached {
		if p := pages.get(ver, org, f); p.body != nil {
			s.writePage(w, r, p)
			return nil
		}
	}
	l, err := list(r.Context(), org, f)
	if err != nil {
		return err
	}
	return s.writeAppended(w, r, func(b []byte) ([]byte, error) {
		b, err := appendList(b, &l)
		if err == nil && cached {
			pages.put(ver, org, f, b)
		}
		return b, err
	})
}

// dataVersion returns the request's data version (requestVersion: the one
// its key was checked at); ok is false when pages cannot be cached (no
// Config.Versioner, or it failed).
func (s *Server) dataVersion(w http.ResponseWriter, r *http.Request) (v uint64, ok bool) {
	info := infoFrom(w)
	if info == nil {
		var once requestVersion
		return once.get(r.Context(), s.cfg.Versioner)
	}
	return info.version.get(r.Context(), s.cfg.Versioner)
}

func (s *Server) listDevices(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	f, ok := s.queries.devices.get(r.URL.RawQuery)
	if !ok {
		p := params{r: r}
		p.query("limit", "cursor", "status", "tag"+repeatable)
		f.Page = p.page(devicesDefault, devicesMax)
		f.Status = p.status()
		f.Tags = p.tags()
		if p.err != nil {
			return p.err
		}
		s.queries.devices.put(r.URL.RawQuery, f)
	}
	return cachedList(s, w, r, key.OrgID, &s.pages.devices, f, s.cfg.Devices.ListDevices,
		func(b []byte, l *resource.List[resource.Device]) ([]byte, error) { return appendDeviceList(b, l), nil })
}

func (s *Server) listAlerts(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	f, ok := s.queries.alerts.get(r.URL.RawQuery)
	if !ok {
		p := params{r: r}
		p.query("state", "severity", "deviceId", "limit", "cursor")
		f.Page = p.page(alertsDefault, alertsMax)
		f.State = p.state()
		f.Severity = p.severity()
		f.DeviceID = p.deviceID()
		if p.err != nil {
			return p.err
		}
		s.queries.alerts.put(r.URL.RawQuery, f)
	}
	return cachedList(s, w, r, key.OrgID, &s.pages.alerts, f, s.cfg.Alerts.ListAlerts,
		func(b []byte, l *resource.List[resource.Alert]) ([]byte, error) {
			for i := range l.Data {
				fixAlert(&l.Data[i])
			}
			return appendAlertList(b, l)
		})
}

// getOfDevice answers a GET of one device's resource (the device, its serial
// state, its telemetry): the device id from the path and no query
// parameter, then get from the service, then fix (nil: none) on what it
// gives, answered as {"data": ...}.
func getOfDevice[T any](s *Server, w http.ResponseWriter, r *http.Request, key *cloud.APIKey,
	get func(ctx context.Context, orgID, deviceID string) (T, error), fix func(*T)) error {
	p := params{r: r}
	id := p.pathID("device")
	if p.query(); p.err != nil {
		return p.err
	}
	v, err := get(r.Context(), key.OrgID, id)
	if fix != nil {
		fix(&v)
	}
	return reply(s, w, v, err)
}

func (s *Server) getDevice(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	return getOfDevice(s, w, r, key, s.cfg.Devices.Device, fixDevice)
}

func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	p := params{r: r}
	id := p.pathID("device")
	p.query("from", "to", "limit")
	var mq cloud.MetricsQuery
	mq.From, mq.To = p.metricsWindow(s.now())
	mq.Limit = p.limit(metricsDefault, metricsMax)
	if p.err != nil {
		return p.err
	}
	m, err := s.cfg.Devices.Metrics(r.Context(), key.OrgID, id, mq)
	m.Data = nonNil(m.Data)
	return replyBody(s, w, m, err)
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	p := params{r: r}
	id := p.pathID("device")
	p.query("limit", "cursor", "severity", "type")
	var f cloud.EventFilter
	f.Page = p.page(eventsDefault, eventsMax)
	f.Severity = p.severity()
	f.Type = p.eventType()
	if p.err != nil {
		return p.err
	}
	list, err := s.cfg.Devices.Events(r.Context(), key.OrgID, id, f)
	list.Data = nonNil(list.Data)
	for i := range list.Data {
		list.Data[i].Data = objectOrEmpty(list.Data[i].Data)
	}
	return replyBody(s, w, list, err)
}

func (s *Server) getSerial(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	return getOfDevice(s, w, r, key, s.cfg.Serial.Serial, func(st *resource.SerialState) {
		st.Channels = nonNil(st.Channels)
		for i := range st.Channels {
			fixChannel(&st.Channels[i])
		}
	})
}

func fixChannel(c *resource.Channel) {
	c.Terminals = nonNil(c.Terminals)
}

// serialPatchBody is PATCH /serial's body; raw members tell "absent" from
// "null" and give each wrong type its own message.
type serialPatchBody struct {
	Mode           json.RawMessage `json:"mode"`
	WebhookURL     json.RawMessage `json:"webhookUrl"`
	WebhookEnabled json.RawMessage `json:"webhookEnabled"`
	Enabled        json.RawMessage `json:"enabled"` // the serial I/O switch (additive)
}

// decodeSerialPatch decodes and validates a PATCH /serial body strictly.
func decodeSerialPatch(body []byte) (cloud.SerialPatch, error) {
	var b serialPatchBody
	if err := jsonstrict.Decode(body, &b); err != nil {
		return cloud.SerialPatch{}, bodyError(err)
	}
	var p cloud.SerialPatch
	if b.Mode == nil && b.WebhookURL == nil && b.WebhookEnabled == nil && b.Enabled == nil {
		return p, cloud.Errorf(cloud.EINVALID, "body must set at least one of mode, webhookUrl, webhookEnabled, enabled")
	}
	if b.Mode != nil {
		var m string
		if isNull(b.Mode) || json.Unmarshal(b.Mode, &m) != nil {
			return p, cloud.Errorf(cloud.EINVALID, "mode: must be a string, one of managed, passthrough, both")
		}
		if !resource.ValidMode(m) {
			return p, cloud.Errorf(cloud.EINVALID, "mode: must be one of managed, passthrough, both (got %s)", bounded(m))
		}
		p.Mode = &m
	}
	if b.WebhookURL != nil {
		if isNull(b.WebhookURL) {
			p.ClearWebhookURL = true
		} else {
			var u string
			if json.Unmarshal(b.WebhookURL, &u) != nil {
				return p, cloud.Errorf(cloud.EINVALID, "webhookUrl: must be a string or null")
			}
			if err := cloud.ValidateWebhookURL("webhookUrl", u); err != nil {
				return p, err
			}
			p.WebhookURL = &u
		}
	}
	var err error
	if p.WebhookEnabled, err = boolMember("webhookEnabled", b.WebhookEnabled); err != nil {
		return p, err
	}
	if p.Enabled, err = boolMember("enabled", b.Enabled); err != nil {
		return p, err
	}
	return p, nil
}

// boolMember decodes a boolean member of a PATCH body: nil when absent,
// EINVALID naming it when null or not a boolean.
func boolMember(name string, raw json.RawMessage) (*bool, error) {
	if raw == nil {
		return nil, nil
	}
	var v bool
	if isNull(raw) || json.Unmarshal(raw, &v) != nil {
		return nil, cloud.Errorf(cloud.EINVALID, "%s: must be a boolean", name)
	}
	return &v, nil
}

func isNull(b json.RawMessage) bool { return string(b) == "null" }

func (s *Server) patchSerial(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	return patchOfDevice(s, w, r, key, decodeSerialPatch, s.cfg.Serial.PatchSerial, nil)
}

// patchOfDevice answers a PATCH of one device's resource (the device, its
// serial state): the device id from the path and no query parameter, the
// JSON body decoded by decode, then patch from the service, then fix (nil:
// none) on what it gives, answered as {"data": ...}.
func patchOfDevice[P, T any](s *Server, w http.ResponseWriter, r *http.Request, key *cloud.APIKey, decode func([]byte) (P, error),
	patch func(ctx context.Context, orgID, deviceID string, p P) (T, error), fix func(*T)) error {
	p := params{r: r}
	id := p.pathID("device")
	if p.query(); p.err != nil {
		return p.err
	}
	body, err := readJSONBody(w, r)
	if err != nil {
		return err
	}
	in, err := decode(body)
	if err != nil {
		return err
	}
	v, err := patch(r.Context(), key.OrgID, id, in)
	if fix != nil {
		fix(&v)
	}
	return reply(s, w, v, err)
}

func (s *Server) getTelemetry(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	return getOfDevice(s, w, r, key, s.cfg.Serial.Telemetry, func(t *resource.SerialTelemetry) {
		t.Channels = nonNil(t.Channels)
	})
}

func (s *Server) getChannel(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	p := params{r: r}
	id, chID := p.pathID("device"), p.channelID()
	if p.query(); p.err != nil {
		return p.err
	}
	c, err := s.cfg.Serial.Channel(r.Context(), key.OrgID, id, chID)
	fixChannel(&c)
	return reply(s, w, c, err)
}

// putChannel configures one channel. Order of checks: authentication and
// scope (401, 403); the request itself (400 unknown query parameter, 415
// media type, 413 size); then the resource: 404 device, 409
// capability_unavailable, 404 channel, 409 channel_not_configurable, 409
// channel_unavailable; then the body: 400 invalid_json, 400 kind_mismatch,
// 400 validation_error naming the field.
func (s *Server) putChannel(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	p := params{r: r}
	id, chID := p.pathID("device"), p.channelID()
	if p.query(); p.err != nil {
		return p.err
	}
	body, err := readJSONBody(w, r)
	if err != nil {
		return err
	}
	ch, err := s.cfg.Serial.Channel(r.Context(), key.OrgID, id, chID)
	switch {
	case err != nil:
		return err
	case !ch.Configurable:
		return cloud.Errorf(cloud.ENOTCONFIG, "channel %s is not configurable", ch.ID)
	case !ch.Available:
		return cloud.Errorf(cloud.EUNAVAILABLE, "channel %s is not available on this device", ch.ID)
	}
	cfg, err := serialcfg.DecodeFor(ch.Group, body)
	if errors.Is(err, serialcfg.ErrKindMismatch) {
		return cloud.Errorf(cloud.EKIND, "kind: must be %q, the group of channel %s", ch.Group, ch.ID)
	} else if err != nil {
		return bodyError(err)
	}
	res, err := s.cfg.Serial.PutChannel(r.Context(), key.OrgID, id, chID, cfg)
	return reply(s, w, res, err)
}

func fixAlert(a *resource.Alert) {
	a.Payload = objectOrEmpty(a.Payload)
}

func (s *Server) acknowledge(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	return s.alertAction(w, r, key, s.cfg.Alerts.Acknowledge)
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	return s.alertAction(w, r, key, s.cfg.Alerts.Resolve)
}

// alertAction runs acknowledge or resolve. These take no body; one that is
// sent is ignored (up to MaxBodyBytes, like every body).
func (s *Server) alertAction(w http.ResponseWriter, r *http.Request, key *cloud.APIKey,
	act func(ctx context.Context, orgID, id string) (resource.Alert, error)) error {
	id, err := actionID(r, "alert")
	if err != nil {
		return err
	}
	a, err := act(r.Context(), key.OrgID, id)
	fixAlert(&a)
	return reply(s, w, a, err)
}

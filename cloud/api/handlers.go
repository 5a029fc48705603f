package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Limits of the list endpoints: default and maximum page sizes.
const (
	devicesDefault, devicesMax = 25, 100
	alertsDefault, alertsMax   = 25, 100
	eventsDefault, eventsMax   = 50, 200
	metricsDefault, metricsMax = 200, 1000
)

// emptyObject is what an absent data or payload object renders as.
func emptyObject() json.RawMessage { return json.RawMessage(`{}`) }

// pathID returns the {id} path parameter, or a not_found error when it
// cannot be an id (so garbage never reaches the store).
func pathID(r *http.Request, what string) (string, error) {
	id := chi.URLParam(r, "id")
	if !ids.Valid(id) {
		return "", cloud.Errorf(cloud.ENOTFOUND, "%s not found", what)
	}
	return id, nil
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) { s.writeError(w, r, err) }

func (s *Server) listDevices(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	q, err := parseQuery(r.URL.RawQuery, "limit", "cursor", "status")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var f cloud.DeviceFilter
	if f.Page, err = q.page(devicesDefault, devicesMax); err != nil {
		s.fail(w, r, err)
		return
	}
	if f.Status, err = q.status(); err != nil {
		s.fail(w, r, err)
		return
	}
	ver, cached := s.dataVersion(r.Context())
	if cached {
		if body := s.pages.devices.get(ver, key.OrgID, f); body != nil {
			s.writeBody(w, body)
			return
		}
	}
	list, err := s.cfg.Devices.ListDevices(r.Context(), key.OrgID, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeAppended(w, r, func(b []byte) ([]byte, error) {
		b = appendDeviceList(b, &list)
		if cached {
			s.pages.devices.put(ver, key.OrgID, f, b)
		}
		return b, nil
	})
}

func (s *Server) getDevice(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	id, err := pathID(r, "device")
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := s.cfg.Devices.Device(r.Context(), key.OrgID, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, resource.One[resource.DeviceDetail]{Data: d})
}

func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	id, err := pathID(r, "device")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q, err := parseQuery(r.URL.RawQuery, "from", "to", "limit")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var mq cloud.MetricsQuery
	if mq.From, mq.To, err = q.metricsWindow(s.now()); err != nil {
		s.fail(w, r, err)
		return
	}
	if mq.Limit, err = q.limit(metricsDefault, metricsMax); err != nil {
		s.fail(w, r, err)
		return
	}
	m, err := s.cfg.Devices.Metrics(r.Context(), key.OrgID, id, mq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if m.Data == nil {
		m.Data = []resource.MetricSample{}
	}
	s.writeJSON(w, http.StatusOK, m)
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	id, err := pathID(r, "device")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q, err := parseQuery(r.URL.RawQuery, "limit", "cursor", "severity", "type")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var f cloud.EventFilter
	if f.Page, err = q.page(eventsDefault, eventsMax); err != nil {
		s.fail(w, r, err)
		return
	}
	if f.Severity, err = q.severity(); err != nil {
		s.fail(w, r, err)
		return
	}
	if f.Type, err = q.eventType(); err != nil {
		s.fail(w, r, err)
		return
	}
	list, err := s.cfg.Devices.Events(r.Context(), key.OrgID, id, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if list.Data == nil {
		list.Data = []resource.Event{}
	}
	for i := range list.Data {
		if len(list.Data[i].Data) == 0 || string(list.Data[i].Data) == "null" {
			list.Data[i].Data = emptyObject()
		}
	}
	s.writeJSON(w, http.StatusOK, list)
}

func (s *Server) getSerial(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	id, err := pathID(r, "device")
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st, err := s.cfg.Serial.Serial(r.Context(), key.OrgID, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if st.Channels == nil {
		st.Channels = []resource.Channel{}
	}
	for i := range st.Channels {
		fixChannel(&st.Channels[i])
	}
	s.writeJSON(w, http.StatusOK, resource.One[resource.SerialState]{Data: st})
}

func fixChannel(c *resource.Channel) {
	if c.Terminals == nil {
		c.Terminals = []string{}
	}
}

// serialPatchBody is PATCH /serial's body; raw members tell "absent" from
// "null" and give each wrong type its own message.
type serialPatchBody struct {
	Mode           json.RawMessage `json:"mode"`
	WebhookURL     json.RawMessage `json:"webhookUrl"`
	WebhookEnabled json.RawMessage `json:"webhookEnabled"`
}

// decodeSerialPatch decodes and validates a PATCH /serial body strictly.
func decodeSerialPatch(body []byte) (cloud.SerialPatch, error) {
	var b serialPatchBody
	if err := jsonstrict.Decode(body, &b); err != nil {
		return cloud.SerialPatch{}, bodyError(err)
	}
	var p cloud.SerialPatch
	if b.Mode == nil && b.WebhookURL == nil && b.WebhookEnabled == nil {
		return p, cloud.Errorf(cloud.EINVALID, "body must set at least one of mode, webhookUrl, webhookEnabled")
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
	if b.WebhookEnabled != nil {
		var e bool
		if isNull(b.WebhookEnabled) || json.Unmarshal(b.WebhookEnabled, &e) != nil {
			return p, cloud.Errorf(cloud.EINVALID, "webhookEnabled: must be a boolean")
		}
		p.WebhookEnabled = &e
	}
	return p, nil
}

func isNull(b json.RawMessage) bool { return string(b) == "null" }

func (s *Server) patchSerial(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	id, err := pathID(r, "device")
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body, err := readJSONBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := decodeSerialPatch(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.cfg.Serial.PatchSerial(r.Context(), key.OrgID, id, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, resource.One[resource.SerialPatchResult]{Data: res})
}

func (s *Server) getTelemetry(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	id, err := pathID(r, "device")
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.cfg.Serial.Telemetry(r.Context(), key.OrgID, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if t.Channels == nil {
		t.Channels = []resource.ChannelTelemetry{}
	}
	s.writeJSON(w, http.StatusOK, resource.One[resource.SerialTelemetry]{Data: t})
}

// channelID returns {channelId}; anything longer than a channel id can be
// is not_found without asking the store.
func channelID(r *http.Request) (string, error) {
	c := chi.URLParam(r, "channelId")
	if c == "" || len(c) > 32 {
		return "", cloud.Errorf(cloud.ENOTFOUND, "channel not found")
	}
	return c, nil
}

func (s *Server) getChannel(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	id, err := pathID(r, "device")
	var ch string
	if err == nil {
		ch, err = channelID(r)
	}
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	c, err := s.cfg.Serial.Channel(r.Context(), key.OrgID, id, ch)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fixChannel(&c)
	s.writeJSON(w, http.StatusOK, resource.One[resource.Channel]{Data: c})
}

// putChannel configures one channel. Order of checks: authentication and
// scope (401, 403); the request itself (400 unknown query parameter, 415
// media type, 413 size); then the resource: 404 device, 409
// capability_unavailable, 404 channel, 409 channel_not_configurable, 409
// channel_unavailable; then the body: 400 invalid_json, 400 kind_mismatch,
// 400 validation_error naming the field.
func (s *Server) putChannel(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	id, err := pathID(r, "device")
	var chID string
	if err == nil {
		chID, err = channelID(r)
	}
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body, err := readJSONBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ch, err := s.cfg.Serial.Channel(r.Context(), key.OrgID, id, chID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !ch.Configurable {
		s.fail(w, r, cloud.Errorf(cloud.ENOTCONFIG, "channel %s is not configurable", ch.ID))
		return
	}
	if !ch.Available {
		s.fail(w, r, cloud.Errorf(cloud.EUNAVAILABLE, "channel %s is not available on this device", ch.ID))
		return
	}
	cfg, err := serialcfg.DecodeFor(ch.Group, body)
	if err != nil {
		if errors.Is(err, serialcfg.ErrKindMismatch) {
			s.fail(w, r, cloud.Errorf(cloud.EKIND, "kind: must be %q, the group of channel %s", ch.Group, ch.ID))
			return
		}
		s.fail(w, r, bodyError(err))
		return
	}
	res, err := s.cfg.Serial.PutChannel(r.Context(), key.OrgID, id, chID, cfg)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, resource.One[resource.ChannelPutResult]{Data: res})
}

func (s *Server) listAlerts(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	q, err := parseQuery(r.URL.RawQuery, "state", "severity", "deviceId", "limit", "cursor")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var f cloud.AlertFilter
	if f.Page, err = q.page(alertsDefault, alertsMax); err != nil {
		s.fail(w, r, err)
		return
	}
	if f.State, err = q.state(); err != nil {
		s.fail(w, r, err)
		return
	}
	if f.Severity, err = q.severity(); err != nil {
		s.fail(w, r, err)
		return
	}
	if f.DeviceID, err = q.deviceID(); err != nil {
		s.fail(w, r, err)
		return
	}
	ver, cached := s.dataVersion(r.Context())
	if cached {
		if body := s.pages.alerts.get(ver, key.OrgID, f); body != nil {
			s.writeBody(w, body)
			return
		}
	}
	list, err := s.cfg.Alerts.ListAlerts(r.Context(), key.OrgID, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for i := range list.Data {
		fixAlert(&list.Data[i])
	}
	s.writeAppended(w, r, func(b []byte) ([]byte, error) {
		b, err := appendAlertList(b, &list)
		if err == nil && cached {
			s.pages.alerts.put(ver, key.OrgID, f, b)
		}
		return b, err
	})
}

// dataVersion returns the store's data version; ok is false when pages
// cannot be cached (no Config.Versioner, or it failed).
func (s *Server) dataVersion(ctx context.Context) (v uint64, ok bool) {
	if s.cfg.Versioner == nil {
		return 0, false
	}
	v, err := s.cfg.Versioner.DataVersion(ctx)
	return v, err == nil
}

func fixAlert(a *resource.Alert) {
	if len(a.Payload) == 0 || isNull(a.Payload) {
		a.Payload = emptyObject()
	}
}

func (s *Server) acknowledge(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	s.alertAction(w, r, key, s.cfg.Alerts.Acknowledge)
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) {
	s.alertAction(w, r, key, s.cfg.Alerts.Resolve)
}

// alertAction runs acknowledge or resolve. These take no body; one that is
// sent is ignored (up to MaxBodyBytes, like every body).
func (s *Server) alertAction(w http.ResponseWriter, r *http.Request, key *cloud.APIKey,
	act func(ctx context.Context, orgID, id string) (resource.Alert, error)) {
	id, err := pathID(r, "alert")
	if err == nil {
		_, err = parseQuery(r.URL.RawQuery)
	}
	if err == nil && r.ContentLength > MaxBodyBytes {
		err = tooLarge()
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	a, err := act(r.Context(), key.OrgID, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fixAlert(&a)
	s.writeJSON(w, http.StatusOK, resource.One[resource.Alert]{Data: a})
}

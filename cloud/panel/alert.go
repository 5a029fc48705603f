package panel

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/fleet/fleet/shared/resource"
)

// payloadRow is one value of an alert's payload.
type payloadRow struct{ Key, Value string }

type alertData struct {
	Alert      resource.Alert
	DeviceName string
	RuleName   string
	RuleFound  bool // the rule still exists: link to it
	Payload    []payloadRow
	Back       string
}

// alertPage is one alert (the page notification messages link to): its
// device, rule, state, severity, message, payload and times, and the
// actions the user's role allows. Another organization's alert is 404.
func (s *Server) alertPage(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	org := rq.User.OrgID
	a, err := s.cfg.Alerts.Alert(ctx, org, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	d := alertData{Alert: a, Back: "/panel/alerts/" + a.ID, Payload: payloadRows(a.Payload)}
	if dev, err := s.cfg.Devices.Device(ctx, org, a.DeviceID); err == nil {
		d.DeviceName = dev.Name
	}
	if rule, err := s.cfg.Rules.Rule(ctx, org, a.RuleID); err == nil {
		d.RuleName, d.RuleFound = rule.Name, true
	} else {
		for _, p := range d.Payload {
			if p.Key == "rule" {
				d.RuleName = p.Value
			}
		}
	}
	s.render(w, r, rq, http.StatusOK, "alert", "Alert: "+readable(a.Message), d)
}

// payloadRows lists a payload's values by key, strings unquoted and other
// values as JSON.
func payloadRows(raw json.RawMessage) []payloadRow {
	var m map[string]json.RawMessage
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &m) != nil {
		if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
			return nil
		}
		return []payloadRow{{Key: "payload", Value: string(raw)}}
	}
	rows := make([]payloadRow, 0, len(m))
	for k, v := range m {
		var str string
		if json.Unmarshal(v, &str) != nil {
			str = string(v)
		}
		rows = append(rows, payloadRow{Key: k, Value: str})
	}
	slices.SortFunc(rows, func(a, b payloadRow) int { return strings.Compare(a.Key, b.Key) })
	return rows
}

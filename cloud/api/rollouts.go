package api

import (
	"encoding/json"
	"net/http"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// The rollout and reboot routes (DESIGN.md "Fleet operations: tags,
// claiming, agent updates"), additive to the spec: /rollouts, its pause,
// resume and cancel, and POST /devices/{id}/reboot. The body of POST
// /rollouts is decoded strictly here; what a rollout must be (a version
// with a release, waves increasing to 100, healthFor in range, a scope
// naming devices of the organization) is checked by the store, whose
// EINVALID messages name the field.

// Limits of the rollout list: default and maximum page sizes.
const rolloutsDefault, rolloutsMax = 25, 100

// rolloutBody is POST /rollouts. The scope is decoded on its own
// (decodeOptional), so that a problem inside it names it
// ("scope.deviceIds[0]: ...") and null is refused; absent, it is every
// device of the organization.
type rolloutBody struct {
	Version     string          `json:"version"`
	Scope       json.RawMessage `json:"scope"`
	Waves       []int           `json:"waves"`
	MaxFailures *int            `json:"maxFailures"`
	HealthFor   string          `json:"healthFor"`
}

// rollout returns the body as the service takes it.
func (b rolloutBody) rollout() (resource.NewRollout, error) {
	nr := resource.NewRollout{Version: b.Version, Waves: b.Waves, MaxFailures: b.MaxFailures, HealthFor: b.HealthFor}
	err := decodeOptional("scope", b.Scope, &nr.Scope)
	return nr, err
}

// fixRollout gives a rollout's lists and counts their empty value instead
// of null.
func fixRollout(r *resource.Rollout) {
	r.Waves = nonNil(r.Waves)
	if r.Counts == nil {
		r.Counts = map[string]int{}
	}
}

// fixRolloutDetail is fixRollout and the devices.
func fixRolloutDetail(d *resource.RolloutDetail) {
	fixRollout(&d.Rollout)
	d.Devices = nonNil(d.Devices)
}

func (s *Server) listRollouts(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	p := params{r: r}
	p.query("limit", "cursor")
	page := p.page(rolloutsDefault, rolloutsMax)
	if p.err != nil {
		return p.err
	}
	l, err := s.cfg.Rollouts.ListRollouts(r.Context(), key.OrgID, page)
	l.Data = nonNil(l.Data)
	for i := range l.Data {
		fixRollout(&l.Data[i])
	}
	return replyBody(s, w, l, err)
}

func (s *Server) getRollout(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	id, err := routeID(r, "rollout")
	if err != nil {
		return err
	}
	d, err := s.cfg.Rollouts.Rollout(r.Context(), key.OrgID, id)
	fixRolloutDetail(&d)
	return reply(s, w, d, err)
}

func (s *Server) createRollout(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	var b rolloutBody
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	nr, err := b.rollout()
	if err != nil {
		return err
	}
	d, err := s.cfg.Rollouts.CreateRollout(r.Context(), key.OrgID, nr)
	fixRolloutDetail(&d)
	return created(s, w, d, err)
}

// rolloutAction returns the handler of POST /rollouts/{id}/{action}
// (pause, resume, cancel). These take no body; one that is sent is ignored
// (up to MaxBodyBytes, like every body), as for the alert actions.
func (s *Server) rolloutAction(action string) keyHandler {
	return func(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
		id, err := actionID(r, "rollout")
		if err != nil {
			return err
		}
		d, err := s.cfg.Rollouts.ActRollout(r.Context(), key.OrgID, id, action)
		fixRolloutDetail(&d)
		return reply(s, w, d, err)
	}
}

// rebootDevice is POST /devices/{id}/reboot: 202 {"data": {"commandId",
// "deviceId"}} once the command is queued; 409 conflict when the device is
// not connected. It takes no body (one sent is ignored, as above).
func (s *Server) rebootDevice(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	id, err := actionID(r, "device")
	if err != nil {
		return err
	}
	a, err := s.cfg.Rollouts.RebootDevice(r.Context(), key.OrgID, id)
	if err == nil {
		s.writeJSON(w, http.StatusAccepted, resource.One[cloud.RebootAccepted]{Data: a})
	}
	return err
}

// rolloutActions are the actions of POST /rollouts/{id}/{action}.
var rolloutActions = [...]string{"pause", "resume", "cancel"}

// rolloutRoutes mounts the rollout and reboot routes on api.
func (s *Server) rolloutRoutes(api apiRoutes) {
	api.Get("/rollouts", s.scoped(cloud.ScopeDevicesRead, s.listRollouts))
	api.Post("/rollouts", s.scoped(cloud.ScopeDevicesWrite, s.createRollout))
	api.Get("/rollouts/{id}", s.scoped(cloud.ScopeDevicesRead, s.getRollout))
	for _, a := range rolloutActions {
		api.Post("/rollouts/{id}/"+a, s.scoped(cloud.ScopeDevicesWrite, s.rolloutAction(a)))
	}
	api.Post("/devices/{id}/reboot", s.scoped(cloud.ScopeDevicesWrite, s.rebootDevice))
}

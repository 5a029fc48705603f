package panel

import (
	"net/http"
	"net/url"

	"github.com/fleet/fleet/cloud"
)

// The device page's operations (issue 28): "Reboot" and the serial I/O
// switch.

// rebootDevice asks for confirmation, then queues a reboot command for the
// device. A device that is not connected (409) is said so on its page and
// nothing is queued.
func (s *Server) rebootDevice(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	dev, err := s.cfg.Devices.Device(ctx, rq.User.OrgID, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	back := "/panel/devices/" + url.PathEscape(dev.ID)
	if s.askFirst(w, r, rq, "Reboot device", confirmData{
		Heading: "Reboot “" + dev.Name + "”?",
		Message: "The gateway restarts now: its channels stop until it is back, usually within a few minutes. Its offline alert is held for 15 minutes.",
		Action:  back + "/reboot", Button: "Reboot now", Cancel: back,
	}) {
		return
	}
	acc, err := s.cfg.Rollouts.RebootDevice(ctx, rq.User.OrgID, dev.ID)
	if cloud.ErrorCode(err) == cloud.ECONFLICT {
		d, derr := s.deviceData(ctx, rq, dev.ID, url.Values{})
		if derr != nil {
			s.fail(w, r, rq, derr)
			return
		}
		d.RebootError = cloud.ErrorMessage(err)
		s.render(w, r, rq, http.StatusConflict, "device", d.Device.Name, d)
		return
	}
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: device reboot", "device_id", dev.ID, "command_id", acc.CommandID, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	s.flash(r, "Reboot sent to “"+dev.Name+"”: it shows REBOOTING, then goes offline and comes back.")
	http.Redirect(w, r, back+"#details", http.StatusSeeOther)
}

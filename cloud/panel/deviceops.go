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

// switchSerial turns the device's serial I/O on or off (enabled=true or
// false); off asks for confirmation first: the agent then closes every
// channel's port and polls and sends nothing.
func (s *Server) switchSerial(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	dev, err := s.cfg.Devices.Device(ctx, rq.User.OrgID, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	back := "/panel/devices/" + url.PathEscape(dev.ID)
	var on bool
	switch r.PostFormValue("enabled") {
	case "true":
		on = true
	case "false":
		if s.askFirst(w, r, rq, "Turn serial I/O off", confirmData{
			Heading: "Turn serial I/O off on “" + dev.Name + "”?",
			Message: "The agent closes every channel's port: no polling, no sending, no passthrough, and each channel reports the error “disabled” until it is turned on again.",
			Action:  back + "/serial/enabled", Button: "Turn serial I/O off", Cancel: back + "#serial",
			Fields: map[string]string{"enabled": "false"},
		}) {
			return
		}
	default:
		s.fail(w, r, rq, cloud.Errorf(cloud.EINVALID, "enabled: must be true or false"))
		return
	}
	if _, err := s.cfg.Serial.PatchSerial(ctx, rq.User.OrgID, dev.ID, cloud.SerialPatch{Enabled: &on}); err != nil {
		s.fail(w, r, rq, err)
		return
	}
	s.log.Info("panel: serial I/O switched", "device_id", dev.ID, "enabled", on, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	if on {
		s.flash(r, "Serial I/O turned on; the agent opens its channels at once if connected.")
	} else {
		s.flash(r, "Serial I/O turned off; the agent closes its channels at once if connected.")
	}
	http.Redirect(w, r, back+"#serial", http.StatusSeeOther)
}

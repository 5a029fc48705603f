package panel

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// deviceForm is the device page's "Edit device" form: name, location,
// notes and tags (comma-separated), as typed.
type deviceForm struct {
	Name, Location, Notes, Tags string
	Errors                      map[string]string // by field: name, location, notes, tags; "" for the form
}

func newDeviceForm(d resource.DeviceDetail) deviceForm {
	f := deviceForm{Name: d.Name, Location: d.Location, Tags: strings.Join(d.Tags, ", ")}
	if d.Notes != nil {
		f.Notes = *d.Notes
	}
	return f
}

// patch is the form as a DevicePatch: every field set, empty notes
// cleared, tags split at commas.
func (f *deviceForm) patch() cloud.DevicePatch {
	p := cloud.DevicePatch{Name: &f.Name, Location: &f.Location}
	if strings.TrimSpace(f.Notes) == "" {
		p.ClearNotes = true
	} else {
		p.Notes = &f.Notes
	}
	tags := []string{}
	for _, t := range strings.Split(f.Tags, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tags = append(tags, t)
		}
	}
	p.Tags = &tags
	return p
}

// editDevice saves the device's name, location, notes and tags
// (DeviceService.PatchDevice, which validates them); an error is shown
// beside the field it names, with what was typed, and nothing is saved.
func (s *Server) editDevice(w http.ResponseWriter, r *http.Request, rq *request) {
	ctx := r.Context()
	d, err := s.deviceData(ctx, rq, r.PathValue("id"), url.Values{})
	if err != nil {
		s.fail(w, r, rq, err)
		return
	}
	f := &d.Edit
	f.Name = strings.TrimSpace(r.PostFormValue("name"))
	f.Location = strings.TrimSpace(r.PostFormValue("location"))
	f.Notes = strings.ReplaceAll(r.PostFormValue("notes"), "\r\n", "\n")
	f.Tags = r.PostFormValue("tags")
	if _, err := s.cfg.Devices.PatchDevice(ctx, rq.User.OrgID, d.Device.ID, f.patch()); err != nil {
		if cloud.ErrorCode(err) != cloud.EINVALID {
			s.fail(w, r, rq, err)
			return
		}
		msg := cloud.ErrorMessage(err)
		field := errorField(msg)
		switch field {
		case "name", "location", "notes", "tags":
		default:
			field = ""
		}
		f.Errors = map[string]string{field: msg}
		s.render(w, r, rq, http.StatusBadRequest, "device", d.Device.Name, d)
		return
	}
	s.log.Info("panel: device edited", "device_id", d.Device.ID, "user_id", rq.User.ID, "org_id", rq.User.OrgID)
	s.flash(r, "Device saved.")
	http.Redirect(w, r, "/panel/devices/"+url.PathEscape(d.Device.ID)+"#details", http.StatusSeeOther)
}

package api

import (
	"encoding/json"
	"net/http"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/resource"
)

// fixDevice makes a device's tags [] when it has none.
func fixDevice(d *resource.DeviceDetail) { d.Tags = nonNil(d.Tags) }

// patchDevice is PATCH /devices/{id}: name, location, notes (null clears)
// and tags, checked by the service; {data: DeviceDetail}.
func (s *Server) patchDevice(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error {
	return patchOfDevice(s, w, r, key, decodeDevicePatch, s.cfg.Devices.PatchDevice, fixDevice)
}

// devicePatchBody is PATCH /devices/{id}'s body; raw members tell "absent"
// from "null" and give each wrong type its own message.
type devicePatchBody struct {
	Name     json.RawMessage `json:"name"`
	Location json.RawMessage `json:"location"`
	Notes    json.RawMessage `json:"notes"`
	Tags     json.RawMessage `json:"tags"`
}

// decodeDevicePatch decodes a PATCH /devices/{id} body strictly; the
// values themselves are checked by cloud.DevicePatch.Check.
func decodeDevicePatch(body []byte) (cloud.DevicePatch, error) {
	var b devicePatchBody
	if err := jsonstrict.Decode(body, &b); err != nil {
		return cloud.DevicePatch{}, bodyError(err)
	}
	var p cloud.DevicePatch
	if b.Name == nil && b.Location == nil && b.Notes == nil && b.Tags == nil {
		return p, cloud.Errorf(cloud.EINVALID, "body must set at least one of name, location, notes, tags")
	}
	str := func(field string, raw json.RawMessage) (*string, error) {
		var v string
		if raw == nil {
			return nil, nil
		}
		if isNull(raw) || json.Unmarshal(raw, &v) != nil {
			return nil, cloud.Errorf(cloud.EINVALID, "%s: must be a string", field)
		}
		return &v, nil
	}
	var err error
	if p.Name, err = str("name", b.Name); err != nil {
		return p, err
	}
	if p.Location, err = str("location", b.Location); err != nil {
		return p, err
	}
	if b.Notes != nil {
		if isNull(b.Notes) {
			p.ClearNotes = true
		} else if p.Notes, err = str("notes", b.Notes); err != nil {
			return p, cloud.Errorf(cloud.EINVALID, "notes: must be a string or null")
		}
	}
	if b.Tags != nil {
		var tags []string
		if isNull(b.Tags) || json.Unmarshal(b.Tags, &tags) != nil {
			return p, cloud.Errorf(cloud.EINVALID, "tags: must be an array of strings")
		}
		p.Tags = &tags
	}
	return p, nil
}

package cloud

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Check checks a PATCH /devices/{id} and returns it with its name and
// location trimmed and its tags deduplicated and sorted: the name as
// `device add` checks it (ValidName), the location too unless it is
// empty (no location), notes at most MaxNotesLength characters of
// printable UTF-8 text (line breaks and tabs allowed), tags with
// CheckDeviceTags. Errors are EINVALID naming the field.
func (p DevicePatch) Check() (DevicePatch, error) {
	var err error
	if p.Name != nil {
		name, err := ValidName("name", *p.Name)
		if err != nil {
			return p, err
		}
		p.Name = &name
	}
	if p.Location != nil {
		loc := strings.TrimSpace(*p.Location)
		if loc != "" {
			if loc, err = ValidName("location", loc); err != nil {
				return p, err
			}
		}
		p.Location = &loc
	}
	if p.ClearNotes && p.Notes != nil {
		return p, Errorf(EINVALID, "notes: both set and cleared")
	}
	if p.Notes != nil {
		if err := checkNotes(*p.Notes); err != nil {
			return p, err
		}
	}
	if p.Tags != nil {
		tags, err := CheckDeviceTags(*p.Tags)
		if err != nil {
			return p, err
		}
		p.Tags = &tags
	}
	return p, nil
}

// checkNotes checks a device's notes.
func checkNotes(notes string) error {
	if !utf8.ValidString(notes) {
		return Errorf(EINVALID, "notes must be UTF-8 text")
	}
	if n := utf8.RuneCountInString(notes); n > MaxNotesLength {
		return Errorf(EINVALID, "notes is longer than %d characters (%d)", MaxNotesLength, n)
	}
	if strings.IndexFunc(notes, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' }) >= 0 {
		return Errorf(EINVALID, "notes must be printable text (line breaks and tabs allowed)")
	}
	return nil
}

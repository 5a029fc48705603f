package api

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/fleet/fleet/shared/resource"
)

// The two hot list responses (GET /devices, GET /alerts) are encoded by hand
// into a pooled buffer: encoding/json's reflection and its re-compaction of
// every resource.Time MarshalJSON result were a quarter of the request's CPU.
// The output is byte-for-byte what encoding/json (SetEscapeHTML(false))
// produces; encode_test.go proves it on tricky data.

// appendList appends {"data":[...],"pagination":{...}} and a newline, each
// item by appendItem.
func appendList[T any](b []byte, l *resource.List[T], appendItem func([]byte, *T) ([]byte, error)) ([]byte, error) {
	b = append(b, `{"data":[`...)
	for i := range l.Data {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendItem(b, &l.Data[i]); err != nil {
			return b, err
		}
	}
	b = append(b, `],`...)
	b = appendPagination(b, &l.Pagination)
	return append(b, "}\n"...), nil
}

func appendDeviceList(b []byte, l *resource.List[resource.Device]) []byte {
	b, _ = appendList(b, l, func(b []byte, d *resource.Device) ([]byte, error) { return appendDevice(b, d), nil })
	return b
}

func appendDevice(b []byte, d *resource.Device) []byte {
	b = appendStringField(b, `{"id":`, d.ID)
	b = appendStringField(b, `,"name":`, d.Name)
	b = appendStringField(b, `,"serialNumber":`, d.SerialNumber)
	b = appendStringField(b, `,"status":`, string(d.Status))
	b = appendStringField(b, `,"model":`, d.Model)
	b = appendStringField(b, `,"firmwareVersion":`, d.FirmwareVersion)
	b = appendTimePtrField(b, `,"lastSeen":`, d.LastSeen)
	b = appendStringField(b, `,"ipAddress":`, d.IPAddress)
	b = appendStringField(b, `,"location":`, d.Location)
	b = appendTimeField(b, `,"createdAt":`, d.CreatedAt)
	// tags: always an array, [] when none (also for a nil slice).
	b = append(b, `,"tags":[`...)
	for i, t := range d.Tags {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, t)
	}
	return append(b, `]}`...)
}

func appendAlertList(b []byte, l *resource.List[resource.Alert]) ([]byte, error) {
	return appendList(b, l, appendAlert)
}

func appendAlert(b []byte, a *resource.Alert) ([]byte, error) {
	b = appendStringField(b, `{"id":`, a.ID)
	b = appendStringField(b, `,"state":`, string(a.State))
	b = appendStringField(b, `,"severity":`, string(a.Severity))
	b = appendStringField(b, `,"message":`, a.Message)
	b = append(b, `,"payload":`...)
	var err error
	if b, err = appendRaw(b, a.Payload); err != nil {
		return b, err
	}
	b = appendStringField(b, `,"deviceId":`, a.DeviceID)
	b = appendStringField(b, `,"ruleId":`, a.RuleID)
	b = appendTimePtrField(b, `,"acknowledgedAt":`, a.AcknowledgedAt)
	b = appendTimePtrField(b, `,"resolvedAt":`, a.ResolvedAt)
	b = appendTimeField(b, `,"createdAt":`, a.CreatedAt)
	return append(b, '}'), nil
}

// appendRaw appends a json.RawMessage compacted, as encoding/json does; nil
// is null.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return append(b, "null"...), nil
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return b, err
	}
	return buf.Bytes(), nil
}

func appendPagination(b []byte, p *resource.Pagination) []byte {
	b = append(b, `"pagination":{"nextCursor":`...)
	if p.NextCursor == nil {
		b = append(b, "null"...)
	} else {
		b = appendString(b, *p.NextCursor)
	}
	b = append(b, `,"hasMore":`...)
	b = strconv.AppendBool(b, p.HasMore)
	return append(b, '}')
}

// appendStringField, appendTimeField and appendTimePtrField append one
// member: key is its name with the punctuation before the value
// (`,"name":`).
func appendStringField(b []byte, key, s string) []byte {
	return appendString(append(b, key...), s)
}

func appendTimeField(b []byte, key string, t resource.Time) []byte {
	return appendTime(append(b, key...), t)
}

func appendTimePtrField(b []byte, key string, t *resource.Time) []byte {
	return appendTimePtr(append(b, key...), t)
}

func appendTime(b []byte, t resource.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, resource.TimeLayout)
	return append(b, '"')
}

func appendTimePtr(b []byte, t *resource.Time) []byte {
	if t == nil {
		return append(b, "null"...)
	}
	return appendTime(b, *t)
}

// appendString appends s as a JSON string exactly as encoding/json does
// without HTML escaping: control characters as \n, \r, \t, \b, \f or
// \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

package resource

import (
	"bytes"
	"fmt"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// TimeLayout is the wire format of every timestamp: RFC 3339, UTC, with
// exactly three fractional digits.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// Time is a timestamp that marshals as TimeLayout.
type Time struct{ time.Time }

// T wraps t, truncated to milliseconds, in a Time.
func T(t time.Time) Time { return Time{t.UTC().Truncate(time.Millisecond)} }

// TP returns a pointer to T(t), or nil when t is zero; for nullable fields.
func TP(t time.Time) *Time {
	if t.IsZero() {
		return nil
	}
	v := T(t)
	return &v
}

// FormatTime formats t as TimeLayout.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// MinTime and MaxTime bound the timestamps ParseTime accepts: years 0001 to
// 9999 in UTC, the ones RFC 3339 can write.
var (
	MinTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)
)

// ParseTime parses an RFC 3339 timestamp (any fractional precision, any
// offset) and returns it in UTC. It must fall in years 0001 to 9999 in UTC.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("not an RFC 3339 timestamp: %q", s)
	}
	t = t.UTC()
	if t.Before(MinTime) || t.After(MaxTime) {
		return time.Time{}, fmt.Errorf("timestamp %q is outside years 0001 to 9999 (UTC)", s)
	}
	return t, nil
}

// MarshalJSON implements json.Marshaler.
func (t Time) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(TimeLayout)+2)
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, TimeLayout)
	return append(b, '"'), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *Time) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("timestamp must be a string")
	}
	v, err := ParseTime(string(b[1 : len(b)-1]))
	if err != nil {
		return err
	}
	t.Time = v
	return nil
}

// In CBOR (the agent link's binary codec, shared/protocol) a Time is an
// epoch-based date/time, RFC 8949 tag 1: an integer of seconds, or a float
// of seconds when there are milliseconds; null for the zero time. Decoding
// rounds to the millisecond, the precision of TimeLayout, so a Time read
// from CBOR equals the one read from the same instant in JSON.
var (
	timeEnc = mustMode(cbor.EncOptions{Time: cbor.TimeUnixDynamic, TimeTag: cbor.EncTagRequired}.EncMode())
	timeDec = mustMode(cbor.DecOptions{TimeTag: cbor.DecTagRequired, IndefLength: cbor.IndefLengthForbidden, MaxNestedLevels: 4}.DecMode())
)

func mustMode[M any](m M, err error) M {
	if err != nil {
		panic(err)
	}
	return m
}

// MarshalCBOR implements cbor.Marshaler: tag 1, to the millisecond (as
// MarshalJSON).
func (t Time) MarshalCBOR() ([]byte, error) {
	return timeEnc.Marshal(t.Time.Truncate(time.Millisecond))
}

// UnmarshalCBOR implements cbor.Unmarshaler: tag 0 or 1 (or null), rounded
// to the millisecond, in UTC, within years 0001 to 9999 as ParseTime.
func (t *Time) UnmarshalCBOR(b []byte) error {
	// Decoded in place: a local time.Time would escape to the heap.
	if err := timeDec.Unmarshal(b, &t.Time); err != nil {
		return err
	}
	t.Time = t.Round(time.Millisecond).UTC()
	if t.Before(MinTime) || t.After(MaxTime) {
		err := fmt.Errorf("timestamp %s is outside years 0001 to 9999 (UTC)", t.Format(time.RFC3339))
		t.Time = time.Time{}
		return err
	}
	return nil
}

package modbustest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseFault parses a fault written as [SLAVE:]KIND[=VALUE], where KIND is
// no-reply, bad-crc, exception=CODE, delay=DURATION or split=DURATION and
// SLAVE (default 0: every slave) the slave it applies to. Examples:
// "no-reply", "7:exception=2", "3:delay=300ms".
func ParseFault(s string) (slave int, f Fault, err error) {
	spec := s
	if i := strings.IndexByte(spec, ':'); i >= 0 {
		slave, err = strconv.Atoi(spec[:i])
		if err != nil || slave < 0 || slave > 247 {
			return 0, Fault{}, fmt.Errorf("fault %q: slave must be 0..247", s)
		}
		spec = spec[i+1:]
	}
	kind, val, hasVal := strings.Cut(spec, "=")
	dur := func() (time.Duration, error) {
		d, err := time.ParseDuration(val)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("fault %q: %s needs a duration such as 200ms", s, kind)
		}
		return d, nil
	}
	switch kind {
	case "no-reply":
		f.NoReply = true
	case "bad-crc":
		f.BadCRC = true
	case "exception":
		c, err := strconv.Atoi(val)
		if !hasVal || err != nil || c < 1 || c > 255 {
			return 0, Fault{}, fmt.Errorf("fault %q: exception needs a code 1..255", s)
		}
		f.Exception = byte(c)
	case "delay":
		if f.Delay, err = dur(); err != nil {
			return 0, Fault{}, err
		}
	case "split":
		if f.SplitGap, err = dur(); err != nil {
			return 0, Fault{}, err
		}
	default:
		return 0, Fault{}, fmt.Errorf("fault %q: kind must be no-reply, bad-crc, exception=N, delay=D or split=D", s)
	}
	return slave, f, nil
}

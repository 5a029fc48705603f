package agentlink

import (
	"strconv"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// decodeHeartbeat is a fast path for the commonest message: it decodes a
// heartbeat envelope written the plain way (exact key names, strings without
// escapes, no unknown fields) without reflection, and reports ok false for
// anything else, which then goes through encoding/json. For every input it
// accepts, the result equals encoding/json's (fastjson_test.go checks that).
// encoding/json costs about 30 µs per heartbeat, a third of the relay's CPU
// at 20,000 agents.
func decodeHeartbeat(b []byte) (m protocol.Message, ok bool) {
	return decodeHeartbeatCached(b, nil)
}

// decodeHeartbeatCached is decodeHeartbeat taking the strings it returns
// from cache when they are there (a connection's heartbeats repeat most of
// their strings), so that a heartbeat like the previous one allocates few.
// A nil cache allocates every string.
func decodeHeartbeatCached(b []byte, cache *strCache) (m protocol.Message, ok bool) {
	return decodeHeartbeatInto(b, cache, &protocol.Heartbeat{}, &protocol.VPN{})
}

// decodeHeartbeatInto is decodeHeartbeatCached decoding into hb (reusing
// its Channels array) and, when the message has one, vpn (and its
// LastHandshake, when it has one): a connection passes the same ones for
// every message, so a decoded heartbeat allocates nothing of its own. They
// hold the message until the next call; whatever outlives the message must
// be copied out of them.
func decodeHeartbeatInto(b []byte, cache *strCache, hb *protocol.Heartbeat, vpn *protocol.VPN) (m protocol.Message, ok bool) {
	cache.next()
	p := jparser{b: b, cache: cache, vpn: vpn, spare: hb.Channels[:0]}
	*hb = protocol.Heartbeat{}
	sawType, sawHB := false, false
	if !p.object(func(key string) bool {
		switch key {
		case "type":
			s, ok := p.str()
			m.Type, sawType = s, ok
			return ok
		case "heartbeat":
			sawHB = true
			return p.heartbeat(hb)
		}
		return false
	}) {
		return protocol.Message{}, false
	}
	p.ws()
	if p.i != len(p.b) || !sawType || !sawHB || m.Type != protocol.TypeHeartbeat {
		return protocol.Message{}, false
	}
	m.Heartbeat = hb
	return m, true
}

type jparser struct {
	b     []byte
	i     int
	cache *strCache
	vpn   *protocol.VPN // decoded into when the message has one
	// spare is the array that channels are decoded into (nil: a new one).
	spare []protocol.ChannelState
}

// strCache holds the strings of a connection's previous message, in the
// order they came: the heartbeats of one agent repeat most of their strings
// in the same places, so the k-th string of a message is compared (without
// a copy) with the k-th of the previous one and reused when equal.
type strCache struct {
	s []string
	i int // strings taken from the current message
}

// maxCachedStrings bounds the strings kept per connection.
const maxCachedStrings = 64

// next starts a message.
func (c *strCache) next() {
	if c != nil {
		c.i = 0
	}
}

func (c *strCache) get(b []byte) string {
	if c == nil {
		return string(b)
	}
	i := c.i
	c.i++
	if i < len(c.s) {
		if c.s[i] != string(b) { // compared without a copy
			c.s[i] = string(b)
		}
		return c.s[i]
	}
	s := string(b)
	if i < maxCachedStrings {
		c.s = append(c.s, s)
	}
	return s
}

// knownKey returns the field names of the messages the fast path decodes
// as constants (no allocation), and "" for any other key.
func knownKey(b []byte) string {
	switch string(b) {
	case "type":
		return "type"
	case "heartbeat":
		return "heartbeat"
	case "at":
		return "at"
	case "status":
		return "status"
	case "ipAddress":
		return "ipAddress"
	case "appliedVersion":
		return "appliedVersion"
	case "vpn":
		return "vpn"
	case "channels":
		return "channels"
	case "up":
		return "up"
	case "interfaceName":
		return "interfaceName"
	case "endpoint":
		return "endpoint"
	case "peerCount":
		return "peerCount"
	case "lastHandshake":
		return "lastHandshake"
	case "id":
		return "id"
	case "available":
		return "available"
	case "live":
		return "live"
	case "txOn":
		return "txOn"
	case "error":
		return "error"
	case "passthroughAddress":
		return "passthroughAddress"
	}
	return ""
}

func (p *jparser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jparser) lit(s string) bool {
	p.ws()
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

func (p *jparser) peek() byte {
	p.ws()
	if p.i >= len(p.b) {
		return 0
	}
	return p.b[p.i]
}

// str reads a string without escapes or control characters, in valid UTF-8
// as far as ASCII goes (any byte >= 0x80 sends the message to the slow path,
// which replaces invalid UTF-8 as encoding/json does).
func (p *jparser) str() (string, bool) {
	b, ok := p.strBytes()
	if !ok {
		return "", false
	}
	return p.cache.get(b), true
}

// strBytes is str returning the bytes between the quotes.
func (p *jparser) strBytes() ([]byte, bool) {
	if p.peek() != '"' {
		return nil, false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			return p.b[start:j], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

func (p *jparser) boolean() (bool, bool) {
	switch p.peek() {
	case 't':
		return true, p.lit("true")
	case 'f':
		return false, p.lit("false")
	}
	return false, false
}

// integer reads a JSON integer (no fraction or exponent) that fits in 53
// bits.
func (p *jparser) integer() (int64, bool) {
	p.ws()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	n := p.i - digits
	if n == 0 || n > 15 || (n > 1 && p.b[digits] == '0') {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	v, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64)
	return v, err == nil
}

// object reads {"key": value, ...}; field reads each value and reports
// success. An empty object is accepted.
func (p *jparser) object(field func(key string) bool) bool {
	if !p.lit("{") {
		return false
	}
	if p.peek() == '}' {
		p.i++
		return true
	}
	// A repeated key goes to the slow path: encoding/json merges into what
	// the first one set.
	var seen [8]string
	n := 0
	for {
		kb, ok := p.strBytes()
		if !ok {
			return false
		}
		// Only known keys are decoded here; anything else (unknown or
		// differently cased) goes to the slow path.
		key := knownKey(kb)
		if key == "" {
			return false
		}
		for _, k := range seen[:n] {
			if k == key {
				return false
			}
		}
		if n == len(seen) {
			return false
		}
		seen[n] = key
		n++
		if !p.lit(":") || !field(key) {
			return false
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

func (p *jparser) timestamp() (resource.Time, bool) {
	b, ok := p.strBytes()
	if !ok {
		return resource.Time{}, false
	}
	// Not through the cache: times differ from one message to the next.
	t, err := resource.ParseTime(string(b))
	if err != nil {
		return resource.Time{}, false
	}
	return resource.Time{Time: t}, true
}

func (p *jparser) heartbeat(hb *protocol.Heartbeat) bool {
	if p.peek() == 'n' {
		return false // null: let encoding/json decide
	}
	return p.object(func(key string) bool {
		var ok bool
		switch key {
		case "at":
			hb.At, ok = p.timestamp()
		case "status":
			var s string
			s, ok = p.str()
			hb.Status = resource.DeviceStatus(s)
		case "ipAddress":
			hb.IPAddress, ok = p.str()
		case "appliedVersion":
			hb.AppliedVersion, ok = p.integer()
		case "vpn":
			if p.peek() == 'n' {
				hb.VPN, ok = nil, p.lit("null")
			} else {
				lh := p.vpn.LastHandshake
				*p.vpn = protocol.VPN{LastHandshake: lh}
				hb.VPN = p.vpn
				ok = p.decodeVPN(hb.VPN)
			}
		case "channels":
			ok = p.channels(hb)
		}
		return ok
	})
}

// decodeVPN decodes into v, whose LastHandshake, when not nil, is reused.
func (p *jparser) decodeVPN(v *protocol.VPN) bool {
	lh := v.LastHandshake
	v.LastHandshake = nil
	return p.object(func(key string) bool {
		var ok bool
		switch key {
		case "up":
			v.Up, ok = p.boolean()
		case "interfaceName":
			v.InterfaceName, ok = p.str()
		case "endpoint":
			v.Endpoint, ok = p.str()
		case "peerCount":
			var n int64
			n, ok = p.integer()
			v.PeerCount = int(n)
		case "lastHandshake":
			if p.peek() == 'n' {
				v.LastHandshake, ok = nil, p.lit("null")
			} else {
				if lh == nil {
					lh = new(resource.Time)
				}
				*lh, ok = p.timestamp()
				v.LastHandshake = lh
			}
		}
		return ok
	})
}

func (p *jparser) channels(hb *protocol.Heartbeat) bool {
	if p.peek() == 'n' {
		hb.Channels = nil
		return p.lit("null")
	}
	if !p.lit("[") {
		return false
	}
	hb.Channels = p.spare
	if hb.Channels == nil {
		hb.Channels = make([]protocol.ChannelState, 0, 8)
	}
	if p.peek() == ']' {
		p.i++
		return true
	}
	for {
		var c protocol.ChannelState
		if !p.object(func(key string) bool {
			var ok bool
			switch key {
			case "id":
				c.ID, ok = p.str()
			case "available":
				c.Available, ok = p.boolean()
			case "live":
				c.Live, ok = p.str()
			case "txOn":
				c.TxOn, ok = p.boolean()
			case "error":
				c.Error, ok = p.str()
			case "passthroughAddress":
				c.PassthroughAddress, ok = p.str()
			}
			return ok
		}) {
			return false
		}
		hb.Channels = append(hb.Channels, c)
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return true
		default:
			return false
		}
	}
}

package agentlink

import (
	"fmt"
	"strings"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/shared/protocol"
)

// frameType is the websocket frame type of codec's messages.
func frameType(codec protocol.Codec) websocket.MessageType {
	if codec.Binary() {
		return websocket.MessageBinary
	}
	return websocket.MessageText
}

func frameName(t websocket.MessageType) string {
	if t == websocket.MessageBinary {
		return "binary"
	}
	return "text"
}

// decoder decodes one connection's messages (its reader goroutine's). A
// heartbeat is decoded into hb and its channel array, reused from one
// message to the next, so that the commonest message allocates little more
// than its strings: what outlives the next decode must be copied out
// (conn.heartbeat does). The memory reuse stays here; nothing outside this
// package sees it.
type decoder struct {
	hb  protocol.Heartbeat
	msg protocol.Message // decoded into (a local one would escape)
}

// decode decodes b in codec; any error is a protocol error.
func (d *decoder) decode(codec protocol.Codec, b []byte) (protocol.Message, error) {
	chans := d.hb.Channels
	if cap(chans) > protocol.MaxChannels {
		chans = nil // a refused heartbeat's large array is not kept
	}
	clear(chans[:cap(chans)]) // both decoders leave absent fields as they are
	d.hb = protocol.Heartbeat{Channels: chans[:0]}
	d.msg = protocol.Message{Heartbeat: &d.hb}
	if err := codec.Unmarshal(b, &d.msg); err != nil {
		return protocol.Message{}, protoErr("malformed %s: %v", strings.ToUpper(codec.String()), err)
	}
	m := d.msg
	if m.Type != protocol.TypeHeartbeat {
		m.Heartbeat = nil
	}
	return m, nil
}

// write sends m in codec, in the frame type of codec, within the write
// timeout (a shared deadline: deadline.go).
func (c *conn) write(codec protocol.Codec, m *protocol.Message) error {
	b, err := codec.Marshal(m)
	if err != nil {
		return fmt.Errorf("agentlink: encode %s as %s: %w", m.Type, codec, err)
	}
	return c.ws.Write(c.srv.writeDeadline.get(), frameType(codec), b)
}

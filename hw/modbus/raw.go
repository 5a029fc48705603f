package modbus

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ServeRaw serves a raw client (a passthrough TCP connection) on the bus
// until rw fails or ctx ends. Bytes from the client are cut into RTU request
// frames by their function code's layout (or taken as they come for codes
// without one); each frame is one transaction under the bus lock: the
// request goes out, the reply is streamed back to the client as it
// arrives, and the bus is released when the reply is complete (its length
// known and CRC valid) or the line has been silent for t3.5. A request
// without a reply in time ends its transaction; the client gets nothing,
// as on the wire. A frame that does not answer the client's request (a
// slave's late reply to an earlier, timed-out request) is not forwarded.
// ServeRaw returns nil when the client closes.
func (p *Port) ServeRaw(ctx context.Context, rw io.ReadWriter) error {
	return serveRTU(ctx, p.bus, rw, func(err error) { p.log.Debug("raw transaction", "err", err) })
}

func serveRTU(ctx context.Context, bus *Bus, rw io.ReadWriter, note func(error)) error {
	buf := make([]byte, 0, 2*maxFrame)
	chunk := make([]byte, maxFrame)
	for {
		// Cut complete frames out of what the client has sent.
		for {
			n := cutRequest(buf)
			if n == 0 {
				break
			}
			req := append([]byte(nil), buf[:n]...)
			buf = append(buf[:0], buf[n:]...)
			var werr error
			fc := req[1]
			_, err := bus.Exchange(ctx, OwnerRaw, req,
				func(b []byte) {
					if werr == nil {
						_, werr = rw.Write(b)
					}
				},
				func(b []byte) bool {
					l := ResponseLength(fc, b)
					return l > 0 && len(b) >= l && CheckCRC(b[:l])
				})
			if werr != nil {
				return fmt.Errorf("raw client: %w", werr)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				note(err)
			}
		}
		n, err := rw.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if len(buf) > 4*maxFrame {
			buf = buf[len(buf)-maxFrame:]
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// cutRequest returns the length of the request frame at the start of buf, or
// 0 when more bytes are needed. A function code without a known layout
// takes whatever has arrived.
func cutRequest(buf []byte) int {
	if len(buf) < 2 {
		return 0
	}
	switch fc := buf[1]; {
	case (fc == 15 || fc == 16) && len(buf) < 7, fc == 23 && len(buf) < 11:
		return 0
	}
	n := RequestLength(buf)
	switch {
	case n == 0 || n > maxFrame:
		return len(buf)
	case n > len(buf):
		return 0
	}
	return n
}

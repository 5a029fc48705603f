package agentlink

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"time"

	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
)

// The bounds on what agents report are shared/protocol's table (bounds.go),
// which the agent's clamps keep within too: the checks here are
// protocol.Check*, a refusal closing the connection with a protocol error
// naming the field, and then the few changes the relay makes to what it
// stores (one spelling of an address, compact event data).

// storedDeadlineBeats is how many heartbeat intervals ahead the stored
// deadline is set (refreshed when fewer than three remain). The relay holding
// the connection takes a silent device OFFLINE after exactly three
// intervals; the stored deadline matters only when that relay died, and then
// the device goes OFFLINE within six.
const storedDeadlineBeats = 6

func newID() string { return ids.New() }

// refused is a bound error as the protocol error that closes the connection.
func refused(err error) error {
	if err == nil {
		return nil
	}
	return protoErr("%v", err)
}

func validateHello(h *protocol.Hello) error { return refused(protocol.CheckHello(h)) }

func validateHeartbeat(h *protocol.Heartbeat) error {
	if err := protocol.CheckHeartbeat(h); err != nil {
		return refused(err)
	}
	if h.IPAddress != "" {
		// One spelling stored: the canonical one (compared without a copy).
		ip, _ := netip.ParseAddr(h.IPAddress)
		var buf [64]byte
		if canon := ip.AppendTo(buf[:0]); string(canon) != h.IPAddress {
			h.IPAddress = ip.String()
		}
	}
	return nil
}

// validateRecords checks the records of one message; last is the device's
// last stored sequence (protocol.MaxSeqStep).
func validateRecords(items []protocol.Record, last uint64, now time.Time) error {
	if err := protocol.CheckRecords(items, last, now); err != nil {
		return refused(err)
	}
	for i := range items {
		e := items[i].Event
		if e == nil || len(e.Data) == 0 {
			continue
		}
		d := bytes.TrimSpace(e.Data)
		if bytes.Equal(d, []byte("null")) {
			e.Data = nil
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, d); err == nil {
			e.Data = buf.Bytes()
		}
	}
	return nil
}

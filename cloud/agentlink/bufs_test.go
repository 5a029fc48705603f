package agentlink

import (
	"math"
	"testing"

	"github.com/fleet/fleet/shared/protocol"
)

// TestAckFitsWriteBuffer: the relay's commonest message after the welcome,
// a records batch's ack, leaves in one write: with the largest sequence
// number, in either codec, it and its frame header (2 bytes for a payload
// under 126; a server's frames are not masked) fit the write buffer every
// connection keeps.
func TestAckFitsWriteBuffer(t *testing.T) {
	for _, codec := range []protocol.Codec{protocol.JSON, protocol.CBOR} {
		m := protocol.Message{Type: protocol.TypeAck, Ack: &protocol.Ack{Seq: math.MaxUint64}}
		b, err := codec.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 125 || 2+len(b) > writeBufSize {
			t.Errorf("%s: an ack of %d bytes and its header do not fit the %d-byte write buffer", codec, len(b), writeBufSize)
		}
	}
}

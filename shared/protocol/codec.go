package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/fxamacker/cbor/v2"
	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
	segjson "github.com/segmentio/encoding/json"
)

// Codec is the encoding of a connection's messages after the handshake.
// The hello and the welcome are always JSON text frames: the agent offers
// codecs in Hello.Codecs, and the relay names the connection's in
// Welcome.Codec.
type Codec string

// The codecs.
const (
	// JSON is one JSON Message per text frame: what every agent and relay
	// speaks, and what agents from before CBOR speak after the welcome too.
	JSON Codec = "json"
	// CBOR is one CBOR Message (RFC 8949) per binary frame: every struct a
	// map keyed by the small integers of its cbor struct tags (unknown keys
	// ignored, as JSON's unknown fields), times as tag 1 (see
	// resource.Time), durations as Go duration strings, and what the JSON
	// protocol defines as a JSON object (event data, a channel's config) as
	// a byte string holding that JSON object.
	CBOR Codec = "cbor"
)

// Binary reports whether the codec's messages travel in binary frames.
func (c Codec) Binary() bool { return c == CBOR }

// String returns the codec's name, "json" when empty.
func (c Codec) String() string {
	if c == "" {
		return string(JSON)
	}
	return string(c)
}

// ChooseCodec returns the codec a relay uses with an agent that offered
// these: CBOR when offered, else JSON.
func ChooseCodec(offered []Codec) Codec {
	for _, c := range offered {
		if c == CBOR {
			return CBOR
		}
	}
	return JSON
}

// Marshal encodes m.
func (c Codec) Marshal(m *Message) ([]byte, error) {
	switch c {
	case CBOR:
		return cborEnc.Marshal(m)
	case JSON, "":
		return json.Marshal(m)
	}
	return nil, fmt.Errorf("protocol: unknown codec %q", string(c))
}

// Unmarshal decodes b into m, which should be zero: like encoding/json,
// both leave the fields b does not name as they were. The CBOR decoder
// bounds what a peer can make it allocate (cborDecOptions); a CBOR message
// with a repeated map key is an error, where JSON takes the last value.
//
// JSON is decoded with encoding/json's semantics, by one of two libraries
// that both give encoding/json's results (FuzzJSONDecodeAsEncodingJSON
// holds them to it): every agent from before CBOR speaks JSON.
//   - A message of at most jsonFastBrackets brackets and braces (a
//     heartbeat of 8 channels has 12) goes to
//     github.com/segmentio/encoding/json, a drop-in encoding/json built on
//     unsafe field offsets instead of reflection: about half the CPU of
//     the other on a heartbeat
//     (BenchmarkDecodeHeartbeat). It reads nested values by recursion,
//     without encoding/json's depth limit, which the bound stands in for:
//     a message's depth cannot exceed its count of brackets and braces,
//     which costs about 1 % of a heartbeat's decoding.
//   - Any other goes to encoding/json/v2's implementation
//     (github.com/go-json-experiment/json, which mirrors encoding/json/v2
//     until Go 1.27 ships it) with its v1 package's options
//     (jsonDecOptions): no recursion for what it skips, and encoding/json's
//     limit of 10,000 levels.
func (c Codec) Unmarshal(b []byte, m *Message) error {
	switch c {
	case CBOR:
		return cborDec.Unmarshal(b, m)
	case JSON, "":
		if jsonBrackets(b) <= jsonFastBrackets {
			return segjson.Unmarshal(b, m)
		}
		return jsonv2.Unmarshal(b, m, jsonDecOptions)
	}
	return fmt.Errorf("protocol: unknown codec %q", string(c))
}

// jsonFastBrackets bounds the brackets and braces of a JSON message that
// segmentio's decoder reads, and with them the depth of its recursion:
// above a heartbeat's (12 with 8 channels, 68 with MaxChannels),
// while a record batch of hundreds of records goes to the other decoder.
// Nested to the bound, a message grew the decoding goroutine's stack by
// 32–96 KiB (twice the bound: 128 KiB; with no bound, 100,000 levels
// overflowed Go's 1 GB stack limit: TestJSONNestingAsEncodingJSON).
const jsonFastBrackets = 128

// jsonBrackets counts b's brackets and braces, those in strings too: a
// bound on its depth (80 ns for a heartbeat of 8 channels, about 1 % of
// its decoding).
func jsonBrackets(b []byte) int {
	return bytes.Count(b, []byte{'['}) + bytes.Count(b, []byte{'{'})
}

// jsonDecOptions are encoding/json's semantics (jsonv1.DefaultOptionsV1)
// without its errors' form (ReportErrorsWithLegacySemantics): under that
// form the library first reads the whole message once to check its
// syntax, as encoding/json does so as to leave the target untouched by a
// malformed message, and only then decodes it. A malformed message here is
// refused and its target thrown away, so the check is a second pass for
// nothing (a fifth of a heartbeat's decoding). What is accepted and how it
// reads do not change; FuzzJSONDecodeAsEncodingJSON holds both to
// encoding/json's.
var jsonDecOptions = jsonv2.JoinOptions(jsonv1.DefaultOptionsV1(), jsonv1.ReportErrorsWithLegacySemantics(false))

// cborDecOptions are the decoder's bounds: messages come from the other
// side of a network, so nesting, array and map sizes are capped well below
// the library's defaults (though above every protocol limit, which the
// relay checks itself with its own close codes), indefinite lengths are
// refused (agents and relays never write them) and so are repeated map
// keys. MaxMessageBytes bounds the rest.
var cborDecOptions = cbor.DecOptions{
	DupMapKey:        cbor.DupMapKeyEnforcedAPF,
	IndefLength:      cbor.IndefLengthForbidden,
	MaxNestedLevels:  16,
	MaxArrayElements: 4096,
	MaxMapPairs:      1024,
}

// The CBOR modes, made once: the library's modes are immutable and safe for
// concurrent use.
var (
	cborEnc = mustMode(cbor.EncOptions{IndefLength: cbor.IndefLengthForbidden}.EncMode())
	cborDec = mustMode(cborDecOptions.DecMode())
)

func mustMode[M any](m M, err error) M {
	if err != nil {
		panic(err)
	}
	return m
}

// MarshalCBOR implements cbor.Marshaler: the duration string, as in JSON.
func (d Duration) MarshalCBOR() ([]byte, error) { return cborEnc.Marshal(d.String()) }

// UnmarshalCBOR implements cbor.Unmarshaler.
func (d *Duration) UnmarshalCBOR(b []byte) error { return d.unmarshal(cborDec.Unmarshal, b) }

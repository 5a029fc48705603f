package protocol

import (
	"encoding/json"
	"fmt"

	"github.com/fxamacker/cbor/v2"
	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
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
// JSON is decoded with encoding/json's semantics by encoding/json/v2's
// implementation (github.com/go-json-experiment/json, the module that
// mirrors encoding/json/v2 until Go 1.27 ships it, with its v1 package's
// options for encoding/json's behaviour; jsonDecOptions): every agent from
// before CBOR speaks JSON, and v2 decodes a heartbeat in about a third of
// encoding/json's CPU. FuzzJSONDecodeAsEncodingJSON holds it to
// encoding/json's results.
func (c Codec) Unmarshal(b []byte, m *Message) error {
	switch c {
	case CBOR:
		return cborDec.Unmarshal(b, m)
	case JSON, "":
		return jsonv2.Unmarshal(b, m, jsonDecOptions)
	}
	return fmt.Errorf("protocol: unknown codec %q", string(c))
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

// Package webhook delivers the relay's signed webhooks: serial.signal
// deliveries for devices with forwarding enabled and alert.* deliveries to an
// organization's alert URL. Every delivery is first written to a durable
// outbox (Store), then sent by a Dispatcher through per-endpoint queues with
// bounded concurrency, retried with backoff on transient failures only, and
// signed twice: X-Service-Signature (hex HMAC-SHA256 of the body) and the
// Standard Webhooks headers (webhook-id, webhook-timestamp,
// webhook-signature).
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
)

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

// Header names.
const (
	HeaderSignature   = "X-Service-Signature"
	HeaderDeliveryID  = "X-Service-Delivery-Id"
	HeaderAttempt     = "X-Service-Attempt"
	HeaderWebhookID   = "webhook-id"
	HeaderWebhookTime = "webhook-timestamp"
	HeaderWebhookSig  = "webhook-signature"
)

// NewSecret returns a fresh signing secret: "whsec_" followed by the standard
// base64 encoding of 32 random bytes, the form the Standard Webhooks
// specification uses.
func NewSecret() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// Sign returns the X-Service-Signature value for body: "sha256=" and the hex
// HMAC-SHA256 of the raw body, keyed with the secret string exactly as shown
// to the customer (its UTF-8 bytes, "whsec_" prefix included).
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig is Sign(secret, body), in constant time.
func Verify(secret string, body []byte, sig string) bool {
	return subtle.ConstantTimeCompare([]byte(Sign(secret, body)), []byte(sig)) == 1
}

// StandardKey returns the HMAC key of the Standard Webhooks signature: the
// bytes of the text after "whsec_" decoded as standard base64 (alphabet
// A-Z a-z 0-9 + /, "=" padding optional). A secret without the prefix, or
// whose rest does not decode, is used as its own UTF-8 bytes.
func StandardKey(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, SecretPrefix); ok {
		if k, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(rest, "=")); err == nil && len(k) > 0 {
			return k
		}
	}
	return []byte(secret)
}

// SignStandard returns the webhook-signature value: "v1," and the base64
// HMAC-SHA256, keyed with StandardKey(secret), of "<id>.<timestamp>.<body>",
// timestamp being Unix seconds.
func SignStandard(secret, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, StandardKey(secret))
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// VerifyStandard reports whether header (a space-separated list of
// "v1,<base64>" signatures) holds the signature of id, timestamp and body.
func VerifyStandard(secret, id string, timestamp int64, body []byte, header string) bool {
	want := []byte(SignStandard(secret, id, timestamp, body))
	ok := false
	for _, s := range strings.Fields(header) {
		if subtle.ConstantTimeCompare(want, []byte(s)) == 1 {
			ok = true
		}
	}
	return ok
}

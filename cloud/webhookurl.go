package cloud

import (
	"net/url"
	"strconv"
	"strings"
)

// MaxWebhookURLLength bounds a webhook URL.
const MaxWebhookURLLength = 2048

// ValidateWebhookURL checks the syntax policy for a customer's webhook URL:
// at most MaxWebhookURLLength bytes, an absolute https URL with a host, no
// credentials (userinfo), no IPv6 zone (https://[fe80::1%25eth0]/ names an
// interface of the relay's host), and no fragment. It returns an EINVALID
// *Error naming field. Where the URL may point (loopback, private and metadata
// addresses) is checked by the webhook sender when it dials, on the
// resolved address.
func ValidateWebhookURL(field, raw string) error {
	if raw == "" {
		return Errorf(EINVALID, "%s must not be empty (send null to clear it)", field)
	}
	if len(raw) > MaxWebhookURLLength {
		return Errorf(EINVALID, "%s is longer than %d bytes", field, MaxWebhookURLLength)
	}
	if strings.TrimSpace(raw) != raw || strings.ContainsAny(raw, " \t\r\n") {
		return Errorf(EINVALID, "%s must not contain spaces", field)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Errorf(EINVALID, "%s is not a valid URL", field)
	}
	if !strings.EqualFold(u.Scheme, "https") {
		return Errorf(EINVALID, "%s must be an https URL", field)
	}
	if u.User != nil {
		return Errorf(EINVALID, "%s must not contain credentials", field)
	}
	if u.Hostname() == "" || u.Opaque != "" {
		return Errorf(EINVALID, "%s must have a host", field)
	}
	if strings.Contains(u.Host, "%") {
		return Errorf(EINVALID, "%s must not carry an IPv6 zone", field)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return Errorf(EINVALID, "%s has an invalid port", field)
		}
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return Errorf(EINVALID, "%s must not contain a fragment", field)
	}
	return nil
}

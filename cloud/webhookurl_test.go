package cloud_test

import (
	"testing"

	"github.com/fleet/fleet/cloud"
)

func TestWebhookURLPolicy(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://example.com/hook", true},
		{"https://example.com:8443/a/b?c=d", true},
		{"HTTPS://EXAMPLE.COM/", true},
		{"http://example.com/hook", false},
		{"ftp://example.com", false},
		{"https://user@example.com/", false},
		{"https://user:pass@example.com/", false},
		{"https:///path", false},
		{"https://example.com/#frag", false},
		{"https://example.com:0/", false},
		{"https://example.com:70000/", false},
		{"https://exa mple.com/", false},
		{"//example.com/", false},
		{"", false},
		{"https://example.com/" + string(make([]byte, 2100)), false},
	} {
		err := cloud.ValidateWebhookURL("webhookUrl", tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateWebhookURL(%.40q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
		if err != nil && cloud.ErrorCode(err) != cloud.EINVALID {
			t.Errorf("code %s", cloud.ErrorCode(err))
		}
	}
}

package webhook_test

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/webhook"
)

func TestParseBackoff(t *testing.T) {
	cases := []struct {
		in   string
		want []time.Duration
		ok   bool
	}{
		{webhook.DefaultBackoffFlag, webhook.DefaultBackoff(), true},
		{"10ms", []time.Duration{10 * time.Millisecond}, true},
		{" 1s, 2s ", []time.Duration{time.Second, 2 * time.Second}, true},
		{"", nil, false},
		{"1s,2s,3s,4s,5s,6s", nil, false}, // six retries
		{"0s", nil, false},
		{"-1s", nil, false},
		{"2h", nil, false},
		{"5", nil, false},
		{"1s,,2s", nil, false},
	}
	for _, tc := range cases {
		got, err := webhook.ParseBackoff(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseBackoff(%q) error = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && len(got) != len(tc.want) {
			t.Errorf("ParseBackoff(%q) = %v, want %v", tc.in, got, tc.want)
		}
		for i := range tc.want {
			if tc.ok && got[i] != tc.want[i] {
				t.Errorf("ParseBackoff(%q)[%d] = %v, want %v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

func TestRetryable(t *testing.T) {
	for status, want := range map[int]bool{500: true, 502: true, 503: true, 599: true, 408: true, 425: true, 429: true,
		200: false, 301: false, 302: false, 304: false, 400: false, 401: false, 403: false, 404: false, 409: false, 410: false, 413: false, 422: false} {
		if got := webhook.Retryable(status); got != want {
			t.Errorf("Retryable(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"120", 2 * time.Minute, true},
		{"0", 0, true},
		{"-5", 0, false},
		{"99999", time.Hour, true}, // capped
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"soon", 0, false},
	}
	for _, tc := range cases {
		got, ok := webhook.RetryAfter(tc.in, now)
		if ok != tc.ok || got != tc.want {
			t.Errorf("RetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDelayJitterAndRetryAfter(t *testing.T) {
	s := webhook.DefaultBackoff()
	for attempt := 1; attempt <= 5; attempt++ {
		base := s[attempt-1]
		lo := webhook.Delay(s, attempt, 0, 0)
		hi := webhook.Delay(s, attempt, 0, 0.999999)
		mid := webhook.Delay(s, attempt, 0, 0.5)
		if lo != time.Duration(float64(base)*0.8) || hi < time.Duration(float64(base)*1.19) || hi > time.Duration(float64(base)*1.2) || mid != base {
			t.Errorf("attempt %d: delays %v %v %v around %v, want ±20%%", attempt, lo, mid, hi, base)
		}
	}
	if d := webhook.Delay(s, 1, 40*time.Second, 0.5); d != 40*time.Second {
		t.Errorf("Retry-After longer than the backoff: %v, want 40s", d)
	}
	if d := webhook.Delay(s, 5, time.Second, 0.5); d != 30*time.Minute {
		t.Errorf("Retry-After shorter than the backoff: %v, want 30m", d)
	}
	if d := webhook.Delay(s, 1, 3*time.Hour, 0.5); d != time.Hour {
		t.Errorf("Retry-After over the cap: %v, want 1h", d)
	}
}

func TestAddressAllowed(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:2800:220:1:248:1893:25c8:1946": true, "8.8.8.8": true,
		"127.0.0.1": false, "127.8.9.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "172.31.255.255": false,
		"192.168.1.1": false, "169.254.169.254": false, "fd00:ec2::254": false, "fe80::1": false, "100.64.0.1": false,
		"100.127.255.254": false, "224.0.0.1": false, "ff02::1": false, "0.0.0.0": false, "::": false,
		"::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "255.255.255.255": false, "fc00::1": false,
		"172.32.0.1": true, "100.128.0.1": true,
	} {
		if got := webhook.AddressAllowed(netip.MustParseAddr(addr)); got != want {
			t.Errorf("AddressAllowed(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestValidateURL(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://hooks.example.com/fleet":      true,
		"https://hooks.example.com:8443/x?y=1": true,
		"http://hooks.example.com/fleet":       false,
		"https://user:pw@hooks.example.com/":   false,
		"https://token@hooks.example.com/":     false,
		"ftp://hooks.example.com/":             false,
		"https:///nohost":                      false,
		"not a url":                            false,
		"":                                     false,
		"https://hooks.example.com:99999/":     false,
		"https://hooks.example.com/x#fragment": false,
	} {
		err := webhook.ValidateURL("webhookUrl", raw)
		if (err == nil) != ok {
			t.Errorf("ValidateURL(%q) = %v, want ok=%v", raw, err, ok)
		}
		if err != nil && cloud.ErrorCode(err) != cloud.EINVALID {
			t.Errorf("ValidateURL(%q) code %s, want validation_error", raw, cloud.ErrorCode(err))
		}
	}
}

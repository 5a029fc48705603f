package apikey_test

import (
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/shared/ids"
)

// FuzzParseKey: Parse never panics, and what it accepts is exactly
// svc_sk_<id>_<secret> with a valid id and a base62 secret, within
// MaxKeyLength; a device token's hash is always 32 bytes.
func FuzzParseKey(f *testing.F) {
	f.Add("svc_sk_huo1a5t8b65l18ij5pmfsdbb_" + strings.Repeat("a", apikey.SecretLength))
	f.Add("svc_sk_huo1a5t8b65l18ij5pmfsdbb_")
	f.Add("svc_sk__x")
	f.Add("fleet_dt_" + strings.Repeat("Z", apikey.SecretLength))
	f.Fuzz(func(t *testing.T, key string) {
		if n := len(apikey.HashDeviceToken(key)); n != 32 {
			t.Fatalf("token hash of %d bytes", n)
		}
		id, secret, ok := apikey.Parse(key)
		if !ok {
			return
		}
		if len(key) > apikey.MaxKeyLength || key != apikey.Prefix+id+"_"+secret || !ids.Valid(id) || secret == "" {
			t.Fatalf("Parse(%q) accepted: id %q secret %q", key, id, secret)
		}
		for _, c := range secret {
			if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
				t.Fatalf("secret %q is not base62", secret)
			}
		}
	})
}

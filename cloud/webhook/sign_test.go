package webhook_test

import (
	"encoding/base64"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud/webhook"
)

func TestSecretShape(t *testing.T) {
	s := webhook.NewSecret()
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if !strings.HasPrefix(s, "whsec_") || err != nil || len(k) != 32 {
		t.Fatalf("NewSecret() = %q (%v): want whsec_ and 32 base64 bytes", s, err)
	}
	if webhook.NewSecret() == s {
		t.Fatal("two equal secrets")
	}
	if got := webhook.StandardKey(s); string(got) != string(k) {
		t.Error("StandardKey does not decode the base64 part")
	}
	// 43 base62 characters (no padding) decode too.
	b62 := "whsec_Dn9ckCwlMFOhk4OkVed21GRhklN6K2wuOgCeGR7ZdyJ"
	if got := webhook.StandardKey(b62); len(got) != 32 {
		t.Errorf("StandardKey(unpadded) = %d bytes, want 32", len(got))
	}
}

// TestSignaturesMatchOpenSSL checks both signatures against the openssl
// command lines docs/webhooks.md gives receivers.
func TestSignaturesMatchOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is needed to check the documented command lines")
	}
	dir := t.TempDir()
	body := []byte(`{"event":"serial.signal","deviceId":"d1","at":"2026-11-22T03:00:00.000Z","channels":[{"id":"gpio-1","live":"1","txOn":false,"error":""}]}`)
	bodyFile := filepath.Join(dir, "body.json")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{webhook.NewSecret(), "whsec_Dn9ckCwlMFOhk4OkVed21GRhklN6K2wuOgCeGR7ZdyJ"} {
		// X-Service-Signature, as documented:
		//   openssl dgst -sha256 -hmac "$SECRET" -r body.json | cut -d' ' -f1
		out, err := shell(`openssl dgst -sha256 -hmac "$SECRET" -r "$BODY" | cut -d' ' -f1`,
			"SECRET="+secret, "BODY="+bodyFile)
		if err != nil {
			t.Fatalf("openssl: %v: %s", err, out)
		}
		if got, want := "sha256="+strings.TrimSpace(string(out)), webhook.Sign(secret, body); got != want {
			t.Errorf("X-Service-Signature: openssl %s, relay %s", got, want)
		}
		// webhook-signature, as documented (key = base64 after whsec_).
		script := `
k=${SECRET#whsec_}; while [ $(( ${#k} % 4 )) -ne 0 ]; do k="$k="; done
KEY_HEX=$(printf '%s' "$k" | openssl base64 -d -A | od -An -v -tx1 | tr -d ' \n')
printf '%s.%s.' "$ID" "$TS" | cat - "$BODY" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$KEY_HEX" -binary | openssl base64 -A`
		out, err = shell(script, "SECRET="+secret, "BODY="+bodyFile, "ID=msgid123", "TS=1763780400")
		if err != nil {
			t.Fatalf("openssl: %v: %s", err, out)
		}
		if got, want := "v1,"+strings.TrimSpace(string(out)), webhook.SignStandard(secret, "msgid123", 1763780400, body); got != want {
			t.Errorf("webhook-signature: openssl %s, relay %s", got, want)
		}
	}
}

func TestVerify(t *testing.T) {
	s := webhook.NewSecret()
	body := []byte(`{"a":1}`)
	sig := webhook.Sign(s, body)
	if !strings.HasPrefix(sig, "sha256=") || len(sig) != 7+64 {
		t.Fatalf("Sign = %q", sig)
	}
	if _, err := hex.DecodeString(sig[7:]); err != nil {
		t.Fatal(err)
	}
	if !webhook.Verify(s, body, sig) || webhook.Verify(s, []byte(`{"a":2}`), sig) || webhook.Verify(webhook.NewSecret(), body, sig) {
		t.Error("Verify accepts or refuses wrongly")
	}
	std := webhook.SignStandard(s, "id1", 100, body)
	if !webhook.VerifyStandard(s, "id1", 100, body, "v1,bogus "+std) {
		t.Error("VerifyStandard refuses a list holding the signature")
	}
	if webhook.VerifyStandard(s, "id1", 101, body, std) || webhook.VerifyStandard(s, "id2", 100, body, std) {
		t.Error("VerifyStandard accepts another timestamp or id")
	}
}

func shell(script string, env ...string) ([]byte, error) {
	c := exec.Command("sh", "-c", script)
	c.Env = append(os.Environ(), env...)
	return c.CombinedOutput()
}

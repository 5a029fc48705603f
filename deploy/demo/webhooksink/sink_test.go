package webhooksink_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/deploy/demo/webhooksink"
)

// signed returns the headers the relay sends with body, signed with
// serviceSecret (X-Service-Signature) and standardSecrets (webhook-signature,
// one signature each, as during a rotation's grace period).
func signed(body []byte, id string, at time.Time, serviceSecret string, standardSecrets ...string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(webhook.HeaderSignature, webhook.Sign(serviceSecret, body))
	h.Set(webhook.HeaderDeliveryID, id)
	h.Set(webhook.HeaderAttempt, "1")
	if len(standardSecrets) > 0 {
		var sigs []string
		for _, s := range standardSecrets {
			sigs = append(sigs, webhook.SignStandard(s, id, at.Unix(), body))
		}
		h.Set(webhook.HeaderWebhookID, id)
		h.Set(webhook.HeaderWebhookTime, strconv.FormatInt(at.Unix(), 10))
		h.Set(webhook.HeaderWebhookSig, strings.Join(sigs, " "))
	}
	return h
}

func TestCheck(t *testing.T) {
	secret, rotated, other := webhook.NewSecret(), webhook.NewSecret(), webhook.NewSecret()
	body := []byte(`{"event":"serial.signal","deviceId":"d1","at":"2026-11-22T03:00:00Z","channels":[]}`)
	now := time.Unix(1_800_000_000, 0)
	cases := []struct {
		name     string
		h        http.Header
		body     []byte
		ok       bool
		service  bool
		standard bool
		reason   string
	}{
		{"both signatures", signed(body, "w1", now, secret, secret), body, true, true, true, ""},
		{"rotation grace: new secret signs X-Service, both sign webhook-signature", signed(body, "w2", now, rotated, rotated, secret), body, true, false, true, ""},
		{"X-Service-Signature only", signed(body, "w3", now, secret), body, true, true, false, ""},
		{"X-Service-Signature only, wrong secret", signed(body, "w4", now, other), body, false, false, false, "X-Service-Signature does not match"},
		{"wrong secret", signed(body, "w5", now, other, other), body, false, false, false, "neither signature matches"},
		{"body changed", signed(body, "w6", now, secret, secret), append([]byte(" "), body...), false, false, false, "neither signature matches"},
		{"old timestamp (replay)", signed(body, "w7", now.Add(-6*time.Minute), secret, secret), body, false, true, false, "webhook-timestamp is 6m0s away"},
		{"future timestamp", signed(body, "w8", now.Add(6*time.Minute), secret, secret), body, false, true, false, "webhook-timestamp is 6m0s away"},
		{"webhook-signature forged, X-Service right", func() http.Header {
			h := signed(body, "w9", now, secret, secret)
			h.Set(webhook.HeaderWebhookSig, webhook.SignStandard(other, "w9", now.Unix(), body))
			return h
		}(), body, false, true, false, "webhook-signature does not match"},
		{"timestamp not a number", func() http.Header {
			h := signed(body, "w10", now, secret, secret)
			h.Set(webhook.HeaderWebhookTime, "yesterday")
			return h
		}(), body, false, true, false, "not Unix seconds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := webhooksink.Check(secret, c.h, c.body, now, webhooksink.DefaultTolerance)
			if r.OK != c.ok || r.Service != c.service || r.Standard != c.standard || !strings.Contains(r.Reason, c.reason) || (c.ok && r.Reason != "") {
				t.Fatalf("Check = %+v, want ok=%v service=%v standard=%v reason containing %q", r, c.ok, c.service, c.standard, c.reason)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	cases := []struct {
		name string
		body string
		want []string
	}{
		{"signal", `{"event":"serial.signal","deviceId":"dev1","at":"2026-11-22T03:00:00Z","channels":[{"id":"rs485-1","live":"710 711","txOn":true,"error":""},{"id":"canfd-1","live":"018#1A2B","txOn":false,"error":"bus off"}]}`,
			[]string{"serial.signal", "device dev1", `rs485-1="710 711" tx`, `canfd-1="018#1A2B" error "bus off"`}},
		{"alert", `{"event":"alert.opened","deviceId":"dev2","at":"2026-11-22T03:00:00Z","alert":{"id":"a1","state":"ACTIVE","severity":"ERROR","message":"device offline"}}`,
			[]string{"alert.opened", "device dev2", `ACTIVE ERROR "device offline"`}},
		{"long value clipped", `{"event":"serial.signal","deviceId":"d","channels":[{"id":"uart-1","live":"` + strings.Repeat("x", 100) + `"}]}`,
			[]string{`uart-1="` + strings.Repeat("x", 31) + `…"`}},
		{"not a Fleet event", `[1,2,3]`, []string{"(7 bytes, not a Fleet event)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := webhooksink.Describe([]byte(c.body))
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("Describe = %q, want it to contain %q", got, w)
				}
			}
			if strings.Contains(got, "\n") {
				t.Errorf("Describe = %q spans lines", got)
			}
		})
	}
}

// lineWriter passes each Write (the sink writes one whole line per Write)
// to a channel, so a test reads lines as they come from the server's goroutines.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// drain returns the lines written so far.
func (w lineWriter) drain() []string {
	var out []string
	for {
		select {
		case l := <-w:
			out = append(out, strings.TrimSuffix(l, "\n"))
		default:
			return out
		}
	}
}

// clientFor returns an HTTPS client that trusts only the PEM file certFile.
func clientFor(t *testing.T, certFile string) *http.Client {
	t.Helper()
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("%s holds no certificate", certFile)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func post(t *testing.T, c *http.Client, url string, body []byte, h http.Header) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRunOverHTTPS runs the program on a loopback port: it makes its
// certificate, which a client trusting only that file accepts for
// 127.0.0.1 and localhost, answers 204 to signed deliveries and 401 to
// others, prints one line each, and reuses the certificate on the next start.
func TestRunOverHTTPS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "sink-cert.pem"), filepath.Join(dir, "sink-key.pem")
	secret := webhook.NewSecret()
	port := freePort(t)
	out := make(lineWriter, 100)
	first, stop := start(t, []string{"--listen", "127.0.0.1:" + port, "--cert", certFile, "--key", keyFile, "--prefix", "sink | "}, secret, out)

	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want mode 0600", err, fi.Mode().Perm())
	}
	c := clientFor(t, certFile)
	body := []byte(`{"event":"serial.signal","deviceId":"dev1","at":"2026-11-22T03:00:00Z","channels":[{"id":"gpio-1","live":"1","txOn":false,"error":""}]}`)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		url := "https://" + host + ":" + port + "/signals"
		if code := post(t, c, url, body, signed(body, "del-"+host, time.Now(), secret, secret)); code != http.StatusNoContent {
			t.Fatalf("signed delivery to %s: status %d, want 204", host, code)
		}
	}
	if code := post(t, c, "https://127.0.0.1:"+port+"/signals", body, signed(body, "del-127.0.0.1", time.Now(), secret, secret)); code != http.StatusNoContent {
		t.Fatalf("repeated delivery: status %d, want 204", code)
	}
	if code := post(t, c, "https://127.0.0.1:"+port+"/signals", body, signed(body, "del-bad", time.Now(), webhook.NewSecret())); code != http.StatusUnauthorized {
		t.Fatalf("delivery signed with another secret: status %d, want 401", code)
	}
	stop()

	lines := append([]string{first}, out.drain()...)
	if len(lines) != 5 {
		t.Fatalf("printed %d lines, want 5 (start, 3 deliveries, 1 refusal):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "sink | ") {
			t.Errorf("line %d %q lacks the prefix", i, l)
		}
	}
	if !strings.Contains(lines[0], "listening on https://127.0.0.1:"+port) || !strings.Contains(lines[0], "made") {
		t.Errorf("start line %q", lines[0])
	}
	for _, l := range lines[1:4] {
		if !strings.Contains(l, `serial.signal`) || !strings.Contains(l, `device dev1`) || !strings.Contains(l, `gpio-1="1"`) || !strings.HasSuffix(strings.TrimSuffix(l, ", repeat of a delivery already received"), "signature ok") {
			t.Errorf("delivery line %q", l)
		}
	}
	if !strings.Contains(lines[3], "repeat") || strings.Contains(lines[2], "repeat") {
		t.Errorf("repeat not marked on the third delivery only:\n%s", strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[4], "BAD SIGNATURE") || strings.Contains(lines[4], "dev1") {
		t.Errorf("refusal line %q: want BAD SIGNATURE and nothing from the unverified body", lines[4])
	}

	before, _ := os.ReadFile(certFile)
	first, stop = start(t, []string{"--listen", "127.0.0.1:" + port, "--cert", certFile, "--key", keyFile}, secret, out)
	stop()
	after, _ := os.ReadFile(certFile)
	if !bytes.Equal(before, after) || !strings.Contains(first, "reused") {
		t.Errorf("second start did not reuse the certificate: %s", first)
	}
}

// TestRunRefusesABusyPort: a port already taken gives a clear message and
// exit code 1.
func TestRunRefusesABusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	code := webhooksink.Run(context.Background(), []string{"--listen", ln.Addr().String(), "--cert", filepath.Join(dir, "c.pem"), "--key", filepath.Join(dir, "k.pem")},
		env(webhook.NewSecret()), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), ln.Addr().String()+" is already in use") {
		t.Fatalf("exit %d, stderr %q; want 1 and an 'already in use' message", code, errOut.String())
	}
}

func TestRunNeedsTheSecret(t *testing.T) {
	var out, errOut bytes.Buffer
	code := webhooksink.Run(context.Background(), nil, env(""), &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), webhooksink.SecretEnv) {
		t.Fatalf("exit %d, stderr %q; want 2 and the variable's name", code, errOut.String())
	}
}

func TestLoadOrCreateCertRenews(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	now := time.Now()
	c1, created, err := webhooksink.LoadOrCreateCert(certFile, keyFile, nil, now)
	if err != nil || !created {
		t.Fatalf("first: created=%v err=%v", created, err)
	}
	cases := []struct {
		name    string
		hosts   []string
		at      time.Time
		created bool
	}{
		{"same hosts, a month later", nil, now.Add(30 * 24 * time.Hour), false},
		{"a host the certificate lacks", []string{"127.0.0.2"}, now, true},
		{"close to expiry", []string{"127.0.0.2"}, now.Add(webhooksink.CertLifetime - time.Hour), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, created, err := webhooksink.LoadOrCreateCert(certFile, keyFile, c.hosts, c.at)
			if err != nil || created != c.created {
				t.Fatalf("created=%v err=%v, want created=%v", created, err, c.created)
			}
			if same := got.Leaf.SerialNumber.Cmp(c1.Leaf.SerialNumber) == 0; same == c.created {
				t.Fatalf("serial reused=%v, want %v", same, !c.created)
			}
			for _, h := range append([]string{"127.0.0.1", "::1", "localhost"}, c.hosts...) {
				if err := got.Leaf.VerifyHostname(h); err != nil {
					t.Errorf("certificate does not cover %s: %v", h, err)
				}
			}
		})
	}
	if err := os.WriteFile(certFile, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, created, err := webhooksink.LoadOrCreateCert(certFile, keyFile, nil, now); err != nil || !created {
		t.Fatalf("damaged file: created=%v err=%v; want a new certificate", created, err)
	}
}

func env(secret string) func(string) string {
	return func(k string) string {
		if k == webhooksink.SecretEnv {
			return secret
		}
		return ""
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// start runs the program until the returned stop is called; it returns
// once the program has printed its first line, and that line.
func start(t *testing.T, args []string, secret string, out lineWriter) (first string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errOut := make(lineWriter, 100)
	done := make(chan int, 1)
	go func() { done <- webhooksink.Run(ctx, args, env(secret), out, errOut) }()
	select {
	case first = <-out:
	case code := <-done:
		cancel()
		t.Fatalf("exited with %d: %s", code, strings.Join(errOut.drain(), " "))
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("no start line in 10s")
	}
	return strings.TrimSuffix(first, "\n"), func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d after stop: %s", code, strings.Join(errOut.drain(), " "))
		}
	}
}

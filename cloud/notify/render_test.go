package notify_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/notify"
	"github.com/fleet/fleet/shared/resource"
)

func f(v float64) *float64 { return &v }

var at = time.Date(2026, 11, 26, 22, 49, 51, 0, time.UTC)

func boiler(event string) notify.Message {
	return notify.Message{Event: event, OrgID: "org_1", AlertID: "al_7", DeviceID: "dev_1", DeviceName: "Press line 1",
		RuleID: "rule_1", RuleName: "Boiler hot", Severity: resource.SeverityError, State: "ACTIVE",
		Text: "temperature 92.5 °C > 80 °C", Source: "point.temp", Value: f(92.5), Threshold: f(80), Unit: "°C", At: at}
}

// TestSubjects: each event reads as a person would write it.
func TestSubjects(t *testing.T) {
	for ev, want := range map[string]string{
		notify.EventOpened:   "[Fleet ERROR] Boiler hot on Press line 1: temperature 92.5 °C > 80 °C",
		notify.EventReminder: "[Fleet ERROR] Still active: Boiler hot on Press line 1: temperature 92.5 °C > 80 °C",
		notify.EventResolved: "[Fleet RESOLVED] Boiler hot on Press line 1",
		notify.EventTest:     "[Fleet test] Test message from Fleet",
	} {
		if got := boiler(ev).Subject(); got != want {
			t.Errorf("%s: subject %q, want %q", ev, got, want)
		}
	}
}

// TestEmail: an RFC 5322 message a mail library reads back, with the
// Message-ID of the delivery, the Q-encoded subject, and a body naming
// device, rule, value, threshold, state, time and the alert's link.
func TestEmail(t *testing.T) {
	raw, err := boiler(notify.EventOpened).Email(notify.Mail{From: "fleet@example.com", To: []string{"ops@example.com", "b@example.com"}, ID: "dl_42", Date: at}, "https://fleet.example.com/")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bytes.ReplaceAll(raw, []byte("\r\n"), nil), []byte("\n")) {
		t.Error("a line ends in a bare LF")
	}
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	subj, err := new(mime.WordDecoder).DecodeHeader(m.Header.Get("Subject"))
	if err != nil || subj != "[Fleet ERROR] Boiler hot on Press line 1: temperature 92.5 °C > 80 °C" {
		t.Errorf("subject %q (%v)", subj, err)
	}
	if !strings.HasPrefix(m.Header.Get("Subject"), "=?utf-8?q?") {
		t.Errorf("raw subject %q not Q-encoded", m.Header.Get("Subject"))
	}
	for k, want := range map[string]string{"From": "fleet@example.com", "To": "ops@example.com, b@example.com", "Message-Id": "<dl_42@example.com>"} {
		if got := m.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if d, err := m.Header.Date(); err != nil || !d.Equal(at) {
		t.Errorf("Date %v (%v)", d, err)
	}
	body := decodeBody(t, m)
	for _, want := range []string{"Press line 1 (dev_1)", "Boiler hot (rule_1)", "92.5 °C", "80 °C", "ACTIVE", "2026-11-26 22:49:51 UTC",
		"https://fleet.example.com/panel/alerts/al_7"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
}

func decodeBody(t *testing.T, m *mail.Message) string {
	t.Helper()
	if m.Header.Get("Content-Transfer-Encoding") != "quoted-printable" {
		t.Fatalf("transfer encoding %q", m.Header.Get("Content-Transfer-Encoding"))
	}
	b, err := io.ReadAll(quotedprintable.NewReader(m.Body))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUserTextIsText: CR/LF in a device name cannot add a header, and
// chat markup in names is escaped.
func TestUserTextIsText(t *testing.T) {
	m := boiler(notify.EventOpened)
	m.DeviceName = "gw\r\nBcc: victim@example.com"
	m.RuleName = "<!channel> & <https://evil.example|click> @all"
	raw, err := m.Email(notify.Mail{From: "fleet@example.com", To: []string{"ops@example.com"}, ID: "dl_1", Date: at}, "https://fleet.example.com")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get("Bcc") != "" {
		t.Errorf("a Bcc header was injected:\n%s", raw)
	}
	body, err := m.Chat("https://fleet.example.com")
	if err != nil {
		t.Fatal(err)
	}
	var chat struct{ Text string }
	if err := json.Unmarshal(body, &chat); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(strings.NewReplacer("&amp;", "", "&lt;", "", "&gt;", "").Replace(chat.Text), "<>&") || strings.Contains(chat.Text, "@all") {
		t.Errorf("chat text keeps markup: %q", chat.Text)
	}
	if !strings.Contains(chat.Text, "&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;") {
		t.Errorf("chat text %q: names not escaped as Slack says", chat.Text)
	}
	if !strings.Contains(chat.Text, "https://fleet.example.com/panel/alerts/al_7") || !strings.Contains(chat.Text, "92.5 °C") {
		t.Errorf("chat text lacks value or link: %q", chat.Text)
	}
}

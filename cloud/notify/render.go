package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// maxUserText bounds a device or rule name, or an alert's text, in a
// rendered message (runes); longer ones are cut with an ellipsis.
const maxUserText = 200

// AlertLink returns the panel page of the message's alert: publicURL
// (the relay's --public-url) + "/panel/alerts/" + the alert id; "" when the
// message names no alert (a test message).
func (m Message) AlertLink(publicURL string) string {
	if m.AlertID == "" || publicURL == "" {
		return ""
	}
	return strings.TrimRight(publicURL, "/") + "/panel/alerts/" + url.PathEscape(m.AlertID)
}

// Subject is the one-line summary of m: the e-mail subject and the first
// line of a chat message, e.g. "[Fleet ERROR] Boiler hot on Press line 1:
// temperature 92.5 °C > 80 °C". User text in it is one line of plain text
// (control characters, CR and LF included, become spaces).
func (m Message) Subject() string {
	rule, dev, text := m.names()
	switch m.Event {
	case EventTest:
		return "[Fleet test] Test message from Fleet"
	case EventResolved:
		return fmt.Sprintf("[Fleet RESOLVED] %s on %s", rule, dev)
	case EventReminder:
		return withText(fmt.Sprintf("[Fleet %s] Still active: %s on %s", m.severity(), rule, dev), text)
	default:
		return withText(fmt.Sprintf("[Fleet %s] %s on %s", m.severity(), rule, dev), text)
	}
}

func withText(s, text string) string {
	if text == "" {
		return s
	}
	return s + ": " + text
}

// names returns the rule and device names (their ids when unnamed) and the
// alert's text, each one clean line of bounded length.
func (m Message) names() (rule, device, text string) {
	return line(cmpOr(m.RuleName, m.RuleID, "alert")), line(cmpOr(m.DeviceName, m.DeviceID, "a device")), line(m.Text)
}

func (m Message) severity() string { return line(cmpOr(string(m.Severity), "ALERT")) }

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}

// line makes user text one line of plain text: control characters (CR
// and LF included) become spaces, runs of spaces one, at most maxUserText
// runes, invalid UTF-8 replaced.
func line(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > maxUserText {
		s = string([]rune(s)[:maxUserText-1]) + "…"
	}
	return s
}

// number formats v with its unit: "92.5 °C", "95%".
func number(v *float64, unit string) string {
	if v == nil {
		return ""
	}
	s := strconv.FormatFloat(*v, 'f', -1, 64)
	unit = line(unit)
	switch {
	case unit == "":
		return s
	case unit == "%":
		return s + unit
	default:
		return s + " " + unit
	}
}

// when formats t for people: UTC to the second.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// Body is the plain-text body of m (the e-mail body): what happened in a
// sentence, then device, rule, severity, value, threshold, state and time
// (UTC), and the link to the alert in the panel.
func (m Message) Body(publicURL string) string {
	rule, dev, text := m.names()
	var b strings.Builder
	switch m.Event {
	case EventTest:
		b.WriteString("This is a test message from Fleet: the notification channel works.\n")
		if m.ChannelID != "" {
			fmt.Fprintf(&b, "\nChannel:   %s\n", line(m.ChannelID))
		}
		fmt.Fprintf(&b, "Time:      %s\n", when(m.At))
		return b.String()
	case EventResolved:
		fmt.Fprintf(&b, "The alert %s on %s is resolved.\n", rule, dev)
	case EventReminder:
		fmt.Fprintf(&b, "The alert %s on %s is still active: nobody acknowledged it.\n", rule, dev)
	default:
		fmt.Fprintf(&b, "An alert opened: %s on %s.\n", rule, dev)
	}
	if text != "" {
		fmt.Fprintf(&b, "\n%s\n", text)
	}
	b.WriteString("\n")
	field := func(name, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%-11s%s\n", name+":", v)
		}
	}
	field("Device", withID(dev, m.DeviceID))
	field("Rule", withID(rule, m.RuleID))
	field("Severity", m.severity())
	field("Source", line(m.Source))
	field("Value", number(m.Value, m.Unit))
	field("Threshold", number(m.Threshold, m.Unit))
	field("State", line(m.State))
	field("Time", when(m.At))
	if link := m.AlertLink(publicURL); link != "" {
		fmt.Fprintf(&b, "\nOpen the alert: %s\n", link)
	}
	return b.String()
}

func withID(name, id string) string {
	id = line(id)
	if id == "" || id == name {
		return name
	}
	return name + " (" + id + ")"
}

// Mail is the envelope and header fields of an e-mail.
type Mail struct {
	From string   // a plain address (checked by the sender's configuration)
	To   []string // plain addresses (cloud.ParseRecipients)
	// ID is the outbox delivery's id: the Message-ID is <ID@host>, the
	// same for every attempt, so that a receiver can drop a retried copy.
	ID   string
	Host string // of the Message-ID; the From address's domain when ""
	Date time.Time
}

// Email renders m as an RFC 5322 message (CRLF lines): Date, From, To,
// Subject (MIME Q-encoded when not ASCII), Message-ID, a text/plain UTF-8
// body in quoted-printable.
func (m Message) Email(h Mail, publicURL string) ([]byte, error) {
	host := h.Host
	if host == "" {
		if at := strings.LastIndexByte(h.From, '@'); at >= 0 {
			host = h.From[at+1:]
		}
	}
	if host == "" || strings.ContainsAny(host+h.ID+h.From+strings.Join(h.To, ""), "\r\n<>") {
		return nil, fmt.Errorf("notify: bad mail header (from %q, id %q)", h.From, h.ID)
	}
	var b bytes.Buffer
	hdr := func(name, v string) { fmt.Fprintf(&b, "%s: %s\r\n", name, v) }
	hdr("Date", h.Date.Format(time.RFC1123Z))
	hdr("From", h.From)
	hdr("To", strings.Join(h.To, ", "))
	hdr("Subject", mime.QEncoding.Encode("utf-8", m.Subject()))
	hdr("Message-ID", "<"+h.ID+"@"+host+">")
	hdr("MIME-Version", "1.0")
	hdr("Content-Type", "text/plain; charset=utf-8")
	hdr("Content-Transfer-Encoding", "quoted-printable")
	hdr("Auto-Submitted", "auto-generated") // RFC 3834: no auto-replies
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	body := strings.ReplaceAll(m.Body(publicURL), "\n", "\r\n")
	if _, err := qp.Write([]byte(body)); err != nil {
		return nil, err
	}
	if err := qp.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// chatEscaper escapes what Slack's message format reads as markup
// (&, <, >: links and mentions such as <!channel>); Mattermost and
// Rocket.Chat render the entities as the characters.
var chatEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// chatText escapes user text for a chat message: Slack markup, and the
// "@" of Mattermost's and Rocket.Chat's @channel/@all/@here mentions
// (followed by a zero-width space, so it shows but does not notify).
func chatText(s string) string {
	return strings.ReplaceAll(chatEscaper.Replace(s), "@", "@\u200b")
}

// Chat renders m as a Slack incoming-webhook body {"text": ...} (which
// Mattermost and Rocket.Chat accept): the subject, the value and
// threshold, and the link to the alert.
func (m Message) Chat(publicURL string) ([]byte, error) {
	var b strings.Builder
	b.WriteString(chatText(m.Subject()))
	var facts []string
	if v := number(m.Value, m.Unit); v != "" && m.Event != EventResolved {
		facts = append(facts, "value "+chatText(v))
	}
	if v := number(m.Threshold, m.Unit); v != "" {
		facts = append(facts, "threshold "+chatText(v))
	}
	if s := line(m.State); s != "" {
		facts = append(facts, chatText(s))
	}
	facts = append(facts, when(m.At))
	b.WriteString("\n" + strings.Join(facts, " · "))
	if link := m.AlertLink(publicURL); link != "" {
		b.WriteString("\n" + chatEscaper.Replace(link))
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // the text is already escaped as Slack wants
	if err := enc.Encode(struct {
		Text string `json:"text"`
	}{b.String()}); err != nil {
		return nil, err
	}
	return bytes.TrimRight(out.Bytes(), "\n"), nil
}

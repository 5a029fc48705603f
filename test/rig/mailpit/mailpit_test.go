package mailpit_test

import (
	"net/smtp"
	"strings"
	"testing"

	"github.com/fleet/fleet/test/rig/mailpit"
)

func TestMailpitReceivesAndLists(t *testing.T) {
	s := mailpit.Start(t, mailpit.Options{})
	msg := "From: fleet@example.com\r\nTo: ops@example.com\r\nSubject: hello\r\n\r\nbody line\r\n"
	if err := smtp.SendMail(s.SMTPAddr(), nil, "fleet@example.com", []string{"ops@example.com"}, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Messages()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Subject != "hello" || ms[0].To[0].Address != "ops@example.com" || !strings.Contains(ms[0].Text, "body line") {
		t.Fatalf("received %+v", ms)
	}
	s.Stop()
	if err := smtp.SendMail(s.SMTPAddr(), nil, "fleet@example.com", []string{"ops@example.com"}, []byte(msg)); err == nil {
		t.Fatal("a stopped server accepted mail")
	}
	s.Restart()
	if ms, err := s.Messages(); err != nil || len(ms) != 1 {
		t.Fatalf("after restart: %v %d", err, len(ms))
	}
}

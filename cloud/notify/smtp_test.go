package notify_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/notify"
	"github.com/fleet/fleet/test/rig/smtptest"
)

func sender(t *testing.T, srv *smtptest.Server, url string) *notify.SMTP {
	t.Helper()
	u, err := notify.ParseSMTPURL(url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := notify.NewSMTP(notify.SMTPConfig{Server: u, From: "fleet@example.com", RootCAs: srv.CA, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func send(t *testing.T, s *notify.SMTP) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.SendMessage(ctx, "dl_1", []string{"ops@example.com"}, boiler(notify.EventOpened), "https://fleet.example.com", at)
}

// TestSMTPModes: each URL form reaches a real server on loopback, over
// TLS where it says so, authenticating when it names a user.
func TestSMTPModes(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts smtptest.Options
		url  func(addr string) string
		tls  bool
	}{
		{"starttls+auth", smtptest.Options{Mode: smtptest.StartTLS, User: "fleet", Password: "p@ss/wörd"},
			func(a string) string { return "smtp://fleet:p%40ss%2Fw%C3%B6rd@" + a }, true},
		{"implicit tls+auth", smtptest.Options{Mode: smtptest.TLS, User: "fleet", Password: "pw"},
			func(a string) string { return "smtps://fleet:pw@" + a }, true},
		{"starttls, no auth", smtptest.Options{Mode: smtptest.StartTLS}, func(a string) string { return "smtp://" + a }, true},
		{"plain on loopback", smtptest.Options{Mode: smtptest.Plain}, func(a string) string { return "smtp+insecure://" + a }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := smtptest.Start(t, tc.opts)
			code, err := send(t, sender(t, srv, tc.url(srv.Addr)))
			if err != nil || code != 250 {
				t.Fatalf("send: %d %v", code, err)
			}
			m := srv.Wait(t, 5*time.Second)
			if m.TLS != tc.tls || m.User != tc.opts.User || m.From != "fleet@example.com" || strings.Join(m.To, ",") != "ops@example.com" {
				t.Errorf("received %+v", m)
			}
			if !strings.Contains(string(m.Data), "Message-ID: <dl_1@example.com>") {
				t.Errorf("message lacks its Message-ID:\n%s", m.Data)
			}
		})
	}
}

// TestSMTPRefusesCleartext: smtp:// never sends to a server that does not
// offer STARTTLS; smtp+insecure:// is refused for a host off loopback.
func TestSMTPRefusesCleartext(t *testing.T) {
	srv := smtptest.Start(t, smtptest.Options{Mode: smtptest.Plain})
	code, err := send(t, sender(t, srv, "smtp://"+srv.Addr))
	if err == nil || !strings.Contains(err.Error(), "STARTTLS") || errors.Is(err, notify.ErrPermanent) {
		t.Errorf("send to a server without STARTTLS: %d %v; want a retried error naming STARTTLS", code, err)
	}
	if n := srv.Attempts(); n != 0 {
		t.Errorf("%d messages reached the server", n)
	}
	for _, u := range []string{"smtp+insecure://mail.example.com:25", "smtp+insecure://10.0.0.5:25", "smtp+insecure://[2001:db8::1]:25"} {
		if _, err := notify.ParseSMTPURL(u); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s: %v; want refused naming loopback", u, err)
		}
	}
}

// TestSMTPTrustsOnlyItsCA: a server whose certificate the sender does not
// trust gets nothing.
func TestSMTPTrustsOnlyItsCA(t *testing.T) {
	srv := smtptest.Start(t, smtptest.Options{Mode: smtptest.StartTLS})
	u, _ := notify.ParseSMTPURL("smtp://" + srv.Addr)
	s, err := notify.NewSMTP(notify.SMTPConfig{Server: u, From: "fleet@example.com", Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := send(t, s); err == nil || errors.Is(err, notify.ErrPermanent) {
		t.Errorf("send with an untrusted certificate: %v", err)
	}
	if srv.Attempts() != 0 {
		t.Error("a message reached the server")
	}
}

// TestSMTPReplies: 5xx is permanent, 4xx may succeed later, a bad
// password is refused (535), and the error never shows the password.
func TestSMTPReplies(t *testing.T) {
	for _, tc := range []struct {
		code      int
		permanent bool
	}{{550, true}, {451, false}} {
		srv := smtptest.Start(t, smtptest.Options{Mode: smtptest.StartTLS, Reply: func(int, smtptest.Received) int { return tc.code }})
		code, err := send(t, sender(t, srv, "smtp://"+srv.Addr))
		if code != tc.code || err == nil || errors.Is(err, notify.ErrPermanent) != tc.permanent {
			t.Errorf("reply %d: got %d %v (permanent %v)", tc.code, code, err, errors.Is(err, notify.ErrPermanent))
		}
	}
	srv := smtptest.Start(t, smtptest.Options{Mode: smtptest.StartTLS, User: "fleet", Password: "right"})
	code, err := send(t, sender(t, srv, "smtp://fleet:wrong-s3cret@"+srv.Addr))
	if code != 535 || !errors.Is(err, notify.ErrPermanent) || strings.Contains(err.Error(), "wrong-s3cret") {
		t.Errorf("bad password: %d %v", code, err)
	}
}

// TestSMTPTimeout: a server that accepts the connection and says nothing
// is given up on after the timeout, as a failure to retry.
func TestSMTPTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	u, _ := notify.ParseSMTPURL("smtp://" + ln.Addr().String())
	s, _ := notify.NewSMTP(notify.SMTPConfig{Server: u, From: "fleet@example.com", Timeout: 300 * time.Millisecond})
	start := time.Now()
	_, err = s.SendMessage(context.Background(), "dl_1", []string{"ops@example.com"}, boiler(notify.EventOpened), "", at)
	var ne net.Error
	if err == nil || errors.Is(err, notify.ErrPermanent) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("silent server: %v after %s; want a timeout", err, time.Since(start))
	}
}

// TestParseSMTPURL: defaults and refusals, with the password hidden.
func TestParseSMTPURL(t *testing.T) {
	u, err := notify.ParseSMTPURL("smtp://me:s3cret@mail.example.com")
	if err != nil || u.Port != "587" || u.String() != "smtp://me:xxxxx@mail.example.com:587" {
		t.Errorf("%+v %v; string %q", u, err, u.String())
	}
	if u, _ := notify.ParseSMTPURL("smtps://mail.example.com"); u.Port != "465" {
		t.Errorf("smtps port %q", u.Port)
	}
	for _, bad := range []string{"http://mail.example.com", "smtp://", "smtp://mail.example.com/x", "smtp://:pw@mail.example.com", "smtp://mail.example.com:smtpx"} {
		if _, err := notify.ParseSMTPURL(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

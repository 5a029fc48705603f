// Package oidcprovider runs a real OpenID Connect provider on loopback for
// the single sign-on tests: zitadel/oidc's example provider
// (github.com/zitadel/oidc/v3/example/server: its exampleop server with
// its login form, and its in-memory storage with its own RSA signing key),
// configured with one confidential web client and the tests' users. Its
// issuer is http://127.0.0.1:<port>/.
//
// PublishOtherKeys makes the provider's key endpoint answer the keys of a
// second instance of the same provider (same issuer, another signing key):
// the tokens it goes on signing are then signed by a key the issuer does
// not publish, as after a forged or misrouted token.
package oidcprovider

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

// User is a person who can sign in at the provider (with Username and
// Password on its login form).
type User struct {
	Username, Password string
	Email              string
	EmailVerified      bool
}

// Config is the client the relay is registered as, and the users.
type Config struct {
	ClientID, ClientSecret string
	RedirectURIs           []string
	Users                  []User
}

// Provider is a running provider.
type Provider struct {
	// Issuer is the provider's issuer URL (with its trailing slash, as
	// its tokens name it).
	Issuer string
	other  atomic.Bool
}

// users is the example storage's UserStore over the configured users.
type users map[string]*storage.User

func (u users) GetUserByID(id string) *storage.User { return u[id] }

func (u users) GetUserByUsername(name string) *storage.User {
	for _, x := range u {
		if x.Username == name {
			return x
		}
	}
	return nil
}

func (users) ExampleClientID() string { return storage.ServiceUserID }

// Start runs the provider until tb ends.
func Start(tb testing.TB, cfg Config) *Provider {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Provider{Issuer: "http://" + ln.Addr().String() + "/"}
	us := users{}
	for i, u := range cfg.Users {
		id := "user-" + string(rune('a'+i))
		us[id] = &storage.User{ID: id, Username: u.Username, Password: u.Password, Email: u.Email, EmailVerified: u.EmailVerified,
			FirstName: u.Username, LastName: "Test"}
	}
	client := func() map[string]*storage.Client {
		return map[string]*storage.Client{cfg.ClientID: storage.WebClient(cfg.ClientID, cfg.ClientSecret, cfg.RedirectURIs...)}
	}
	// Two instances of the provider with the same issuer, each with its
	// own signing key; the second serves only its keys, when asked to.
	main := exampleop.SetupServer(p.Issuer, storage.NewStorageWithClients(us, client()), nil, false)
	second := exampleop.SetupServer(p.Issuer, storage.NewStorageWithClients(us, client()), nil, false)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.other.Load() && strings.HasPrefix(r.URL.Path, "/keys") {
			second.ServeHTTP(w, r)
			return
		}
		main.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return p
}

// PublishOtherKeys makes the key endpoint answer the second instance's
// keys from now on (true) or the provider's own again (false).
func (p *Provider) PublishOtherKeys(on bool) { p.other.Store(on) }

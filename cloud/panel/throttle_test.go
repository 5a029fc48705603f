package panel_test

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/panel"
	"github.com/fleet/fleet/cloud/password"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/test/rig/logbuf"
)

// anonFrom is a browser at another loopback address (127.0.0.0/8 is all
// this host's): the panel sees ip as the client's address.
func (h *harness) anonFrom(ip string) *client {
	c := h.anon()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	c.hc.Transport = &http.Transport{DialContext: d.DialContext}
	return c
}

// signInStatus posts one sign-in from a fresh browser of c's address and
// returns the status (0 when the request failed), for many goroutines at
// once.
func signInStatus(hc *http.Client, base, email, pw string) int {
	jar, _ := cookiejar.New(nil)
	c := *hc
	c.Jar = jar
	resp, err := c.PostForm(base+"/panel/login", url.Values{"email": {email}, "password": {pw}})
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSignInThrottleHoldsUnderConcurrency: 99 wrong passwords and the right
// one sent at once from one address check at most the account's budget of
// wrong passwords (5): the rest are refused 429 unchecked, and the right one
// signs in only if it came within the budget. The right password from another
// address afterwards signs in.
func TestSignInThrottleHoldsUnderConcurrency(t *testing.T) {
	stores.Run(t, testSignInThrottleHoldsUnderConcurrency)
}

func testSignInThrottleHoldsUnderConcurrency(t *testing.T, open storetest.Opener) {
	hasher := password.NewHasher(password.Params{MemoryKiB: 64, Time: 1, Threads: 1}, 4)
	h := newHarness(t, open, func(c *panel.Config) { c.Hasher = hasher; c.Throttle = panel.DefaultThrottle })
	email := h.users[cloud.RoleAdmin].Email
	attacker := h.anonFrom("127.0.0.2").hc
	const n = 100
	statuses := make([]int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		pw := "wrong guess " + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if i == n-1 {
			pw = testPassword
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			statuses[i] = signInStatus(attacker, h.ts.URL, email, pw)
		}()
	}
	close(start)
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	// The right password, once checked, gives its attempt back (reserve's
	// done(false)): one more may then be checked. A checked sign-in runs
	// argon2id cloud.MaxAccountsPerEmail times (every account of the email,
	// padded: account.go).
	budget := panel.DefaultThrottle.PerAccount + count[http.StatusSeeOther]
	if runs := hasher.Derived(); runs > int64(budget*cloud.MaxAccountsPerEmail) {
		t.Errorf("%d concurrent sign-ins checked %d passwords, want at most %d (answers %v)", n, runs/cloud.MaxAccountsPerEmail, budget, count)
	}
	if checked := count[http.StatusUnauthorized] + count[http.StatusSeeOther]; checked > budget || count[http.StatusUnauthorized] > panel.DefaultThrottle.PerAccount || count[http.StatusTooManyRequests] < n-budget {
		t.Errorf("answers %v: want at most %d checked, the rest 429", count, budget)
	}
	if count[http.StatusSeeOther] == 1 && statuses[n-1] != http.StatusSeeOther {
		t.Errorf("a wrong password signed in: %v", statuses)
	}
	// The attack locked the account from its address only.
	if s := signInStatus(attacker, h.ts.URL, email, testPassword); s != http.StatusTooManyRequests {
		t.Errorf("the right password from the attacking address afterwards: %d, want 429", s)
	}
	if s := signInStatus(h.anon().hc, h.ts.URL, email, testPassword); s != http.StatusSeeOther {
		t.Errorf("the right password from another address afterwards: %d, want 303 (signed in)", s)
	}
}

// TestSignInLockoutIsPerAddress: whoever knows an email can use up its
// failures from their own address only; the account's owner signs in from
// theirs. Guesses from many addresses reach the account's ceiling, which
// holds back new addresses but not one the account signed in from before.
func TestSignInLockoutIsPerAddress(t *testing.T) { stores.Run(t, testSignInLockoutIsPerAddress) }

func testSignInLockoutIsPerAddress(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open, func(c *panel.Config) {
		c.Throttle = panel.Throttle{PerAccount: 3, PerAddress: 50, AccountCeiling: 6, Window: time.Hour}
	})
	email := h.users[cloud.RoleAdmin].Email
	try := func(ip, pw string) int {
		t.Helper()
		return h.anonFrom(ip).post("/panel/login", url.Values{"email": {email}, "password": {pw}}).status
	}
	if s := try("127.0.0.1", testPassword); s != http.StatusSeeOther {
		t.Fatalf("first sign-in: %d", s)
	}
	for i := range 3 {
		if s := try("127.0.0.2", "wrong guess "+string(rune('a'+i))); s != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, s)
		}
	}
	if s := try("127.0.0.2", testPassword); s != http.StatusTooManyRequests {
		t.Errorf("the right password from the guessing address: %d, want 429", s)
	}
	if s := try("127.0.0.1", testPassword); s != http.StatusSeeOther {
		t.Errorf("the right password from the owner's address while another is locked: %d, want 303", s)
	}
	for i := range 3 {
		try("127.0.0.3", "another guess "+string(rune('a'+i)))
	}
	// 6 failures from two addresses: the account's ceiling.
	if s := try("127.0.0.4", testPassword); s != http.StatusTooManyRequests {
		t.Errorf("the right password from a new address at the account's ceiling: %d, want 429", s)
	}
	if s := try("127.0.0.1", testPassword); s != http.StatusSeeOther {
		t.Errorf("the right password from where the account signed in before, at its ceiling: %d, want 303", s)
	}
}

// TestRefusedSignInsAreLoggedInSummary: a flood of wrong and throttled
// sign-ins logs a line for the first of each address, then one summary
// with the counts.
func TestRefusedSignInsAreLoggedInSummary(t *testing.T) {
	stores.Run(t, testRefusedSignInsAreLoggedInSummary)
}

func testRefusedSignInsAreLoggedInSummary(t *testing.T, open storetest.Opener) {
	logs := &logbuf.Buffer{}
	h := newHarness(t, open, func(c *panel.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	h.srv.HoldSignInSummary()
	const n = 300
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		hc := h.anonFrom(ip).hc
		for i := range n / 2 {
			signInStatus(hc, h.ts.URL, "nobody@acme.example", "wrong "+string(rune('a'+i%26)))
		}
	}
	h.srv.FlushSignInLog()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var own, summary []string
	for _, l := range lines {
		switch {
		case strings.Contains(l, `msg="panel sign-in refused"`):
			own = append(own, l)
		case strings.Contains(l, `msg="panel sign-ins refused"`):
			summary = append(summary, l)
		}
	}
	if len(own) != 2 || len(summary) != 1 {
		t.Fatalf("%d refused sign-ins from 2 addresses logged %d lines of their own and %d summaries, want 2 and 1:\n%s", n, len(own), len(summary), logs.String())
	}
	for _, want := range []string{"count=300", "addresses=2", "wrong_password=", "throttled="} {
		if !strings.Contains(summary[0], want) {
			t.Errorf("summary lacks %s: %s", want, summary[0])
		}
	}
}

// TestSignInBudgetComesBack: the failures decay with the window: the right
// password refused at the limit signs in once the window has passed.
func TestSignInBudgetComesBack(t *testing.T) { stores.Run(t, testSignInBudgetComesBack) }

func testSignInBudgetComesBack(t *testing.T, open storetest.Opener) {
	clock := storetest.NewClock(time.Now())
	h := newHarness(t, open, func(c *panel.Config) {
		c.Now = clock.Now
		c.Throttle = panel.Throttle{PerAccount: 2, PerAddress: 50, Window: time.Minute}
	})
	email := h.users[cloud.RoleViewer].Email
	c := h.anon()
	for i := range 2 {
		c.post("/panel/login", url.Values{"email": {email}, "password": {"wrong guess " + string(rune('a'+i))}})
	}
	if r := c.post("/panel/login", url.Values{"email": {email}, "password": {testPassword}}); r.status != http.StatusTooManyRequests {
		t.Fatalf("at the limit: %d, want 429", r.status)
	}
	clock.Add(2 * time.Minute)
	if r := c.post("/panel/login", url.Values{"email": {email}, "password": {testPassword}}); r.status != http.StatusSeeOther {
		t.Errorf("after the window: %d, want 303", r.status)
	}
}

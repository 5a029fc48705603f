package storetest

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fleet/fleet/cloud"
)

// Two-factor sign-in's part of the contract (cloud.TwoFactorService).

// testTwoFactor: enrolment with its record, the spent step of the
// confirming code, steps accepted only forward (also from a second handle,
// as another relay), recovery codes used once, the organization's
// requirement with its record, reset with its record; another
// organization's user is not found.
func testTwoFactor(t *testing.T, open Opener) {
	e := newEnv(t, open)
	acme, other := e.org("acme"), e.org("other")
	ada := e.user(acme.ID, "ada@acme.example", cloud.RoleOwner)
	sam := e.user(other.ID, "sam@other.example", cloud.RoleOwner)
	p := e.Panel
	st, err := p.TwoFactorOf(e.ctx, acme.ID, ada.ID)
	if err != nil || st.Enrolled() || st.OrgRequires || st.RecoveryLeft != 0 {
		t.Fatalf("fresh user: %+v, %v", st, err)
	}
	if _, err := p.TOTPSecret(e.ctx, acme.ID, ada.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("secret before enrolment: %v", err)
	}
	hashes := make([]string, cloud.RecoveryCodeCount)
	for i := range hashes {
		hashes[i] = fmt.Sprintf("hash-%d", i)
	}
	enrol := cloud.TOTPEnrolment{Secret: "JBSWY3DPEHPK3PXP", Step: 1000, RecoveryHashes: hashes}
	if err := p.EnrollTOTP(e.ctx, other.ID, ada.ID, enrol); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("enrol another organization's user: %v", err)
	}
	if err := p.EnrollTOTP(e.ctx, acme.ID, ada.ID, cloud.TOTPEnrolment{Secret: "X", RecoveryHashes: hashes[:3]}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("enrol with 3 recovery codes: %v", err)
	}
	ea := e.acting(auditUser)
	if err := ea.Panel.EnrollTOTP(ea.ctx, acme.ID, ada.ID, enrol); err != nil {
		t.Fatal(err)
	}
	member := cloud.AuditTarget{Kind: cloud.TargetMember, ID: ada.ID}
	rec, d := e.wantAudit(acme.ID, cloud.ActionMember2FAEnrolled, auditUser, member)
	for _, secret := range []string{enrol.Secret, "hash-0"} {
		if strings.Contains(string(rec.Details), secret) {
			t.Errorf("the enrolment's record holds a secret: %s", rec.Details)
		}
	}
	if d["method"] != "totp" {
		t.Errorf("enrolment details %v", d)
	}
	if err := p.EnrollTOTP(e.ctx, acme.ID, ada.ID, enrol); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("enrol twice: %v", err)
	}
	st, _ = p.TwoFactorOf(e.ctx, acme.ID, ada.ID)
	if !st.Enrolled() || !st.EnrolledAt.Equal(t0) || st.RecoveryLeft != cloud.RecoveryCodeCount {
		t.Errorf("after enrolment: %+v", st)
	}
	if s, err := p.TOTPSecret(e.ctx, acme.ID, ada.ID); err != nil || s != enrol.Secret {
		t.Errorf("secret: %q, %v", s, err)
	}
	if _, err := p.TOTPSecret(e.ctx, other.ID, ada.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("secret through another organization: %v", err)
	}
	if _, err := p.TwoFactorOf(e.ctx, acme.ID, sam.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("state of another organization's user: %v", err)
	}

	// Steps: the confirming code's is spent; only later ones are accepted,
	// once, whichever handle asks.
	e2 := e.reopen()
	for _, c := range []struct {
		step int64
		ok   bool
		p    cloud.PanelStore
	}{{1000, false, p}, {999, false, e2.Panel}, {1001, true, p}, {1001, false, e2.Panel}, {1003, true, e2.Panel}, {1002, false, p}} {
		if ok, err := c.p.UseTOTPStep(e.ctx, acme.ID, ada.ID, c.step); err != nil || ok != c.ok {
			t.Errorf("step %d: %v, %v; want %v", c.step, ok, err, c.ok)
		}
	}
	if ok, _ := p.UseTOTPStep(e.ctx, other.ID, ada.ID, 5000); ok {
		t.Error("a step was spent through another organization")
	}
	// The same step from many relays at once: exactly one wins.
	if n := race(t, 8, p, e2.Panel, func(ps cloud.PanelStore) (bool, error) { return ps.UseTOTPStep(e.ctx, acme.ID, ada.ID, 2000) }); n != 1 {
		t.Errorf("step 2000 accepted %d times at once, want 1", n)
	}

	// Recovery codes: each once, also under concurrency.
	if ok, _ := p.UseRecoveryCode(e.ctx, other.ID, ada.ID, "hash-1"); ok {
		t.Error("a recovery code was used through another organization")
	}
	if ok, err := p.UseRecoveryCode(e.ctx, acme.ID, ada.ID, "hash-1"); err != nil || !ok {
		t.Fatalf("recovery code: %v, %v", ok, err)
	}
	if ok, _ := e2.Panel.UseRecoveryCode(e.ctx, acme.ID, ada.ID, "hash-1"); ok {
		t.Error("a recovery code worked twice")
	}
	if ok, _ := p.UseRecoveryCode(e.ctx, acme.ID, ada.ID, "no such hash"); ok {
		t.Error("an unknown recovery code worked")
	}
	if n := race(t, 6, p, e2.Panel, func(ps cloud.PanelStore) (bool, error) { return ps.UseRecoveryCode(e.ctx, acme.ID, ada.ID, "hash-2") }); n != 1 {
		t.Errorf("recovery code used %d times at once, want 1", n)
	}
	if st, _ := p.TwoFactorOf(e.ctx, acme.ID, ada.ID); st.RecoveryLeft != cloud.RecoveryCodeCount-2 {
		t.Errorf("recovery codes left %d, want %d", st.RecoveryLeft, cloud.RecoveryCodeCount-2)
	}

	// The organization's requirement: a record only when it changes.
	if err := p.SetOrgRequire2FA(e.ctx, "nosuchorg", true); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("require for an unknown organization: %v", err)
	}
	for range 2 {
		if err := ea.Panel.SetOrgRequire2FA(ea.ctx, acme.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	_, d = e.wantAudit(acme.ID, cloud.ActionOrg2FA, auditUser, cloud.AuditTarget{Kind: cloud.TargetOrg})
	if d["from"] != false || d["to"] != true {
		t.Errorf("requirement details %v, want from false to true", d)
	}
	for _, c := range []struct {
		org, user string
		want      bool
	}{{acme.ID, ada.ID, true}, {other.ID, sam.ID, false}} {
		if st, err := e2.Panel.TwoFactorOf(e.ctx, c.org, c.user); err != nil || st.OrgRequires != c.want {
			t.Errorf("requirement read from another handle: %+v, %v; want %v", st, err, c.want)
		}
	}

	// Reset (a lost phone, by the CLI): secret and codes gone, recorded
	// once.
	ec := e.acting(auditCLI)
	if _, err := ec.Panel.ResetTwoFactor(ec.ctx, other.ID, ada.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("reset through another organization: %v", err)
	}
	for i, want := range []bool{true, false} {
		if was, err := ec.Panel.ResetTwoFactor(ec.ctx, acme.ID, ada.ID); err != nil || was != want {
			t.Errorf("reset %d: %v, %v; want %v", i, was, err, want)
		}
	}
	e.wantAudit(acme.ID, cloud.ActionMember2FAReset, auditCLI, member)
	st, _ = p.TwoFactorOf(e.ctx, acme.ID, ada.ID)
	if st.Enrolled() || st.RecoveryLeft != 0 || !st.OrgRequires {
		t.Errorf("after reset: %+v", st)
	}
	if ok, _ := p.UseRecoveryCode(e.ctx, acme.ID, ada.ID, "hash-3"); ok {
		t.Error("a recovery code worked after reset")
	}
	if ok, _ := p.UseTOTPStep(e.ctx, acme.ID, ada.ID, 9999); ok {
		t.Error("a step was accepted after reset")
	}
	// Enrolling again starts afresh.
	if err := p.EnrollTOTP(e.ctx, acme.ID, ada.ID, enrol); err != nil {
		t.Fatalf("enrol after reset: %v", err)
	}
	if ok, _ := p.UseRecoveryCode(e.ctx, acme.ID, ada.ID, "hash-1"); !ok {
		t.Error("a fresh enrolment's recovery code was refused")
	}
}

// race runs try n times at once, alternately on a and b (two relays), and
// returns how many times it returned true.
func race(t *testing.T, n int, a, b cloud.PanelStore, try func(cloud.PanelStore) (bool, error)) int {
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		ps := a
		if i%2 == 1 {
			ps = b
		}
		wg.Go(func() {
			if ok, err := try(ps); err != nil {
				t.Error(err)
			} else if ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	return int(wins.Load())
}

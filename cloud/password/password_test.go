package password_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud/password"
)

func TestHashCheck(t *testing.T) {
	ctx := context.Background()
	h := password.NewHasher(password.Params{MemoryKiB: 64, Time: 1, Threads: 1}, 2)
	phc, err := h.Hash(ctx, "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(phc, "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("hash %q is not a PHC argon2id string", phc)
	}
	if err := h.Check(ctx, "correct horse battery", phc); err != nil {
		t.Fatalf("right password: %v", err)
	}
	if err := h.Check(ctx, "correct horse batterY", phc); !errors.Is(err, password.ErrMismatch) {
		t.Fatalf("wrong password: %v, want ErrMismatch", err)
	}
	again, _ := h.Hash(ctx, "correct horse battery")
	if again == phc {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
	// A hash made under other parameters still verifies.
	strong := password.NewHasher(password.Params{MemoryKiB: 128, Time: 2, Threads: 1}, 1)
	if err := strong.Check(ctx, "correct horse battery", phc); err != nil {
		t.Fatalf("hash with older parameters: %v", err)
	}
	if err := h.CheckNothing(ctx, "anything"); !errors.Is(err, password.ErrMismatch) {
		t.Fatalf("CheckNothing = %v", err)
	}
}

func TestMalformedHash(t *testing.T) {
	h := password.NewHasher(password.Params{MemoryKiB: 64, Time: 1, Threads: 1}, 1)
	for _, phc := range []string{"", "plain", "$argon2i$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
		"$argon2id$v=19$m=99999999,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "$argon2id$v=19$m=64,t=1,p=1$!!$aGFzaA"} {
		if err := h.Check(context.Background(), "pw", phc); err == nil || errors.Is(err, password.ErrMismatch) {
			t.Errorf("Check(%q) = %v, want a malformed-hash error", phc, err)
		}
	}
}

func TestValidate(t *testing.T) {
	for pw, ok := range map[string]bool{"short": false, "twelve chars": true, strings.Repeat("x", 1025): false, "\xff\xfe invalid utf8": false} {
		if err := password.Validate(pw); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v", pw, err)
		}
	}
}

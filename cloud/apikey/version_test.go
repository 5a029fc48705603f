package apikey_test

import (
	"context"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
)

// TestAuthenticateAtTheCallersVersion: with the data version its caller
// read (the API reads one per request), the authenticator reads no version
// of its own; it reads a key's row once per version it is given, and on
// every call when the caller has none. A revocation shows at the first
// call given a version read after it.
func TestAuthenticateAtTheCallersVersion(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	store := &countingStore{DB: f.db}
	auth := apikey.NewAuthenticator(store, nil, 0)
	k, key := f.key(t, 0)
	at := func(version uint64, versioned bool) error {
		t.Helper()
		_, err := auth.AuthenticateAt(ctx, key, "", version, versioned)
		return err
	}
	rowReads := func(what string, want int64, do func()) {
		t.Helper()
		store.reads.Store(0)
		do()
		if n := store.reads.Load(); n != want {
			t.Fatalf("%s: %d key row reads, want %d", what, n, want)
		}
	}
	rowReads("three calls at one version", 1, func() {
		for range 3 {
			if err := at(7, true); err != nil {
				t.Fatal(err)
			}
		}
	})
	rowReads("a call at another version", 1, func() {
		if err := at(8, true); err != nil {
			t.Fatal(err)
		}
	})
	rowReads("two calls without a version", 2, func() {
		for range 2 {
			if err := at(0, false); err != nil {
				t.Fatal(err)
			}
		}
	})

	f.revokeFromCLI(t, k.ID)
	v, err := f.db.DataVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := at(v, true); cloud.ErrorCode(err) != cloud.EREVOKED {
		t.Fatalf("at a version read after the revocation: err = %v, want api_key_revoked", err)
	}
}

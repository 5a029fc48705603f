package postgres_test

import (
	"context"
	"testing"
	"time"
)

// TestLease: one relay at a time holds a lease; another takes it once it
// ran out. Asking about a lease another relay holds, or renewing one's own
// in the first half of its time, writes nothing: the data version holds
// still, so the API caches of every relay stay warm while relays ask every
// few seconds.
func TestLease(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, migratedDB(t))
	lease := "sweep"
	try := func(owner string, ttl time.Duration) bool {
		t.Helper()
		ok, err := db.TryLease(ctx, lease, owner, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	version := func() uint64 {
		t.Helper()
		v, err := db.DataVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if !try("relay-a", time.Minute) {
		t.Fatal("relay-a did not get a free lease")
	}
	// Reads only: relay-b is refused, relay-a's lease is fresh. (The
	// server's own background work may commit meanwhile: a few tries.)
	for attempt := 0; ; attempt++ {
		v := version()
		if try("relay-b", time.Minute) {
			t.Fatal("relay-b took the lease relay-a holds")
		}
		if !try("relay-a", time.Minute) {
			t.Fatal("relay-a lost its own lease")
		}
		if version() == v {
			break
		}
		if attempt == 10 {
			t.Fatal("asking about a held lease moved the data version every time: it writes")
		}
	}
	// A lease past the first half of its time is renewed; one that ran
	// out goes to whoever asks.
	lease = "retention"
	if !try("relay-a", 300*time.Millisecond) {
		t.Fatal("relay-a did not get a free lease")
	}
	time.Sleep(200 * time.Millisecond)
	v := version()
	if !try("relay-a", 300*time.Millisecond) {
		t.Fatal("relay-a lost its lease before it ran out")
	}
	if version() == v {
		t.Error("relay-a's lease with less than half its time left was not renewed (no write)")
	}
	time.Sleep(400 * time.Millisecond)
	if !try("relay-b", time.Minute) {
		t.Fatal("relay-b did not get the lease relay-a let run out")
	}
	if try("relay-a", time.Minute) {
		t.Fatal("relay-a got the lease back while relay-b holds it")
	}
}

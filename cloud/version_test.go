package cloud_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fleet/fleet/cloud"
)

// TestMemoVersion: within a request's memo the store's version is read
// once (its error too); without a memo every call reads.
func TestMemoVersion(t *testing.T) {
	reads := 0
	next := uint64(7)
	read := func(context.Context) (uint64, error) { reads++; next++; return next, nil }
	ctx := context.Background()
	if a, _ := cloud.MemoVersion(ctx, read); a != 8 {
		t.Fatalf("first read = %d", a)
	}
	if b, _ := cloud.MemoVersion(ctx, read); b != 9 || reads != 2 {
		t.Fatalf("without a memo: %d after %d reads, want 9 after 2", b, reads)
	}
	var m cloud.VersionMemo
	mctx := cloud.WithVersionMemo(ctx, &m)
	for range 3 {
		if v, err := cloud.MemoVersion(mctx, read); v != 10 || err != nil {
			t.Fatalf("with a memo: %d, %v; want 10 each time", v, err)
		}
	}
	if reads != 3 {
		t.Errorf("%d reads, want 3 (one for the memo)", reads)
	}
	boom := errors.New("database gone")
	var m2 cloud.VersionMemo
	ectx := cloud.WithVersionMemo(ctx, &m2)
	fail := func(context.Context) (uint64, error) { reads++; return 0, boom }
	for range 2 {
		if _, err := cloud.MemoVersion(ectx, fail); !errors.Is(err, boom) {
			t.Fatalf("error not kept: %v", err)
		}
	}
	if reads != 4 {
		t.Errorf("a failed read was retried within its memo: %d reads", reads)
	}
}

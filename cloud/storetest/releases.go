package storetest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jedisct1/go-minisign"

	"github.com/fleet/fleet/cloud"
)

// ReleaseBinary returns n random bytes, a binary to release, and its
// minisign signature file's text (prehashed, as minisign -S writes it) by a
// fresh Ed25519 key, made with go-minisign (the suite is product-side code
// and runs no test rig; the relay's tests sign with the minisign tool).
func ReleaseBinary(tb testing.TB, n int) ([]byte, string) {
	tb.Helper()
	data := make([]byte, n)
	rand.Read(data)
	_, sec, err := ed25519.GenerateKey(nil)
	if err != nil {
		tb.Fatal(err)
	}
	sk := minisign.PrivateKey{SignatureAlgorithm: [2]byte{'E', 'd'}, ChecksumAlgorithm: [2]byte{'B', '2'}}
	copy(sk.SecretKey[:], sec)
	rand.Read(sk.KeyId[:])
	sig, err := sk.Sign(data, minisign.SignOptions{Hashed: true, TrustedComment: "fleet-agent test release"})
	if err != nil {
		tb.Fatal(err)
	}
	return data, string(sig.Encode())
}

// Release adds a release of data to s and fails tb on an error.
func Release(tb testing.TB, s cloud.ReleaseService, nr cloud.NewRelease, data []byte) cloud.Release {
	tb.Helper()
	r, err := s.AddRelease(context.Background(), nr, bytes.NewReader(data))
	if err != nil {
		tb.Fatalf("add release %s/%s: %v", nr.Version, nr.Arch, err)
	}
	return r
}

// releaseReader reads release r of orgID through ReadRelease.
type releaseReader struct {
	ctx       context.Context
	s         cloud.ReleaseService
	orgID, id string
}

func (rr releaseReader) ReadAt(p []byte, off int64) (int, error) {
	return rr.s.ReadRelease(rr.ctx, rr.orgID, rr.id, p, off)
}

// testReleases: a release is stored in chunks and read back whole and
// across chunk boundaries (io.ReaderAt semantics), by this handle and
// another one on the same database (another relay); listed; another
// organization neither lists nor reads it; a version and arch stored
// again is a conflict; bad fields, an empty and a too big binary are
// refused naming the field, and store nothing.
func testReleases(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org, other := e.org("acme"), e.org("other")
	svc := e.Store.Releases()
	const c = cloud.ReleaseChunkBytes
	data, sig := ReleaseBinary(t, 2*c+12345)
	sum := sha256.Sum256(data)
	nr := cloud.NewRelease{OrgID: org.ID, Version: "1.4.0", Arch: "arm64", Signature: sig}
	r := Release(t, svc, nr, data)
	if r.ID == "" || r.OrgID != org.ID || r.Version != "1.4.0" || r.Arch != "arm64" || r.Size != int64(len(data)) ||
		r.SHA256 != hex.EncodeToString(sum[:]) || r.Signature != sig || !r.CreatedAt.Equal(t0) {
		t.Fatalf("added %+v", r)
	}
	if got, err := svc.Release(e.ctx, org.ID, r.ID); err != nil || got != r {
		t.Errorf("Release = %+v, %v; want %+v", got, err, r)
	}
	for _, s := range []cloud.ReleaseService{svc, e.reopen().Store.Releases()} {
		got, err := io.ReadAll(io.NewSectionReader(releaseReader{e.ctx, s, org.ID, r.ID}, 0, r.Size))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read whole: %d bytes, %v", len(got), err)
		}
	}
	for _, tc := range []struct {
		off     int64
		n, want int
		wantEOF bool
	}{
		{0, 10, 10, false},
		{c - 5, 10, 10, false},       // across the first boundary
		{c - 1, c + 2, c + 2, false}, // a whole chunk and a byte either side
		{int64(len(data)) - 5, 10, 5, true},
		{int64(len(data)), 1, 0, true},
		{int64(len(data)) + c, 1, 0, true},
	} {
		p := make([]byte, tc.n)
		n, err := svc.ReadRelease(e.ctx, org.ID, r.ID, p, tc.off)
		if n != tc.want || errors.Is(err, io.EOF) != tc.wantEOF || (err != nil && !errors.Is(err, io.EOF)) {
			t.Errorf("ReadRelease(%d bytes at %d) = %d, %v; want %d (EOF %v)", tc.n, tc.off, n, err, tc.want, tc.wantEOF)
			continue
		}
		if end := tc.off + int64(n); n > 0 && !bytes.Equal(p[:n], data[tc.off:end]) {
			t.Errorf("ReadRelease(%d bytes at %d): wrong bytes", tc.n, tc.off)
		}
	}

	// Another organization sees nothing of it.
	if _, err := svc.Release(e.ctx, other.ID, r.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("another organization's Release: %v", err)
	}
	if _, err := svc.ReadRelease(e.ctx, other.ID, r.ID, make([]byte, 10), 0); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("another organization's ReadRelease: %v", err)
	}
	if list, err := svc.ListReleases(e.ctx, other.ID); err != nil || len(list) != 0 {
		t.Errorf("another organization lists %+v, %v", list, err)
	}

	// The same version for another arch, and in another organization, is
	// another release; for the same arch a conflict.
	small, smallSig := ReleaseBinary(t, 100)
	e.clock.Add(time.Second)
	armv7 := Release(t, svc, cloud.NewRelease{OrgID: org.ID, Version: "1.4.0", Arch: "armv7", Signature: smallSig}, small)
	Release(t, svc, cloud.NewRelease{OrgID: other.ID, Version: "1.4.0", Arch: "arm64", Signature: smallSig}, small)
	if _, err := svc.AddRelease(e.ctx, nr, bytes.NewReader(small)); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("same version and arch again: %v", err)
	}

	big := io.LimitReader(zeros{}, cloud.MaxReleaseBytes+1)
	for _, tc := range []struct {
		nr    cloud.NewRelease
		body  io.Reader
		code  string
		field string
	}{
		{cloud.NewRelease{OrgID: org.ID, Version: "2.0.0", Arch: "amd64", Signature: sig}, big, cloud.EINVALID, "binary"},
		{cloud.NewRelease{OrgID: org.ID, Version: "2.0.0", Arch: "amd64", Signature: sig}, strings.NewReader(""), cloud.EINVALID, "binary"},
		{cloud.NewRelease{OrgID: org.ID, Version: "2.0.0", Arch: "amd64", Signature: "untrusted comment: x\nnot base64\n"}, bytes.NewReader(small), cloud.EINVALID, "signature"},
		{cloud.NewRelease{OrgID: org.ID, Version: "2.0.0", Arch: "amd64", Signature: sig + strings.Repeat("x", 5000)}, bytes.NewReader(small), cloud.EINVALID, "signature"},
		{cloud.NewRelease{OrgID: org.ID, Version: "2.0 beta", Arch: "amd64", Signature: sig}, bytes.NewReader(small), cloud.EINVALID, "version"},
		{cloud.NewRelease{OrgID: org.ID, Version: "-2.0", Arch: "amd64", Signature: sig}, bytes.NewReader(small), cloud.EINVALID, "version"},
		{cloud.NewRelease{OrgID: org.ID, Version: "2.0.0", Arch: "x86", Signature: sig}, bytes.NewReader(small), cloud.EINVALID, "arch"},
		{cloud.NewRelease{OrgID: "o-unknown", Version: "2.0.0", Arch: "amd64", Signature: sig}, bytes.NewReader(small), cloud.ENOTFOUND, "organization"},
	} {
		_, err := svc.AddRelease(e.ctx, tc.nr, tc.body)
		if cloud.ErrorCode(err) != tc.code || !strings.Contains(cloud.ErrorMessage(err), tc.field) {
			t.Errorf("AddRelease(%s %s, %d-byte signature): %v; want %s naming %s", tc.nr.Version, tc.nr.Arch, len(tc.nr.Signature), err, tc.code, tc.field)
		}
	}
	list, err := svc.ListReleases(e.ctx, org.ID)
	if err != nil || len(list) != 2 || list[0] != r || list[1] != armv7 {
		t.Errorf("ListReleases = %+v, %v; want the two added, oldest first", list, err)
	}
}

// zeros reads zero bytes without end.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

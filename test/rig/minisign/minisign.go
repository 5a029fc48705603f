// Package minisign drives Debian's minisign tool for tests: a key pair in
// a temp dir and signatures of files, as an operator makes them for `fleet-relay
// release add` (`make minisign` installs the tool when it is missing).
package minisign

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Key is a minisign key pair on disk (the secret key unencrypted, -W).
type Key struct {
	Pub, Sec string
}

// NewKey makes a key pair in a temp dir of tb.
func NewKey(tb testing.TB) Key {
	tb.Helper()
	if _, err := exec.LookPath("minisign"); err != nil {
		tb.Fatalf("minisign is not installed (make minisign): %v", err)
	}
	dir := tb.TempDir()
	k := Key{Pub: filepath.Join(dir, "update.pub"), Sec: filepath.Join(dir, "update.key")}
	if out, err := exec.Command("minisign", "-G", "-W", "-p", k.Pub, "-s", k.Sec).CombinedOutput(); err != nil {
		tb.Fatalf("minisign -G: %v\n%s", err, out)
	}
	return k
}

// Sign signs file with k and returns the signature's path (file.minisig)
// and text; comment is the trusted comment.
func (k Key) Sign(tb testing.TB, file, comment string) (string, string) {
	tb.Helper()
	sig := file + ".minisig"
	if out, err := exec.Command("minisign", "-S", "-s", k.Sec, "-m", file, "-x", sig, "-t", comment).CombinedOutput(); err != nil {
		tb.Fatalf("minisign -S: %v\n%s", err, out)
	}
	b, err := os.ReadFile(sig)
	if err != nil {
		tb.Fatal(err)
	}
	return sig, string(b)
}

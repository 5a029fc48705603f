package relay

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/minisign"
)

// TestReleases: `release add` stores a signed binary and `release list`
// shows it; an agent of the organization downloads it from the relay in
// two Range requests (the second If-Range the first's ETag; on PostgreSQL
// from another relay of the cluster) and the bytes hash to the SHA-256 the
// relay names; a device of another organization is answered 404 and a
// request without a token 401; a bad signature or a second add of the same
// version and arch fail naming why.
func TestReleases(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testReleases(t, name, db) })
	}
}

func testReleases(t *testing.T, dialect, db string) {
	relays := []*Main{startMain(t, db)}
	if dialect == "postgres" {
		relays = append(relays, startMain(t, db))
	}
	var org, other struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	mustJSON(t, &other, "org", "create", "--db", db, "--name", "Other")
	var dev, stranger struct{ ID, Token string }
	mustJSON(t, &dev, "device", "add", "--db", db, "--org", org.ID, "--name", "press", "--serial", "S1", "--model", "IG-500")
	mustJSON(t, &stranger, "device", "add", "--db", db, "--org", other.ID, "--name", "gate", "--serial", "S2", "--model", "IG-500")

	// The operator's release: a binary signed with Debian's minisign.
	data, _ := storetest.ReleaseBinary(t, 3*cloud.ReleaseChunkBytes+777)
	bin := filepath.Join(t.TempDir(), "fleet-agent")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	sigFile, sig := minisign.NewKey(t).Sign(t, bin, "fleet-agent 1.5.0 arm64")
	add := func(version, sig string) []string {
		return []string{"release", "add", "--db", db, "--org", org.ID, "--version", version, "--arch", "arm64", "--file", bin, "--sig", sig}
	}
	var rel releaseJSON
	mustJSON(t, &rel, add("1.5.0", sigFile)...)
	sum := sha256.Sum256(data)
	if rel.ID == "" || rel.OrgID != org.ID || rel.Version != "1.5.0" || rel.Arch != "arm64" || rel.Size != int64(len(data)) || rel.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("release add printed %+v", rel)
	}
	if _, errOut, code := cli(t, add("1.5.0", sigFile)...); code != 1 || !strings.Contains(errOut, "exists already") {
		t.Errorf("same version and arch again: exit %d, %q", code, errOut)
	}
	if _, errOut, code := cli(t, add("1.6.0", bin)...); code != 1 || !strings.Contains(errOut, "signature") {
		t.Errorf("the binary as its signature: exit %d, %q", code, errOut)
	}
	var list []releaseJSON
	mustJSON(t, &list, "release", "list", "--db", db, "--org", org.ID)
	if len(list) != 1 || list[0].ID != rel.ID || list[0].Signature != sig {
		t.Errorf("release list: %+v", list)
	}
	if out, _, _ := cli(t, "release", "list", "--db", db, "--org", org.ID); !strings.Contains(out, "1.5.0") || !strings.Contains(out, rel.SHA256) {
		t.Errorf("release list (text): %q", out)
	}

	url := func(m *Main) string { return "http://" + m.Addr() + protocol.ReleasePath(rel.ID) }
	half := len(data) / 2
	first := download(t, url(relays[0]), dev.Token, fmt.Sprintf("bytes=0-%d", half-1), "")
	if first.StatusCode != http.StatusPartialContent || first.Header.Get("X-Checksum-Sha256") != rel.SHA256 || len(first.body) != half {
		t.Fatalf("first half: %d, %d bytes, checksum %q", first.StatusCode, len(first.body), first.Header.Get("X-Checksum-Sha256"))
	}
	rest := download(t, url(relays[len(relays)-1]), dev.Token, fmt.Sprintf("bytes=%d-", half), first.Header.Get("ETag"))
	if rest.StatusCode != http.StatusPartialContent || rest.Header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", half, len(data)-1, len(data)) {
		t.Fatalf("second half: %d, Content-Range %q", rest.StatusCode, rest.Header.Get("Content-Range"))
	}
	got := sha256.Sum256(append(first.body, rest.body...))
	if hex.EncodeToString(got[:]) != rel.SHA256 {
		t.Errorf("the two parts hash to %x, not %s", got, rel.SHA256)
	}
	// If-Range with another binary's ETag gets the whole binary again.
	if whole := download(t, url(relays[0]), dev.Token, fmt.Sprintf("bytes=%d-", half), `"0000"`); whole.StatusCode != http.StatusOK || len(whole.body) != len(data) {
		t.Errorf("stale If-Range: %d, %d bytes", whole.StatusCode, len(whole.body))
	}

	for _, tc := range []struct {
		name, url, token string
		status           int
	}{
		{"another organization's device", url(relays[0]), stranger.Token, http.StatusNotFound},
		{"no token", url(relays[0]), "", http.StatusUnauthorized},
		{"unknown token", url(relays[0]), "fleet_dt_unknown", http.StatusUnauthorized},
		{"unknown release", "http://" + relays[0].Addr() + protocol.ReleasePath("nosuchrelease0000000000"), dev.Token, http.StatusNotFound},
	} {
		if r := download(t, tc.url, tc.token, "", ""); r.StatusCode != tc.status || len(r.body) > 512 {
			t.Errorf("%s: %d, %d bytes; want %d", tc.name, r.StatusCode, len(r.body), tc.status)
		}
	}
}

// response is a download's response with its body read.
type response struct {
	*http.Response
	body []byte
}

// download GETs url with token as bearer (none when ""), and Range and
// If-Range when not "".
func download(t *testing.T, url, token, rng, ifRange string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	if ifRange != "" {
		req.Header.Set("If-Range", ifRange)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp, b}
}

package agentlink_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/dialects"
)

// TestReleaseDownloadBounds: with one download allowed, a second agent is
// answered 503 with Retry-After while an agent that stopped reading holds
// the slot; the stalled download is cut once a write makes no progress for
// WriteIdle, and the next agent gets the whole binary.
func TestReleaseDownloadBounds(t *testing.T) {
	s := dialects.SQLite(t, nil)
	org := storetest.Org(t, s.Store, "Acme")
	tokens := make([]string, 3)
	for i := range tokens {
		_, tokens[i] = storetest.Device(t, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "SN-" + string(rune('a'+i)), Model: "IG-500"})
	}
	// Larger than what loopback's socket buffers hold, so that a client
	// that stops reading stalls the relay's writes.
	data, sig := storetest.ReleaseBinary(t, 48<<20)
	rel := storetest.Release(t, s.Store.Releases(), cloud.NewRelease{OrgID: org.ID, Version: "2.0.0", Arch: "amd64", Signature: sig}, data)
	srv := agentlink.New(agentlink.Config{Store: s.Agent})
	mux := http.NewServeMux()
	mux.Handle(protocol.ReleasePath("{id}"), srv.ReleaseHandler(agentlink.ReleaseConfig{Releases: s.Store.Releases(), MaxDownloads: 1, WriteIdle: 300 * time.Millisecond}))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	get := func(token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, hs.URL+protocol.ReleasePath(rel.ID), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	stalled := get(tokens[0])
	defer stalled.Body.Close()
	if stalled.StatusCode != http.StatusOK {
		t.Fatalf("first download: %d", stalled.StatusCode)
	}
	busy := get(tokens[1])
	busy.Body.Close()
	if busy.StatusCode != http.StatusServiceUnavailable || busy.Header.Get("Retry-After") == "" {
		t.Errorf("second download while the first holds the slot: %d, Retry-After %q", busy.StatusCode, busy.Header.Get("Retry-After"))
	}
	var n int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := get(tokens[2])
		if resp.StatusCode == http.StatusOK {
			n, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the stalled download still holds the slot after 30 s: %d", resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n != int64(len(data)) {
		t.Errorf("next download: %d of %d bytes", n, len(data))
	}
	if got, err := io.Copy(io.Discard, stalled.Body); err == nil || got >= int64(len(data)) {
		t.Errorf("the stalled download was not cut: %d bytes, %v", got, err)
	}
}

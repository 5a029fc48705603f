package relay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
)

// Release download benchmark sizes: as many agents as the relay serves at
// once, each downloading a release of a typical fleet-agent's size.
const (
	benchDownloadAgents = agentlink.DefaultMaxDownloads
	benchReleaseBytes   = 12 << 20
)

// BenchmarkReleaseDownload is one relay's release download throughput
// (make bench-releases): benchDownloadAgents agents, each with its own
// device token and connection, download a 12 MiB release at once from a
// relay on SQLite over loopback; one operation is every agent's whole
// download, and MB/s counts the bytes all of them received.
func BenchmarkReleaseDownload(b *testing.B) {
	m := NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--db", filepath.Join(b.TempDir(), "relay.db"), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--rate-limit", "1000000"}); err != nil {
		b.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	org := storetest.Org(b, m.DB, "Acme")
	tokens := make([]string, benchDownloadAgents)
	for i := range tokens {
		_, tokens[i] = storetest.Device(b, m.DB, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: fmt.Sprintf("SN-%d", i), Model: "IG-500"})
	}
	data, sig := storetest.ReleaseBinary(b, benchReleaseBytes)
	rel := storetest.Release(b, m.DB.Releases(), cloud.NewRelease{OrgID: org.ID, Version: "2.0.0", Arch: "arm64", Signature: sig}, data)
	url := "http://" + m.Addr() + protocol.ReleasePath(rel.ID)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchDownloadAgents, DisableCompression: true}}
	get := func(token string) error {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && (resp.StatusCode != http.StatusOK || n != int64(len(data))) {
			err = fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
		}
		return err
	}
	if err := get(tokens[0]); err != nil { // the release is in the page cache, as on a relay serving a rollout
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)) * benchDownloadAgents)
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		errs := make(chan error, len(tokens))
		for _, tok := range tokens {
			wg.Go(func() {
				if err := get(tok); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
}

// Package benchstore prepares the benchmarks' data and reads it back through
// the store's interfaces (cloud.Store: the admin contract and the public
// API's services), as the admin CLI and the API do, never through the
// store's tables: a benchmark measures the store a relay runs, whichever it
// is (cloud/sqlite, cloud/postgres).
package benchstore

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fleet/fleet/cloud"
)

// Tenant is a benchmark's organization: an API key holding every scope and
// its devices (ids and agent tokens in creation order).
type Tenant struct {
	Org, Key string
	Devices  []string
	Tokens   []string
}

// provisioners is how many devices Provision adds at once: a store that
// commits concurrently (PostgreSQL) takes them side by side, SQLite's
// single writer one after the other.
const provisioners = 8

// Provision creates an organization named name, an API key with every scope
// and n IG-500 devices (gateway-00000, serial SN-000000, ...) through the
// store contract (cloud.Admin), from a few goroutines.
func Provision(ctx context.Context, st cloud.Admin, name string, n int) (Tenant, error) {
	org, err := st.CreateOrg(ctx, name)
	if err != nil {
		return Tenant{}, err
	}
	_, key, err := st.CreateKey(ctx, org.ID, "bench", cloud.AllScopes, 0)
	if err != nil {
		return Tenant{}, err
	}
	t := Tenant{Org: org.ID, Key: key, Devices: make([]string, n), Tokens: make([]string, n)}
	var wg sync.WaitGroup
	errs := make(chan error, provisioners)
	for w := range provisioners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += provisioners {
				d, tok, err := st.AddDevice(ctx, cloud.NewDevice{OrgID: org.ID, Name: fmt.Sprintf("gateway-%05d", i),
					SerialNumber: fmt.Sprintf("SN-%06d", i), Model: "IG-500", Location: "Plant 3, hall B"})
				if err != nil {
					errs <- err
					return
				}
				t.Devices[i], t.Tokens[i] = d.ID, tok
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Tenant{}, err
	}
	return t, nil
}

// metricsPage is the largest page GET /devices/{id}/metrics answers.
const metricsPage = 1000

// CountMetrics returns how many samples each of the organization's devices
// has stored with a capture time in [from, to] (in the order of devices),
// read through the public API's service (cloud.DeviceService.Metrics) a
// page at a time, newest first: a page that is full ends the window of the
// next one a millisecond before its oldest sample (a device stores one
// sample per capture time).
func CountMetrics(ctx context.Context, devs cloud.DeviceService, org string, devices []string, from, to time.Time) ([]int64, error) {
	counts := make([]int64, len(devices))
	for i, id := range devices {
		for until := to; !until.Before(from); {
			m, err := devs.Metrics(ctx, org, id, cloud.MetricsQuery{From: from, To: until, Limit: metricsPage})
			if err != nil {
				return nil, fmt.Errorf("metrics of %s: %w", id, err)
			}
			counts[i] += int64(len(m.Data))
			if len(m.Data) < metricsPage {
				break
			}
			until = m.Data[0].CapturedAt.Time.Add(-time.Millisecond)
		}
	}
	return counts, nil
}

// WorkDir returns dir, or when it is empty a new temporary directory named
// after prefix; cleanup removes what WorkDir made (and nothing given).
func WorkDir(dir, prefix string) (path string, cleanup func(), err error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

package soak

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"
)

// receiver is an HTTPS webhook receiver that flaps: while down it answers
// 503 or drops the connection without an answer (alternately), so the
// relay retries; while up it answers 204 and notes the delivery id.
type receiver struct {
	srv    *httptest.Server
	down   atomic.Bool
	drops  atomic.Int64
	mu     sync.Mutex
	got    map[string]int // delivery id → 2xx answers given
	caFile string
}

func startReceiver(caFile string) (*receiver, error) {
	r := &receiver{got: map[string]int{}, caFile: caFile}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(r.serve))
	r.srv.Config.ErrorLog = nil
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
	if err := writeFile(caFile, cert); err != nil {
		r.srv.Close()
		return nil, err
	}
	return r, nil
}

func (r *receiver) url() string { return r.srv.URL + "/hook" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	id := req.Header.Get("X-Service-Delivery-Id")
	if r.down.Load() {
		if r.drops.Add(1)%2 == 0 {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close() // no answer at all
					return
				}
			}
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	r.mu.Lock()
	r.got[id]++
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// flap goes down for down every every, until stop closes.
func (r *receiver) flap(every, down time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			r.down.Store(false)
			return
		case <-t.C:
			r.down.Store(true)
			select {
			case <-stop:
			case <-time.After(down):
			}
			r.down.Store(false)
		}
	}
}

func (r *receiver) received() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.got))
	for k, v := range r.got {
		out[k] = v
	}
	return out
}

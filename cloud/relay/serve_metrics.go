package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud/relaymetrics"
)

// DefaultMetricsListen is where the Prometheus metrics are served unless
// --metrics-listen says otherwise: loopback only, apart from the API, so
// that a relay whose listener faces the internet does not publish them.
const DefaultMetricsListen = "127.0.0.1:9464"

// startMetrics serves the Prometheus metrics (Main.Metrics) at
// relaymetrics.Path, plain HTTP, without an API key or rate limit: by
// default on DefaultMetricsListen, an address of their own (the relay's
// listener answers 404 there); with --metrics-listen ADDR on ADDR; with
// --metrics-listen api on the relay's listener beside the public API (but
// outside it: not in the OpenAPI document); with none nowhere. When the
// default address is taken (another relay on the same host), the relay
// says so in its log and runs without serving them; an address given
// explicitly that cannot be listened on stops the relay.
func (m *Main) startMetrics(ctx context.Context, mux *http.ServeMux) (func(context.Context) error, error) {
	addr := m.Config.MetricsListen
	h := m.Metrics.Handler()
	switch addr {
	case "api":
		mux.Handle(relaymetrics.Path, h)
		return nil, nil
	case "none", "":
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil && addr == DefaultMetricsListen {
		m.Logger.Warn("metrics not served: the default metrics address is taken (another relay on this host?); set --metrics-listen",
			"addr", addr, "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	own := http.NewServeMux()
	own.Handle(relaymetrics.Path, h)
	srv := &http.Server{Handler: own, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	m.metricsAddr = ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("metrics server stopped", "err", err)
		}
	}()
	m.Logger.Info("metrics listening", "addr", m.metricsAddr, "path", relaymetrics.Path)
	return func(sctx context.Context) error {
		err := srv.Shutdown(sctx)
		<-done
		return err
	}, nil
}

// MetricsAddr returns the address of the metrics listener (after Run), or
// "" when the metrics are served on the relay's listener or nowhere.
func (m *Main) MetricsAddr() string { return m.metricsAddr }

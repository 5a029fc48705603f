package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud/relaymetrics"
)

// metricsExtension serves the Prometheus metrics (Main.Metrics) at
// relaymetrics.Path: on the relay's listener, beside the public API but
// outside it (no API key, no rate limit, not in the OpenAPI document), or
// with --metrics-listen on an address of their own, plain HTTP, and then
// the main listener answers 404 there.
func metricsExtension() extension {
	var addr string
	return extension{
		name: "metrics",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&addr, "metrics-listen", "", "serve /metrics (Prometheus, plain HTTP) on this address instead of the relay's listener (host:port; port 0 picks one)")
		},
		start: func(ctx context.Context, m *Main, mux *http.ServeMux) (func(context.Context) error, error) {
			h := m.Metrics.Handler()
			if addr == "" {
				mux.Handle(relaymetrics.Path, h)
				return nil, nil
			}
			ln, err := net.Listen("tcp", addr)
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
		},
	}
}

// MetricsAddr returns the address of the --metrics-listen listener (after
// Run), or "" when the metrics are served on the relay's listener.
func (m *Main) MetricsAddr() string { return m.metricsAddr }

package soak

import (
	"context"
	"fmt"
	"strings"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// proxy is the userspace TCP proxy between the agents and the relay.
type proxy struct {
	p *toxiproxy.Proxy
}

func startProxy(listen, upstream string) (*proxy, error) {
	// The toxics log through zerolog's global logger, at trace level for
	// every interrupted pipe: only warnings and errors are wanted here.
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "relay", listen, upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("toxiproxy: %w", err)
	}
	return &proxy{p: p}, nil
}

// fault is one kind of trouble between the agents and the relay, as
// toxiproxy toxics (JSON as its API takes them).
type fault struct {
	name   string
	toxics []string
}

// faults are applied in turn, one at a time.
var faults = []fault{
	{"latency 300±100 ms both ways", []string{
		`{"name":"lat-down","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":300,"jitter":100}}`,
		`{"name":"lat-up","type":"latency","stream":"upstream","toxicity":1,"attributes":{"latency":300,"jitter":100}}`}},
	{"bandwidth 32 KB/s each way", []string{
		`{"name":"bw-down","type":"bandwidth","stream":"downstream","toxicity":1,"attributes":{"rate":32}}`,
		`{"name":"bw-up","type":"bandwidth","stream":"upstream","toxicity":1,"attributes":{"rate":32}}`}},
	{"connections reset after 1.5 s", []string{
		`{"name":"reset","type":"reset_peer","stream":"downstream","toxicity":1,"attributes":{"timeout":1500}}`}},
	{"half-open: data stops, connections stay open", []string{
		`{"name":"halfopen","type":"timeout","stream":"upstream","toxicity":1,"attributes":{"timeout":0}}`}},
	{"slow close (3 s) and writes sliced to 16-byte pieces", []string{
		`{"name":"slowclose","type":"slow_close","stream":"downstream","toxicity":1,"attributes":{"delay":3000}}`,
		`{"name":"slicer","type":"slicer","stream":"downstream","toxicity":1,"attributes":{"average_size":16,"size_variation":8,"delay":200}}`}},
}

func (p *proxy) apply(f fault) error {
	for _, t := range f.toxics {
		if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(t)); err != nil {
			return fmt.Errorf("toxic %s: %w", f.name, err)
		}
	}
	return nil
}

// clear removes every toxic (connections a toxic held are released).
func (p *proxy) clear() { p.p.Toxics.ResetToxics(context.Background()) }

func (p *proxy) stop() { p.p.Stop() }

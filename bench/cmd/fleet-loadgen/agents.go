package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// runAgents is `fleet-loadgen agents`: simulated agents against relays run
// by someone else (a cluster behind a load balancer, or one relay), for the
// cluster benchmark (bench/cluster), which starts it as a process and
// drives it through stdin. Unlike the bench's agents, these behave as real
// ones when their relay dies: they reconnect with a jittered backoff and
// send again every sample not yet acknowledged (a spool), so that nothing
// is lost.
//
// Each agent connects with one token of --tokens (one a line), sends
// heartbeats (all agents together --rate per second, spread evenly) and,
// with every --sample-every-th heartbeat (each agent at a phase of its own,
// as agents started at different times sample), one metric sample right behind
// it: the time from that heartbeat's send to the sample's ack is the
// heartbeat-to-stored probe (an upper bound: the relay stores an agent's
// messages in order). With --points N, each agent also sends a batch of N
// point samples every --points-interval (spooled like the metric samples),
// and the reports count the samples acknowledged and time each batch's ack;
// --cross-every K makes each agent's first point cross a threshold up and
// down every K rounds (the alert benchmark, bench/cmd/fleet-alertbench).
// It prints JSON lines on stdout: {"event":"connected"}
// once every agent is connected, then one line per command read from stdin:
//
//	mark     start a measured window ({"event":"mark"})
//	report   what happened since the mark (heartbeats sent, probe quantiles)
//	status   agents connected now, reconnections so far, the last one's time,
//	         heartbeats sent since the start
//	stop     stop the heartbeats, wait until every sample is acknowledged,
//	         close, and print {"event":"final"} with each agent's sample count
//
// Closing stdin is stop.
func runAgents(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agents", flag.ContinueOnError)
	url := fs.String("url", "", "agent endpoint: ws://host:port"+protocol.Path)
	tokensFile := fs.String("tokens", "", "file of device tokens, one a line: one agent each")
	rate := fs.Float64("rate", 10100, "heartbeats per second offered by all agents together")
	sampleEvery := fs.Int("sample-every", 10, "every agent sends a metric sample with every Nth heartbeat")
	dialConc := fs.Int("dial-concurrency", 256, "agents connecting at once")
	backoffMin := fs.Duration("backoff-min", 200*time.Millisecond, "first reconnect wait (jittered)")
	backoffMax := fs.Duration("backoff-max", 2*time.Second, "longest reconnect wait")
	codec := fs.String("codec", string(protocol.CBOR), "cbor or json")
	points := fs.Int("points", 0, "point samples each agent sends a round (0: none)")
	pointsInterval := fs.Duration("points-interval", time.Second, "each agent's sampling round with --points")
	crossEvery := fs.Int("cross-every", 0, fmt.Sprintf("with --points, the first point of each agent is %d for this many rounds, then at its own level (8 to 12) for as many, each agent at a phase of its own: a threshold crossed up and down by every agent every 2 × this many rounds (0: never)", crossHigh))
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(*tokensFile)
	if err != nil {
		return err
	}
	tokens := strings.Fields(string(b))
	switch {
	case *url == "" || len(tokens) == 0:
		return errors.New("--url and a --tokens file with at least one token are required")
	case *rate <= 0 || *sampleEvery < 1:
		return errors.New("--rate must be positive and --sample-every at least 1")
	case protocol.Codec(*codec) != protocol.CBOR && protocol.Codec(*codec) != protocol.JSON:
		return fmt.Errorf("--codec %q: want cbor or json", *codec)
	case *points < 0 || *points > maxLoadPoints || *pointsInterval <= 0:
		return fmt.Errorf("--points must be 0..%d and --points-interval positive", maxLoadPoints)
	case *crossEvery < 0 || (*crossEvery > 0 && *points == 0):
		return errors.New("--cross-every must be 0 or positive, and needs --points")
	}
	limit, err := raiseNoFile()
	if err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE: %w", err)
	}
	if uint64(len(tokens))+fdReserve > limit {
		return fmt.Errorf("%d agents need more descriptors than RLIMIT_NOFILE (%d) allows", len(tokens), limit)
	}
	s := &swarm{url: *url, codec: protocol.Codec(*codec), clients: makeClients(4), sampleEvery: *sampleEvery,
		backoffMin: *backoffMin, backoffMax: *backoffMax, out: json.NewEncoder(os.Stdout)}
	for i, t := range tokens {
		s.agents = append(s.agents, &ragent{idx: i, token: t, points: pointAgent{cross: *crossEvery}})
	}
	t0 := time.Now()
	if err := s.connectAll(ctx, *dialConc); err != nil {
		return err
	}
	s.say(map[string]any{"event": "connected", "agents": len(s.agents), "seconds": time.Since(t0).Seconds()})

	beatCtx, stopBeats := context.WithCancel(ctx)
	var wg sync.WaitGroup
	interval := time.Duration(float64(len(s.agents)) / *rate * float64(time.Second))
	spreadBeats(beatCtx, &wg, len(s.agents), interval, s.beat)
	if *points > 0 {
		s.pointIDs = pointIDs(*points)
		spreadBeats(beatCtx, &wg, len(s.agents), *pointsInterval, s.sendPoints)
	}
	s.mark()
	cmds := bufio.NewScanner(os.Stdin)
	for cmds.Scan() {
		switch cmd := strings.TrimSpace(cmds.Text()); cmd {
		case "mark":
			s.mark()
			s.say(map[string]any{"event": "mark"})
		case "report":
			s.say(s.report())
		case "status":
			s.say(s.status())
		case "stop":
			stopBeats()
			wg.Wait()
			return s.finish(ctx)
		default:
			s.say(map[string]any{"event": "error", "error": "unknown command " + cmd})
		}
	}
	stopBeats()
	wg.Wait()
	return s.finish(ctx)
}

// swarm is the agents of `fleet-loadgen agents`.
type swarm struct {
	url                    string
	codec                  protocol.Codec
	clients                []*http.Client
	agents                 []*ragent
	sampleEvery            int
	backoffMin, backoffMax time.Duration
	pointIDs               []string // with --points
	points                 pointCounters

	omu sync.Mutex
	out *json.Encoder

	closing    atomic.Bool  // final close: no more reconnecting
	up         atomic.Int64 // agents connected now
	reconnects atomic.Int64
	lastUp     atomic.Int64 // unix nanos of the last reconnection
	sent       atomic.Int64 // heartbeats written
	skipped    atomic.Int64 // heartbeats due while the agent was reconnecting
	lag        [64]atomic.Int64

	wmu             sync.Mutex // the measured window
	markAt          time.Time
	sent0, skipped0 int64
	lag0            [64]int64
	probes          []time.Duration
	points0         pointSnapshot
}

// ragent is one agent of the swarm.
type ragent struct {
	idx   int
	token string

	mu       sync.Mutex
	ws       *websocket.Conn // nil while reconnecting
	seq      uint64
	beats    int
	unacked  []protocol.Record // samples sent and not yet acknowledged, in seq order
	samples  int               // samples made
	lastAt   time.Time         // the last sample's capture time
	probeSeq uint64            // the outstanding probe's sample, 0: none
	probeAt  time.Time         // when its heartbeat was sent
	points   pointAgent
}

func (s *swarm) say(v any) {
	s.omu.Lock()
	defer s.omu.Unlock()
	s.out.Encode(v)
}

func (s *swarm) connectAll(ctx context.Context, conc int) error {
	return connectEach(len(s.agents), conc, func(i int) error { return s.connect(ctx, s.agents[i]) })
}

// connect opens a's connection and sends again what the relay has not
// stored (the welcome's LastSeq says what it has).
func (s *swarm) connect(ctx context.Context, a *ragent) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ws, welcome, err := handshake(dctx, s.clients[a.idx%len(s.clients)], s.url, a.token, s.codec, a.idx, helloHeartbeat)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dropAcked(welcome.LastSeq)
	a.seq = max(a.seq, welcome.LastSeq)
	for rest := a.unacked; len(rest) > 0; {
		batch := rest[:min(len(rest), protocol.MaxBatch)]
		rest = rest[len(batch):]
		if err := writeMsg(dctx, ws, s.codec, protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: batch}}); err != nil {
			ws.CloseNow()
			return err
		}
	}
	a.ws = ws
	s.up.Add(1)
	go s.read(a, ws)
	return nil
}

// dropAcked forgets the samples up to seq (stored by the relay).
func (a *ragent) dropAcked(seq uint64) {
	i := 0
	for i < len(a.unacked) && a.unacked[i].Seq <= seq {
		i++
	}
	a.unacked = a.unacked[i:]
}

// read handles what the relay sends on ws until it closes, then
// reconnects (unless the swarm is closing).
func (s *swarm) read(a *ragent, ws *websocket.Conn) {
	for {
		m, err := readMsg(context.Background(), ws)
		if err != nil {
			break
		}
		if m.Type != protocol.TypeAck {
			continue
		}
		a.mu.Lock()
		a.dropAcked(m.Ack.Seq)
		a.points.acked(m.Ack.Seq, &s.points)
		var probe time.Duration
		if a.probeSeq != 0 && m.Ack.Seq >= a.probeSeq {
			probe, a.probeSeq = time.Since(a.probeAt), 0
		}
		a.mu.Unlock()
		if probe > 0 {
			s.wmu.Lock()
			s.probes = append(s.probes, probe)
			s.wmu.Unlock()
		}
	}
	ws.CloseNow()
	a.mu.Lock()
	if a.ws == ws {
		a.ws = nil
		a.probeSeq = 0 // its ack would time the outage, not the store
		s.up.Add(-1)
	}
	a.mu.Unlock()
	if !s.closing.Load() {
		go s.reconnect(a)
	}
}

// reconnect retries with a jittered exponential backoff, as fleet-agent
// does, until a is connected again.
func (s *swarm) reconnect(a *ragent) {
	wait := s.backoffMin
	for !s.closing.Load() {
		time.Sleep(s.backoffMin + rand.N(wait-s.backoffMin+1))
		if err := s.connect(context.Background(), a); err == nil {
			s.reconnects.Add(1)
			s.lastUp.Store(time.Now().UnixNano())
			return
		}
		wait = min(2*wait, s.backoffMax)
	}
}

// beat sends agent i's heartbeat, and every sampleEvery-th time (at the
// agent's own phase) a metric sample right behind it.
func (s *swarm) beat(i int, due time.Time) {
	a := s.agents[i]
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ws == nil {
		s.skipped.Add(1)
		return
	}
	a.beats++
	ctx := context.Background() // no deadline: see bench.beat
	sent := time.Now()
	if err := a.ws.Write(ctx, frameType(s.codec), heartbeatMsg(s.codec, a.beats)); err != nil {
		return // the reader sees the connection end
	}
	s.sent.Add(1)
	s.lag[agentlink.LatencyBucketOf(max(0, sent.Sub(due)))].Add(1)
	// Each agent samples at its own phase (agent i with its (i mod N)-th
	// heartbeat), as a fleet of agents started at different times does:
	// in step, all of them would send a sample in the same heartbeat round.
	if (a.beats+i)%s.sampleEvery != 0 {
		return
	}
	at := time.Now().Truncate(time.Millisecond)
	if !at.After(a.lastAt) {
		at = a.lastAt.Add(time.Millisecond)
	}
	a.lastAt = at
	a.seq++
	a.samples++
	rec := protocol.Record{Seq: a.seq, Metric: &resource.MetricSample{CapturedAt: resource.T(at), CPUPct: float64(a.beats % 100), MemPct: 40, DiskUsedPct: 60, TempCPU: 50, LoadAvg1: 0.3}}
	a.unacked = append(a.unacked, rec)
	if a.probeSeq == 0 {
		a.probeSeq, a.probeAt = a.seq, sent
	}
	writeMsg(ctx, a.ws, s.codec, protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{rec}}})
}

// sendPoints sends agent i's next sampling round of point samples, kept
// until acknowledged as its metric samples are.
func (s *swarm) sendPoints(i int, due time.Time) {
	a := s.agents[i]
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ws == nil {
		return
	}
	a.seq++
	rec := a.points.next(s.pointIDs, i, a.seq, due, time.Now(), &s.points)
	a.unacked = append(a.unacked, rec)
	writeMsg(context.Background(), a.ws, s.codec, protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{rec}}})
}

// mark starts a measured window.
func (s *swarm) mark() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.markAt = time.Now()
	s.sent0, s.skipped0 = s.sent.Load(), s.skipped.Load()
	for i := range s.lag {
		s.lag0[i] = s.lag[i].Load()
	}
	s.probes = s.probes[:0]
	s.points0 = s.points.snapshot()
}

// windowReport is what `report` prints.
type windowReport struct {
	Event          string  `json:"event"`
	Seconds        float64 `json:"seconds"`
	HeartbeatsSent int64   `json:"heartbeatsSent"`
	Skipped        int64   `json:"skipped"` // due while reconnecting
	Probes         int     `json:"probes"`
	ProbeP50Ms     float64 `json:"probeP50Ms"`
	ProbeP99Ms     float64 `json:"probeP99Ms"`
	LagP99Ms       float64 `json:"lagP99Ms"` // sender behind its schedule
	// Point samples (--points): sent and acknowledged in the window, and
	// the send-to-ack latency of their batches.
	PointsSent    int64   `json:"pointsSent"`
	PointsAcked   int64   `json:"pointsAcked"`
	PointP50Ms    float64 `json:"pointP50Ms"`
	PointP99Ms    float64 `json:"pointP99Ms"`
	PointLagP99Ms float64 `json:"pointLagP99Ms"`
}

func (s *swarm) report() windowReport {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	r := windowReport{Event: "report", Seconds: time.Since(s.markAt).Seconds(), HeartbeatsSent: s.sent.Load() - s.sent0, Skipped: s.skipped.Load() - s.skipped0}
	ps := slices.Clone(s.probes)
	slices.Sort(ps)
	if r.Probes = len(ps); r.Probes > 0 {
		r.ProbeP50Ms, r.ProbeP99Ms = ms(ps[len(ps)/2]), ms(ps[min(len(ps)-1, len(ps)*99/100)])
	}
	lag := make([]int64, len(s.lag))
	for i := range lag {
		lag[i] = s.lag[i].Load() - s.lag0[i]
	}
	r.LagP99Ms = ms(agentlink.Quantile(lag, 0.99))
	p := s.points.snapshot().since(s.points0)
	r.PointsSent, r.PointsAcked = p.sent, p.acked
	r.PointP50Ms, r.PointP99Ms = ms(agentlink.Quantile(p.lat, 0.50)), ms(agentlink.Quantile(p.lat, 0.99))
	r.PointLagP99Ms = ms(agentlink.Quantile(p.lag, 0.99))
	return r
}

// swarmStatus is what `status` prints.
type swarmStatus struct {
	Event          string `json:"event"`
	Agents         int    `json:"agents"`
	Up             int64  `json:"up"`
	Reconnects     int64  `json:"reconnects"`
	LastUpUnixNs   int64  `json:"lastUpUnixNs"`
	HeartbeatsSent int64  `json:"heartbeatsSent"` // since the start
	PointsSent     int64  `json:"pointsSent"`     // since the start
	PointsAcked    int64  `json:"pointsAcked"`
}

func (s *swarm) status() swarmStatus {
	return swarmStatus{Event: "status", Agents: len(s.agents), Up: s.up.Load(), Reconnects: s.reconnects.Load(), LastUpUnixNs: s.lastUp.Load(),
		HeartbeatsSent: s.sent.Load(), PointsSent: s.points.sent.Load(), PointsAcked: s.points.acked.Load()}
}

// finish waits (up to two minutes) until every agent is connected with no
// sample unacknowledged, closes every connection and prints the final line:
// each agent's sample count, in token order, and what stayed unacknowledged.
func (s *swarm) finish(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	pending := func() (n int) {
		for _, a := range s.agents {
			a.mu.Lock()
			n += len(a.unacked)
			if a.ws == nil {
				n++
			}
			a.mu.Unlock()
		}
		return n
	}
	for pending() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	s.closing.Store(true)
	samples := make([]int, len(s.agents))
	unacked := 0
	for i, a := range s.agents {
		a.mu.Lock()
		samples[i], unacked = a.samples, unacked+len(a.unacked)
		if a.ws != nil {
			a.ws.CloseNow()
		}
		a.mu.Unlock()
	}
	s.say(map[string]any{"event": "final", "samples": samples, "unacked": unacked})
	if unacked > 0 {
		return fmt.Errorf("%d samples still unacknowledged after two minutes", unacked)
	}
	return nil
}

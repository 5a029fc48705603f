package panel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// Bounds and pace of the live updates (docs/panel.md, "Live updates").
const (
	// DefaultLiveMaxPerOrg bounds the open live streams of one
	// organization on one relay (Config.LiveMaxPerOrg).
	DefaultLiveMaxPerOrg = 2000
	// LiveMaxPerSession bounds the open live streams of one session (its
	// tabs): one more is refused with 429.
	LiveMaxPerSession = 8
	// liveQueue is how many events a stream may have waiting; a stream
	// whose browser reads slower is dropped (it reconnects).
	liveQueue = 64
	// liveEvery is how often an organization's reader reads the store.
	liveEvery = time.Second
)

// errLiveFull and errLiveSession refuse a stream over a bound;
// errLiveClosed one on a relay that drains.
var (
	errLiveFull    = errors.New("too many live streams for this organization on this relay")
	errLiveSession = fmt.Errorf("more than %d live streams for this session", LiveMaxPerSession)
	errLiveClosed  = errors.New("the relay is shutting down")
)

// liveHub runs the live updates of one relay: for each organization with
// at least one open stream, one reader reads cloud.LiveState from the store
// every liveEvery, compares it with its previous read, encodes each event
// once and queues it to the organization's streams. Nothing runs for
// organizations without a stream.
type liveHub struct {
	reader    cloud.LiveReader
	glance    cloud.FleetGlance // nil: device rows carry status and last seen only
	log       *slog.Logger
	every     time.Duration
	maxPerOrg int

	ctx    context.Context // ends when the hub closes
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool
	orgs     map[string]*liveOrg
	sessions map[string]int // open streams per session token
	wg       sync.WaitGroup
}

// liveOrg is one organization's streams and reader.
type liveOrg struct {
	id      string
	streams map[*liveStream]struct{}
	stop    context.CancelFunc
}

// liveStream is one open EventSource. The hub queues encoded events on
// send and closes gone when it drops the stream (slow, drained); the
// stream's handler writes them.
type liveStream struct {
	org, device, session string
	send                 chan []byte
	gone                 chan struct{}
	why                  string // set before gone closes
}

func newLiveHub(reader cloud.LiveReader, glance cloud.FleetGlance, maxPerOrg int, log *slog.Logger) *liveHub {
	if maxPerOrg <= 0 {
		maxPerOrg = DefaultLiveMaxPerOrg
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &liveHub{reader: reader, glance: glance, log: log, every: liveEvery, maxPerOrg: maxPerOrg,
		ctx: ctx, cancel: cancel, orgs: map[string]*liveOrg{}, sessions: map[string]int{}}
}

// join opens a stream of org for session, watching device ("" none).
func (h *liveHub) join(org, device, session string) (*liveStream, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errLiveClosed
	}
	if h.sessions[session] >= LiveMaxPerSession {
		return nil, errLiveSession
	}
	o := h.orgs[org]
	if o != nil && len(o.streams) >= h.maxPerOrg {
		return nil, errLiveFull
	}
	st := &liveStream{org: org, device: device, session: session, send: make(chan []byte, liveQueue), gone: make(chan struct{})}
	if o == nil {
		ctx, stop := context.WithCancel(h.ctx)
		o = &liveOrg{id: org, streams: map[*liveStream]struct{}{}, stop: stop}
		h.orgs[org] = o
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.read(ctx, org)
		}()
	}
	o.streams[st] = struct{}{}
	h.sessions[session]++
	return st, nil
}

// leave removes st (its handler returned); the last stream of an
// organization stops its reader.
func (h *liveHub) leave(st *liveStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked(st, "")
}

// dropLocked removes st from the hub and closes gone with why.
func (h *liveHub) dropLocked(st *liveStream, why string) {
	o := h.orgs[st.org]
	if o == nil {
		return
	}
	if _, ok := o.streams[st]; !ok {
		return
	}
	delete(o.streams, st)
	st.why = why
	close(st.gone)
	if h.sessions[st.session]--; h.sessions[st.session] <= 0 {
		delete(h.sessions, st.session)
	}
	if len(o.streams) == 0 {
		o.stop()
		delete(h.orgs, st.org)
	}
}

// close ends every stream and refuses new ones; it returns once the
// readers stopped.
func (h *liveHub) close() {
	h.mu.Lock()
	h.closed = true
	for _, o := range h.orgs {
		for st := range o.streams {
			h.dropLocked(st, "the relay is shutting down")
		}
	}
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}

// open counts the open streams.
func (h *liveHub) open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, o := range h.orgs {
		n += len(o.streams)
	}
	return n
}

// watched lists the devices org's streams watch.
func (h *liveHub) watched(org string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.orgs[org]
	if o == nil {
		return nil
	}
	set := map[string]struct{}{}
	for st := range o.streams {
		if st.device != "" && len(set) < cloud.MaxLiveWatched {
			set[st.device] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// liveEvent is one encoded event and whom it is for.
type liveEvent struct {
	frame []byte
	// fleet: streams without a device; device: streams watching it;
	// all: every stream.
	fleet, all bool
	device     string
}

// read is org's reader: every h.every until ctx ends it reads the state,
// compares it with the previous read and publishes what changed.
func (h *liveHub) read(ctx context.Context, org string) {
	var prev *cloud.LiveState
	var seq uint64
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		st, err := h.reader.LiveState(ctx, org, h.watched(org))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			h.log.Warn("live updates: store read failed", "org", org, "err", err)
		default:
			if prev != nil {
				evs, err := h.diff(ctx, org, *prev, st, &seq)
				if err != nil && ctx.Err() == nil {
					h.log.Warn("live updates: glance read failed", "org", org, "err", err)
				}
				h.publish(org, evs)
			}
			prev = &st
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// diff turns what changed from prev to cur into events, each encoded once.
func (h *liveHub) diff(ctx context.Context, org string, prev, cur cloud.LiveState, seq *uint64) ([]liveEvent, error) {
	changed := map[string]bool{}
	for id, d := range cur.Devices {
		if p, ok := prev.Devices[id]; !ok || p.Status != d.Status || !p.LastSeen.Equal(d.LastSeen) {
			changed[id] = true
		}
	}
	alerts := false
	for id, a := range cur.OpenAlerts {
		if p, ok := prev.OpenAlerts[id]; !ok || p != a {
			alerts, changed[a.DeviceID] = true, true
		}
	}
	for id, a := range prev.OpenAlerts {
		if _, ok := cur.OpenAlerts[id]; !ok {
			alerts, changed[a.DeviceID] = true, true
		}
	}
	var evs []liveEvent
	next := func(typ string, v any) ([]byte, error) {
		*seq++
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", typ, err)
		}
		return []byte("id: " + strconv.FormatUint(*seq, 10) + "\nevent: " + typ + "\ndata: " + string(b) + "\n\n"), nil
	}
	for id := range changed {
		if _, ok := cur.Devices[id]; !ok {
			delete(changed, id) // removed (or another organization's alert: never)
		}
	}
	// Watched devices whose channels changed get a device event too.
	for id, w := range cur.Watched {
		if p, ok := prev.Watched[id]; ok && p.Channels != w.Channels {
			changed[id] = true
		}
	}
	var glances map[string]cloud.DeviceGlance
	var gerr error
	if len(changed) > 0 {
		glances, gerr = h.glances(ctx, org, slices.Sorted(maps.Keys(changed)), cur)
	}
	if len(glances) > 0 {
		rows := slices.SortedFunc(maps.Values(glances), func(a, b cloud.DeviceGlance) int { return strings.Compare(a.ID, b.ID) })
		b, err := next("fleet", struct {
			Devices []cloud.DeviceGlance `json:"devices"`
			Summary cloud.FleetSummary   `json:"summary"`
		}{rows, summarize(cur)})
		if err != nil {
			return nil, err
		}
		evs = append(evs, liveEvent{frame: b, fleet: true})
		for id := range cur.Watched {
			if g, ok := glances[id]; ok {
				b, err := next("device", g)
				if err != nil {
					return nil, err
				}
				evs = append(evs, liveEvent{frame: b, device: id})
			}
		}
	}
	for id, w := range cur.Watched {
		if p, ok := prev.Watched[id]; ok && p.NewestEvent != w.NewestEvent {
			b, err := next("events", map[string]string{"device": id})
			if err != nil {
				return nil, err
			}
			evs = append(evs, liveEvent{frame: b, device: id})
		}
	}
	if alerts {
		b, err := next("alerts", struct{}{})
		if err != nil {
			return nil, err
		}
		evs = append(evs, liveEvent{frame: b, all: true})
	}
	return evs, gerr
}

// glances reads the changed devices at a glance; without a FleetGlance
// they carry what the state knows: status and last seen.
func (h *liveHub) glances(ctx context.Context, org string, ids []string, cur cloud.LiveState) (map[string]cloud.DeviceGlance, error) {
	if h.glance != nil {
		return h.glance.Glance(ctx, org, ids)
	}
	out := make(map[string]cloud.DeviceGlance, len(ids))
	for _, id := range ids {
		d := cur.Devices[id]
		g := cloud.DeviceGlance{ID: id, Status: d.Status}
		if !d.LastSeen.IsZero() {
			g.LastSeen = &d.LastSeen
		}
		for _, a := range cur.OpenAlerts {
			if a.DeviceID == id {
				g.OpenAlerts++
				if severityRank(a.Severity) > severityRank(g.Worst) {
					g.Worst = a.Severity
				}
			}
		}
		out[id] = g
	}
	return out, nil
}

func severityRank(s resource.Severity) int { return slices.Index(resource.Severities, s) }

// summarize counts cur's devices by status and open alerts by severity,
// every status and severity present.
func summarize(cur cloud.LiveState) cloud.FleetSummary {
	sum := cloud.FleetSummary{Devices: map[resource.DeviceStatus]int{}, OpenAlerts: map[resource.Severity]int{}}
	for _, s := range resource.DeviceStatuses {
		sum.Devices[s] = 0
	}
	for _, s := range resource.Severities {
		sum.OpenAlerts[s] = 0
	}
	for _, d := range cur.Devices {
		sum.Devices[d.Status]++
	}
	for _, a := range cur.OpenAlerts {
		sum.OpenAlerts[a.Severity]++
	}
	return sum
}

// publish queues evs to org's streams; a stream whose queue is full is
// dropped, never waited for.
func (h *liveHub) publish(org string, evs []liveEvent) {
	if len(evs) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	o := h.orgs[org]
	if o == nil {
		return
	}
streams:
	for st := range o.streams {
		for _, ev := range evs {
			if !(ev.all || ev.fleet && st.device == "" || ev.device != "" && ev.device == st.device) {
				continue
			}
			select {
			case st.send <- ev.frame:
			default:
				h.dropLocked(st, "the browser read too slowly")
				continue streams
			}
		}
	}
}

package cloud

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/fleet/fleet/shared/protocol"
)

// The channels a device reported are stored in its device row
// (devices.channel_reports, migration 0027), as one JSON array with an
// object per channel, sorted by id:
//
//	[{"id":"gpio-1","available":true,"live":"1"},{"id":"rs485-1","available":true,"live":"120 34","points":[...]}]
//
// with false and empty members left out, points in their own stored form
// (EncodePointStates). A heartbeat that changes a channel already rewrites
// the device row (last seen), so the channel state rides along; as one row
// per channel it was a statement and a page of its own, 40 % of the store
// writer's time per heartbeat (issue 31, docs/benchmarks.md). The array is
// written by appending, off the store's writer (the agent endpoint encodes
// it on the connection's worker), and read with encoding/json.

// AppendChannelReports appends the stored form of chans, in id order, to b.
func AppendChannelReports(b []byte, chans []protocol.ChannelState) []byte {
	sorted := slices.IsSortedFunc(chans, byChannelID)
	if !sorted {
		chans = slices.Clone(chans)
		slices.SortFunc(chans, byChannelID)
	}
	b = append(b, '[')
	for i := range chans {
		c := &chans[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendJSONString(b, c.ID)
		if c.Available {
			b = append(b, `,"available":true`...)
		}
		if c.Live != "" {
			b = append(b, `,"live":`...)
			b = appendJSONString(b, c.Live)
		}
		if c.TxOn {
			b = append(b, `,"txOn":true`...)
		}
		if c.Error != "" {
			b = append(b, `,"error":`...)
			b = appendJSONString(b, c.Error)
		}
		if c.PassthroughAddress != "" {
			b = append(b, `,"passthroughAddress":`...)
			b = appendJSONString(b, c.PassthroughAddress)
		}
		if len(c.Points) > 0 {
			b = append(b, `,"points":`...)
			b = AppendPointStates(b, c.Points)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// EncodeChannelReports returns the stored form of chans (AppendChannelReports).
func EncodeChannelReports(chans []protocol.ChannelState) string {
	return string(AppendChannelReports(make([]byte, 0, 64*len(chans)+2), chans))
}

func byChannelID(a, b protocol.ChannelState) int { return strings.Compare(a.ID, b.ID) }

// ChannelReport is one channel of the stored form, as read: Points is the
// stored form of its point states ("" for none).
type ChannelReport struct {
	ID          string `json:"id"`
	Available   bool   `json:"available"`
	Live        string `json:"live"`
	TxOn        bool   `json:"txOn"`
	Error       string `json:"error"`
	Passthrough string `json:"passthroughAddress"`
	Points      string `json:"-"`
}

// DecodeChannelReports reads the stored form ("" is none), in id order.
func DecodeChannelReports(stored string) ([]ChannelReport, error) {
	if stored == "" {
		return nil, nil
	}
	var raw []struct {
		ChannelReport
		Points json.RawMessage `json:"points"`
	}
	if err := json.Unmarshal([]byte(stored), &raw); err != nil {
		return nil, fmt.Errorf("stored channel reports: %w", err)
	}
	out := make([]ChannelReport, len(raw))
	for i := range raw {
		out[i] = raw[i].ChannelReport
		if p := string(raw[i].Points); p != "" && p != "null" && p != "[]" {
			out[i].Points = p
		}
	}
	slices.SortFunc(out, func(a, b ChannelReport) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// FindChannelReport returns the report of channel id, nil when the device never
// reported it.
func FindChannelReport(reports []ChannelReport, id string) *ChannelReport {
	for i := range reports {
		if reports[i].ID == id {
			return &reports[i]
		}
	}
	return nil
}

// State returns r as the agent reported it; points that do not decode are
// as never reported (the next report of them is a change).
func (r ChannelReport) State() protocol.ChannelState {
	c := protocol.ChannelState{ID: r.ID, Available: r.Available, Live: r.Live, TxOn: r.TxOn, Error: r.Error, PassthroughAddress: r.Passthrough}
	c.Points, _ = DecodePointStates(r.Points)
	return c
}

// Stored fills row's reported part from r (nil r: never reported).
func (r *ChannelReport) Stored(row *StoredChannel) {
	if r == nil {
		return
	}
	avail := r.Available
	row.Available = &avail
	row.Live, row.TxOn, row.Error, row.Points = r.Live, r.TxOn, r.Error, r.Points
	if r.Passthrough != "" {
		p := r.Passthrough
		row.Passthrough = &p
	}
}

package sqlstore

import (
	"context"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// DesiredConfig is the configuration the agent of dev is sent
// (agentlink.Store's DesiredConfig): its serial state's usage and desired
// version, and every channel of its model with its stored configuration or
// the catalog's default (agentlink.BuildConfig reports one that does not
// decode to bad). ok is false for a model without serial I/O.
func DesiredConfig(ctx context.Context, t SerialTables, dev agentlink.Device, bad func(channel string, err error)) (cfg protocol.Config, ok bool, err error) {
	model, known := catalog.Lookup(dev.Model)
	if !known || !model.Has(resource.CapabilitySerialIO) {
		return protocol.Config{}, false, nil
	}
	st, chans, err := t.SerialRows(ctx, dev.ID)
	if err != nil {
		return protocol.Config{}, false, err
	}
	stored := map[string]string{}
	for id, c := range chans {
		if c.Config != nil {
			stored[id] = *c.Config
		}
	}
	cfg = protocol.Config{Enabled: st.Enabled, Mode: st.Mode, Version: st.DesiredVersion}
	return agentlink.BuildConfig(model, cfg, stored, bad), true, nil
}

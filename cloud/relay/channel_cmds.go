package relay

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/dbcimport"
	"github.com/fleet/fleet/shared/serialcfg"
)

// runChannelImportDBC turns the signals of a DBC file into points of a
// device's canfd channel (DESIGN.md "Points"): the channel's desired
// configuration gains them (same-named points replaced) and is stored
// through the serial service (ImportPoints), as PUT /serial/channels/{id} stores it, so
// the agent receives it: on PostgreSQL every relay hears of it, on SQLite
// the serving relay sees the data version move (serve_agentlink.go).
// Nothing changes on any error.
func runChannelImportDBC(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("channel import-dbc")
	device := f.String("device", "device id", true)
	channel := f.String("channel", "canfd channel id, e.g. canfd-1", true)
	file := f.String("file", "DBC file to import", true)
	messages := f.String("messages", "comma-separated message names to import (default: every message of the file)", false)
	org := f.String("org", "the device's organization (default: found from the device)", false)
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		src, err := os.ReadFile(*file)
		if err != nil {
			return output{}, fmt.Errorf("--file: %w", err)
		}
		var names []string
		if strings.TrimSpace(*messages) != "" {
			names = strings.Split(*messages, ",")
		}
		res, err := dbcimport.Import(filepath.Base(*file), src, names)
		if err != nil {
			return output{}, err
		}
		orgID := *org
		if orgID == "" {
			if orgID, err = deviceOrg(ctx, st, *device); err != nil {
				return output{}, err
			}
		}
		ch, err := st.Serial().Channel(ctx, orgID, *device, *channel)
		if err != nil {
			return output{}, err
		}
		if ch.Config.CANFD == nil {
			return output{}, cloud.Errorf(cloud.EKIND, "channel %s is a %s channel; DBC signals go on a canfd channel", *channel, ch.Group)
		}
		merged, err := dbcimport.Merge(*ch.Config.CANFD, res.Points)
		if err != nil {
			return output{}, cloud.Errorf(cloud.EINVALID, "channel %s: %v", *channel, err)
		}
		if _, err := st.Serial().ImportPoints(ctx, orgID, *device, *channel, serialcfg.Config{Kind: serialcfg.KindCANFD, CANFD: &merged},
			cloud.PointsImport{File: filepath.Base(*file), Points: len(res.Points)}); err != nil {
			return output{}, err
		}
		out := struct {
			DeviceID      string               `json:"deviceId"`
			ChannelID     string               `json:"channelId"`
			Imported      []serialcfg.CANPoint `json:"imported"`
			Skipped       []string             `json:"skipped"`
			ChannelPoints int                  `json:"channelPoints"`
		}{*device, *channel, res.Points, res.Skipped, len(merged.Points)}
		if out.Skipped == nil {
			out.Skipped = []string{}
		}
		return output{out, func(w io.Writer) {
			printTable(w, "POINT\tCAN ID\tBITS\tORDER\tSIGNED\tSCALE\tOFFSET\tUNIT", func(tw io.Writer) {
				for _, p := range res.Points {
					scale := p.Scale
					if scale == 0 {
						scale = 1
					}
					fmt.Fprintf(tw, "%s.%s\t%s\t%d|%d\t%s\t%v\t%g\t%g\t%s\n", *channel, p.Name, p.CanID, p.StartBit, p.Length, p.ByteOrder, p.Signed, scale, p.Offset, p.Unit)
				}
			})
			for _, s := range res.Skipped {
				fmt.Fprintf(w, "note: %s\n", s)
			}
			fmt.Fprintf(w, "Imported %d points into %s of device %s (%d points on the channel now).\n", len(res.Points), *channel, *device, len(merged.Points))
			if st.Cluster != nil {
				fmt.Fprintln(w, "Every relay was notified; the agent's relay sends it the configuration now.")
			} else {
				fmt.Fprintln(w, "A relay serving this database sends the configuration to the connected agent within about a second (an agent not connected gets it when it next connects).")
			}
		}}, nil
	})
}

// deviceOrg finds the organization of device id: the admin commands run
// across organizations, the services within one.
func deviceOrg(ctx context.Context, st *cloud.Stores, id string) (string, error) {
	orgs, err := st.ListOrgs(ctx)
	if err != nil {
		return "", err
	}
	for _, o := range orgs {
		_, err := st.Devices().Device(ctx, o.ID, id)
		if err == nil {
			return o.ID, nil
		}
		if cloud.ErrorCode(err) != cloud.ENOTFOUND {
			return "", err
		}
	}
	return "", cloud.Errorf(cloud.ENOTFOUND, "device %q not found", id)
}

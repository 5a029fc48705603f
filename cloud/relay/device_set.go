package relay

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// runDeviceSet is `device set`: PATCH /devices/{id} from the command line
// (the flags given are the fields changed; --tags "" clears the tags,
// --notes "" clears the notes), and the serial I/O switch of PATCH
// /devices/{id}/serial (--serial-enabled). Everything is checked before
// anything changes: the fields, and that the device's model has serial
// I/O when the switch is given.
func runDeviceSet(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("device set")
	id := f.String("id", "device id", true)
	name := f.String("name", "new name", false)
	location := f.String("location", `new location ("" for none)`, false)
	notes := f.String("notes", `notes, at most 2,000 characters ("" clears them)`, false)
	tags := f.String("tags", `tags, comma-separated, replacing the device's ("" clears them)`, false)
	serialEnabled := f.String("serial-enabled", "the serial I/O switch, true or false: false makes the agent close every channel's port and poll and send nothing", false)
	var p cloud.DevicePatch
	var enabled *bool
	f.Check = func() error {
		f.FS.Visit(func(fl *flag.Flag) {
			switch fl.Name {
			case "name":
				p.Name = name
			case "location":
				p.Location = location
			case "notes":
				if *notes == "" {
					p.ClearNotes = true
				} else {
					p.Notes = notes
				}
			case "tags":
				t := []string{}
				if strings.TrimSpace(*tags) != "" {
					for _, s := range strings.Split(*tags, ",") {
						t = append(t, strings.TrimSpace(s))
					}
				}
				p.Tags = &t
			case "serial-enabled":
				b := *serialEnabled == "true"
				enabled = &b
			}
		})
		if enabled != nil && *serialEnabled != "true" && *serialEnabled != "false" {
			return fmt.Errorf("%w: --serial-enabled must be true or false (got %q)", ErrUsage, *serialEnabled)
		}
		if p.Name == nil && p.Location == nil && p.Notes == nil && !p.ClearNotes && p.Tags == nil && enabled == nil {
			return fmt.Errorf("%w: give at least one of --name, --location, --notes, --tags, --serial-enabled", ErrUsage)
		}
		return nil
	}
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		org, err := st.DeviceOrg(ctx, *id)
		if err != nil {
			return output{}, err
		}
		d, err := st.Devices().Device(ctx, org, *id)
		if err != nil {
			return output{}, err
		}
		fields := p.Name != nil || p.Location != nil || p.Notes != nil || p.ClearNotes || p.Tags != nil
		if fields {
			if _, err := p.Check(); err != nil {
				return output{}, err
			}
		}
		if enabled != nil {
			if _, err := cloud.SerialModel(d.Model); err != nil {
				return output{}, err
			}
		}
		if fields {
			if d, err = st.Devices().PatchDevice(ctx, org, *id, p); err != nil {
				return output{}, err
			}
		}
		out := deviceSetOutput{DeviceDetail: d}
		if enabled != nil {
			res, err := st.Serial().PatchSerial(ctx, org, *id, cloud.SerialPatch{Enabled: enabled})
			if err != nil {
				return output{}, err
			}
			out.SerialEnabled = &res.Enabled
		}
		return output{out, func(w io.Writer) {
			notes := "(none)"
			if d.Notes != nil {
				notes = *d.Notes
			}
			fmt.Fprintf(w, "Device %s changed.\n  name:     %s\n  location: %s\n  tags:     %s\n  notes:    %s\n",
				d.ID, d.Name, d.Location, strings.Join(d.Tags, ","), notes)
			if out.SerialEnabled != nil {
				state := "enabled"
				if !*out.SerialEnabled {
					state = "disabled (every channel's port closed on the gateway)"
				}
				fmt.Fprintf(w, "  serial:   %s\n", state)
			}
		}}, nil
	})
}

// deviceSetOutput is what `device set --json` prints: the device as GET
// /devices/{id} answers it, and serialEnabled when --serial-enabled was
// given.
type deviceSetOutput struct {
	resource.DeviceDetail
	SerialEnabled *bool `json:"serialEnabled,omitempty"`
}

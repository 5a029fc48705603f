package relay

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/fleet/fleet/cloud"
)

// runDeviceSet is `device set`: PATCH /devices/{id} from the command line
// (the flags given are the fields changed; --tags "" clears the tags,
// --notes "" clears the notes).
func runDeviceSet(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("device set")
	id := f.String("id", "device id", true)
	name := f.String("name", "new name", false)
	location := f.String("location", `new location ("" for none)`, false)
	notes := f.String("notes", `notes, at most 2,000 characters ("" clears them)`, false)
	tags := f.String("tags", `tags, comma-separated, replacing the device's ("" clears them)`, false)
	var p cloud.DevicePatch
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
			}
		})
		if p.Name == nil && p.Location == nil && p.Notes == nil && !p.ClearNotes && p.Tags == nil {
			return fmt.Errorf("%w: give at least one of --name, --location, --notes, --tags", ErrUsage)
		}
		return nil
	}
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		org, err := st.DeviceOrg(ctx, *id)
		if err != nil {
			return output{}, err
		}
		d, err := st.Devices().PatchDevice(ctx, org, *id, p)
		if err != nil {
			return output{}, err
		}
		return output{d, func(w io.Writer) {
			notes := "(none)"
			if d.Notes != nil {
				notes = *d.Notes
			}
			fmt.Fprintf(w, "Device %s changed.\n  name:     %s\n  location: %s\n  tags:     %s\n  notes:    %s\n",
				d.ID, d.Name, d.Location, strings.Join(d.Tags, ","), notes)
		}}, nil
	})
}

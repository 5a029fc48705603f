package relay

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

func runOrgList(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("org list")
	return f.run(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores) (output, error) {
		orgs, err := st.ListOrgs(ctx)
		if err != nil {
			return output{}, err
		}
		type orgJSON struct {
			ID        string  `json:"id"`
			Name      string  `json:"name"`
			CreatedAt *string `json:"createdAt"`
		}
		out := make([]orgJSON, 0, len(orgs))
		for _, o := range orgs {
			out = append(out, orgJSON{o.ID, o.Name, jsonTime(o.CreatedAt)})
		}
		return output{out, func(w io.Writer) {
			printTable(w, "ID\tNAME\tCREATED", func(tw io.Writer) {
				for _, o := range orgs {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", o.ID, o.Name, humanTime(o.CreatedAt, ""))
				}
			})
		}}, nil
	})
}

func runDeviceList(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("device list")
	return f.runInOrg(ctx, args, stdout, func(ctx context.Context, st *cloud.Stores, org string) (output, error) {
		devices := []resource.Device{}
		cursor := ""
		for {
			page, err := st.Devices().ListDevices(ctx, org, cloud.DeviceFilter{Page: cloud.Page{Limit: 100, Cursor: cursor}})
			if err != nil {
				return output{}, err
			}
			devices = append(devices, page.Data...)
			if !page.Pagination.HasMore {
				break
			}
			cursor = *page.Pagination.NextCursor
		}
		return output{devices, func(w io.Writer) {
			printTable(w, "ID\tNAME\tSERIAL\tMODEL\tSTATUS\tLAST SEEN\tTAGS", func(tw io.Writer) {
				for _, d := range devices {
					seen := "never"
					if d.LastSeen != nil {
						seen = humanTime(d.LastSeen.Time, "never")
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.Name, d.SerialNumber, d.Model, d.Status, seen, strings.Join(d.Tags, ","))
				}
			})
		}}, nil
	})
}

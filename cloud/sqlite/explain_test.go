package sqlite

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// fullScan matches a plan step that reads a whole table: "SCAN devices"
// without "USING INDEX" / "USING COVERING INDEX" / "USING PRIMARY KEY".
var fullScan = regexp.MustCompile(`^SCAN (\w+)$`)

// keysetSearch matches an index search bounded by the keyset cursor.
var keysetSearch = regexp.MustCompile(`SEARCH \w+ USING (COVERING )?INDEX \w+ \(.*\(created_at,id\)[<>]\(\?,\?\)\)`)

// TestListQueriesUseIndexes runs EXPLAIN QUERY PLAN on every list query of
// the store, with every combination of filters and cursor, and on the
// point reads of the request path, and fails on a full-table scan or a
// temporary B-tree for ORDER BY (a sort of the whole match set).
func TestListQueriesUseIndexes(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	// ANALYZE-free planning on an empty database is what a fresh relay
	// runs with; the plan must be good without statistics.
	type query struct {
		name string
		sql  string
	}
	var queries []query
	// on picks a filter's value when it is in use.
	on := func(use bool, v string) string {
		if use {
			return v
		}
		return ""
	}
	cursorID := ids.New()
	list := func(name, sql string, err error) {
		if err != nil {
			t.Fatal(err)
		}
		queries = append(queries, query{name, sql})
	}
	for _, status := range []bool{false, true} {
		for _, cursor := range []bool{false, true} {
			for _, tags := range []bool{false, true} {
				k := sqlstore.DeviceList("o", cloud.DeviceFilter{Status: resource.DeviceStatus(on(status, "ONLINE")), Page: cloud.Page{Cursor: on(cursor, cursorID)}})
				if tags { // GET /devices?tag=a&tag=b (DeviceService.ListDevices)
					k.Where, k.WhereArgs = dialect.TagsWhere([]string{"a", "b"})
				}
				q, _, err := k.SQL()
				list(fmt.Sprintf("devices status=%v cursor=%v tags=%v", status, cursor, tags), q, err)
			}
		}
	}
	for _, typ := range []bool{false, true} {
		for _, sev := range []bool{false, true} {
			for _, cursor := range []bool{false, true} {
				q, _, err := sqlstore.EventList("d", cloud.EventFilter{Type: on(typ, "t"), Severity: resource.Severity(on(sev, "INFO")), Page: cloud.Page{Cursor: on(cursor, cursorID)}}).SQL()
				list(fmt.Sprintf("events type=%v severity=%v cursor=%v", typ, sev, cursor), q, err)
			}
		}
	}
	for _, sev := range []bool{false, true} {
		for _, dev := range []bool{false, true} {
			for _, cursor := range []bool{false, true} {
				q, _, err := sqlstore.AlertList("o", cloud.AlertFilter{Severity: resource.Severity(on(sev, "INFO")), DeviceID: on(dev, "d"), Page: cloud.Page{Cursor: on(cursor, cursorID)}}).SQL()
				list(fmt.Sprintf("alerts severity=%v device=%v cursor=%v", sev, dev, cursor), q, err)
			}
		}
	}
	for _, cursor := range []bool{false, true} {
		q, _, err := sqlstore.RuleList("o", cloud.Page{Cursor: on(cursor, cursorID)}).SQL()
		list(fmt.Sprintf("rules cursor=%v", cursor), q, err)
		q, _, err = sqlstore.RolloutList("o", cloud.Page{Cursor: on(cursor, cursorID)}).SQL()
		list(fmt.Sprintf("rollouts cursor=%v", cursor), q, err)
		for _, all := range []bool{false, true} {
			q, _, err := sqlstore.SilenceList("o", cloud.SilenceFilter{All: all, Page: cloud.Page{Cursor: on(cursor, cursorID)}}, time.Now()).SQL()
			list(fmt.Sprintf("silences all=%v cursor=%v", all, cursor), q, err)
		}
	}
	queries = append(queries,
		query{"metrics", metricsSQL},
		query{"device cursor", sqlstore.DeviceList("o", cloud.DeviceFilter{}).CursorSQL()},
		query{"event cursor", sqlstore.EventList("d", cloud.EventFilter{}).CursorSQL()},
		query{"alert cursor", sqlstore.AlertList("o", cloud.AlertFilter{}).CursorSQL()},
		query{"key by id", `SELECT ` + sqlstore.KeyColumns + ` FROM api_keys WHERE id = ?`},
		query{"keys of org", sqlstore.ListKeysSQL},
		query{"device by token", sqlstore.DeviceByTokenSQL},
		query{"device model", deviceModelSQL},
		query{"serial channels", `SELECT channel_id, config FROM serial_channels WHERE device_id = ?`},
		query{"offline devices", sqlstore.OfflineDevicesSQL},
		query{"rollout cursor", sqlstore.RolloutList("o", cloud.Page{}).CursorSQL()},
		query{"pending commands", sqlstore.OpenCommandsSQL},
		query{"rollouts to step", sqlstore.RolloutsToStepSQL},
	)
	for _, sts := range [][]resource.DeviceStatus{{resource.StatusError}, cloud.RuleStatuses} {
		q, err := sqlstore.StatusDevicesSQL(sts)
		list(fmt.Sprintf("status devices %v", sts), q, err)
	}
	for _, q := range queries {
		t.Run(q.name, func(t *testing.T) {
			n := strings.Count(q.sql, "?")
			args := make([]any, n)
			for i := range args {
				args[i] = "x"
			}
			rows, err := db.R.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q.sql, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, notused int
				var detail string
				if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			for _, step := range plan {
				if fullScan.MatchString(step) || strings.Contains(step, "USE TEMP B-TREE FOR ORDER BY") {
					t.Errorf("plan step %q in\n%s\nfor %s", step, strings.Join(plan, "\n"), q.sql)
				}
			}
			// A cursor page must start its index search at the cursor
			// (the keyset bound in the SEARCH), not walk from the start.
			if strings.Contains(q.name, "cursor=true") && !keysetSearch.MatchString(strings.Join(plan, "\n")) {
				t.Errorf("cursor page does not seek to the cursor:\n%s\nfor %s", strings.Join(plan, "\n"), q.sql)
			}
		})
	}
}

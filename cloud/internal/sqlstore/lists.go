package sqlstore

import (
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// Eq is a list's equality filter, Column = Value; an empty Value filters
// nothing.
type Eq struct{ Column, Value string }

// Keyset is a keyset-paginated list of T: the rows of Table, read as
// Columns with Scan, whose ScopeColumn is Scope and that match every
// filter in use, in (created_at, id) order (descending when Newest); a page
// of Limit rows after Cursor, the ID of a row of the scope ("" for the
// first page). The filters are not applied to the cursor, since a row may
// change between two pages.
type Keyset[T any] struct {
	What               string // names the list in errors
	Table, Columns     string
	ScopeColumn, Scope string
	Filters            []Eq
	// Where, when not "", is a further condition of the rows listed (not
	// of the cursor), with WhereArgs for its placeholders.
	Where     string
	WhereArgs []any
	Newest    bool
	Cursor    string
	Limit     int
	Scan      func(Row) (T, error)
	ID        func(T) string
}

// SQL is the query of the page, asking for Limit+1 rows, and its
// arguments; ECURSOR for a cursor that is no id. The cursor's position is
// looked up in the same statement: an unknown cursor makes it NULL and the
// page empty (see Page).
func (k Keyset[T]) SQL() (string, []any, error) {
	if k.Cursor != "" && !ids.Valid(k.Cursor) {
		return "", nil, cloud.ErrCursor()
	}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "?"
	}
	q := `SELECT ` + k.Columns + ` FROM ` + k.Table + ` WHERE ` + k.ScopeColumn + ` = ` + arg(k.Scope)
	for _, f := range k.Filters {
		if f.Value != "" {
			q += ` AND ` + f.Column + ` = ` + arg(f.Value)
		}
	}
	if k.Where != "" {
		q += ` AND (` + k.Where + `)`
		args = append(args, k.WhereArgs...)
	}
	after, order := `>`, ` ORDER BY created_at, id`
	if k.Newest {
		after, order = `<`, ` ORDER BY created_at DESC, id DESC`
	}
	if k.Cursor != "" {
		// max(): one row, NULL when the cursor is unknown, also where id
		// is unique only with created_at (PostgreSQL's partitions).
		q += ` AND (created_at, id) ` + after + ` ((SELECT max(c.created_at) FROM ` + k.Table + ` c WHERE c.id = ` + arg(k.Cursor) +
			` AND c.` + k.ScopeColumn + ` = ` + arg(k.Scope) + `), ` + arg(k.Cursor) + `)`
	}
	return q + order + ` LIMIT ` + arg(k.Limit+1), args, nil
}

// CursorSQL finds the cursor among the scope's rows (arguments: cursor,
// scope), reading its created_at.
func (k Keyset[T]) CursorSQL() string {
	return `SELECT created_at FROM ` + k.Table + ` WHERE id = ? AND ` + k.ScopeColumn + ` = ?`
}

// Page answers the page from the rows its SQL returned, or err: the first
// Limit rows, and the cursor of the next page when there was one more. An
// empty page after a cursor that findCursor does not find (the query cannot
// tell it from the end of the list) is its error, ECURSOR.
func (k Keyset[T]) Page(rows []T, err error, findCursor func() error) (resource.List[T], error) {
	if err == nil && len(rows) == 0 && k.Cursor != "" {
		err = findCursor()
	}
	if err != nil {
		return resource.List[T]{Data: []T{}}, err
	}
	out := resource.List[T]{Data: []T{}}
	if rows != nil {
		out.Data = rows
	}
	out.Data, out.Pagination = cloud.Paginate(out.Data, k.Limit, k.ID)
	return out, nil
}

// DeviceList is the organization's devices, oldest first.
func DeviceList(orgID string, f cloud.DeviceFilter) Keyset[resource.Device] {
	return Keyset[resource.Device]{
		What: "list devices", Table: "devices", Columns: DeviceColumns, ScopeColumn: "org_id", Scope: orgID,
		Filters: []Eq{{"status", string(f.Status)}},
		Cursor:  f.Cursor, Limit: cloud.ListLimit(f.Limit, 25, 100),
		Scan: func(r Row) (resource.Device, error) { return ScanDevice(r) },
		ID:   func(d resource.Device) string { return d.ID },
	}
}

// EventList is the device's events, newest first.
func EventList(deviceID string, f cloud.EventFilter) Keyset[resource.Event] {
	return Keyset[resource.Event]{
		What: "events", Table: "events", Columns: EventColumns, ScopeColumn: "device_id", Scope: deviceID,
		Filters: []Eq{{"type", f.Type}, {"severity", string(f.Severity)}},
		Newest:  true, Cursor: f.Cursor, Limit: cloud.ListLimit(f.Limit, 50, 200),
		Scan: ScanEvent,
		ID:   func(e resource.Event) string { return e.ID },
	}
}

// AlertList is the organization's alerts in f.State (ACTIVE when empty),
// newest first.
func AlertList(orgID string, f cloud.AlertFilter) Keyset[resource.Alert] {
	state := f.State
	if state == "" {
		state = resource.AlertActive
	}
	return Keyset[resource.Alert]{
		What: "list alerts", Table: "alerts", Columns: AlertColumns, ScopeColumn: "org_id", Scope: orgID,
		Filters: []Eq{{"state", string(state)}, {"severity", string(f.Severity)}, {"device_id", f.DeviceID}},
		Newest:  true, Cursor: f.Cursor, Limit: cloud.ListLimit(f.Limit, 25, 100),
		Scan: ScanAlert,
		ID:   func(a resource.Alert) string { return a.ID },
	}
}

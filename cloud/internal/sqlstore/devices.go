package sqlstore

import (
	"context"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// DeviceTables is what DeviceService reads of a store's devices, metrics
// and events tables, in the store's dialect.
type DeviceTables interface {
	// DeviceModel is the model of the organization's device, or ENOTFOUND.
	DeviceModel(ctx context.Context, orgID, deviceID string) (string, error)
	// DeviceDetail reads the organization's device id, or ENOTFOUND.
	DeviceDetail(ctx context.Context, orgID, id string) (resource.DeviceDetail, error)
	// NewestSamples reads up to n of the device's samples captured in
	// [from, to], newest first (SamplesSQL).
	NewestSamples(ctx context.Context, deviceID string, from, to time.Time, n int) ([]resource.MetricSample, error)
	// DevicePage and EventPage read a page of a list.
	DevicePage(ctx context.Context, k Keyset[resource.Device]) (resource.List[resource.Device], error)
	EventPage(ctx context.Context, k Keyset[resource.Event]) (resource.List[resource.Event], error)
	// TagsWhere is the condition of the devices holding every one of tags
	// (Dialect.TagsWhere).
	TagsWhere(tags []string) (string, []any)
	// UpdateDevice writes a checked patch to the organization's device
	// in one transaction, or ENOTFOUND.
	UpdateDevice(ctx context.Context, orgID, id string, p cloud.DevicePatch) error
}

// SamplesSQL is the query of NewestSamples (arguments: device, from and to
// in Unix milliseconds, n).
const SamplesSQL = `SELECT ` + SampleColumns + ` FROM metrics
	WHERE device_id = ? AND captured_at >= ? AND captured_at <= ? ORDER BY captured_at DESC LIMIT ?`

// DeviceService implements cloud.DeviceService on a store's tables.
type DeviceService struct {
	Tables DeviceTables
	// Rules hears of tag changes (the alert engine).
	Rules cloud.RulesObserver
}

var _ cloud.DeviceService = (*DeviceService)(nil)

// ListDevices lists the organization's devices oldest first (created_at,
// then id), keyset-paginated (DeviceList), only those holding every one
// of f.Tags when set (EINVALID naming "tag" for one that is no tag).
func (s *DeviceService) ListDevices(ctx context.Context, orgID string, f cloud.DeviceFilter) (resource.List[resource.Device], error) {
	k := DeviceList(orgID, f)
	if f.Tags != "" {
		tags := strings.Split(f.Tags, ",")
		for _, t := range tags {
			if !cloud.TagPattern.MatchString(t) {
				return resource.List[resource.Device]{Data: []resource.Device{}}, cloud.Errorf(cloud.EINVALID, "tag: %q is not a tag", t)
			}
		}
		k.Where, k.WhereArgs = s.Tables.TagsWhere(tags)
	}
	return s.Tables.DevicePage(ctx, k)
}

// Device returns the organization's device id, or ENOTFOUND.
func (s *DeviceService) Device(ctx context.Context, orgID, id string) (resource.DeviceDetail, error) {
	return s.Tables.DeviceDetail(ctx, orgID, id)
}

// Metrics returns the device's samples in [q.From, q.To], ascending. When
// more than q.Limit fall in the window, the newest q.Limit are returned and
// the window's From becomes the first returned sample's time.
func (s *DeviceService) Metrics(ctx context.Context, orgID, deviceID string, q cloud.MetricsQuery) (resource.MetricsResponse, error) {
	out := resource.MetricsResponse{Data: []resource.MetricSample{}}
	if q.From.After(q.To) {
		return out, cloud.Errorf(cloud.EINVALID, "from must not be after to")
	}
	if _, err := s.Tables.DeviceModel(ctx, orgID, deviceID); err != nil {
		return out, err
	}
	limit := cloud.ListLimit(q.Limit, 200, 1000)
	data, err := s.Tables.NewestSamples(ctx, deviceID, q.From, q.To, limit+1)
	if err != nil {
		return out, err
	}
	return MetricsResponse(q, limit, data), nil
}

// Events lists the device's events newest first (created_at, then id, both
// descending), keyset-paginated (EventList); ENOTFOUND unless the device
// is the organization's.
func (s *DeviceService) Events(ctx context.Context, orgID, deviceID string, f cloud.EventFilter) (resource.List[resource.Event], error) {
	if _, err := s.Tables.DeviceModel(ctx, orgID, deviceID); err != nil {
		return resource.List[resource.Event]{Data: []resource.Event{}}, err
	}
	return s.Tables.EventPage(ctx, EventList(deviceID, f))
}

// SearchDevices reads with q one page of the organization's devices, oldest
// first (worst first for cloud.SortWorst: worstOrder), filtered by status, by tags (every one) and by a case-insensitive
// substring of name, serial number, location or model, with the number of
// matches (cloud.PanelStore's). d says how the dialect matches tags.
func SearchDevices(ctx context.Context, q Querier, d Dialect, orgID string, s cloud.DeviceSearch) (cloud.DevicePage, error) {
	where := ` FROM devices WHERE org_id = ?`
	args := []any{orgID}
	if s.Status != "" {
		where += ` AND status = ?`
		args = append(args, string(s.Status))
	}
	if pat := cloud.LikePattern(s.Query); pat != "" {
		where += ` AND (lower(name) LIKE ? ESCAPE '\' OR lower(serial_number) LIKE ? ESCAPE '\' OR lower(location) LIKE ? ESCAPE '\' OR lower(model) LIKE ? ESCAPE '\')`
		args = append(args, pat, pat, pat, pat)
	}
	if tw, targs := d.TagsWhere(s.Tags); tw != "" {
		where += ` AND ` + tw
		args = append(args, targs...)
	}
	var out cloud.DevicePage
	if err := q.QueryRow(ctx, `SELECT COUNT(*)`+where, args...).Scan(&out.Total); err != nil {
		return cloud.DevicePage{}, err
	}
	limit := cloud.ListLimit(s.Limit, 50, 200)
	query := `SELECT ` + DeviceColumns + where + ` ORDER BY created_at, id LIMIT ? OFFSET ?`
	if s.Sort == cloud.SortWorst {
		// The same devices joined to their open alerts (worstOrder).
		query = `SELECT ` + DeviceColumns + ` FROM devices LEFT JOIN ` + openByDevice + ` ON a.device_id = devices.id` +
			strings.TrimPrefix(where, ` FROM devices`) + worstOrder + ` LIMIT ? OFFSET ?`
		args = append([]any{orgID}, args...)
	}
	var err error
	out.Devices, err = Collect(ctx, q, func(r Row) (resource.Device, error) { return ScanDevice(r) },
		query, append(args, limit, max(s.Offset, 0))...)
	if err != nil {
		return cloud.DevicePage{}, err
	}
	return out, nil
}

// PatchDevice implements cloud.DeviceService: the patch checked
// (cloud.DevicePatch.Check), then written in one transaction; nothing
// changes on an error. ENOTFOUND unless the device is the organization's.
func (s *DeviceService) PatchDevice(ctx context.Context, orgID, id string, p cloud.DevicePatch) (resource.DeviceDetail, error) {
	p, err := p.Check()
	if err != nil {
		return resource.DeviceDetail{}, err
	}
	if err := s.Tables.UpdateDevice(ctx, orgID, id, p); err != nil {
		return resource.DeviceDetail{}, err
	}
	if p.Tags != nil && s.Rules != nil {
		s.Rules.DeviceTagsChanged(orgID, id)
	}
	return s.Tables.DeviceDetail(ctx, orgID, id)
}

package sqlite

import (
	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

// The point reads of the request path (explain_test.go checks that each,
// and each list query, is served by an index).
const (
	deviceModelSQL = sqlstore.DeviceModelSQL
)

const metricsSQL = sqlstore.SamplesSQL

var deviceNotFound = sqlstore.DeviceNotFound

// NewDevice is what AddDevice needs.
type NewDevice = cloud.NewDevice

package resource

// Point is one entry of GET /devices/{id}/points: a configured point with
// its latest state. Value is a number, a boolean (type "bool") or nil (no
// good reading yet). Quality is "good", "bad" (Error says why) or "stale"
// (no reading for 3 × its interval, or the device is not ONLINE).
type Point struct {
	ID        string `json:"id"`
	ChannelID string `json:"channelId"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	Unit      string `json:"unit"`
	Value     any    `json:"value"`
	Quality   string `json:"quality"`
	Error     string `json:"error"`
	At        *Time  `json:"at"`
}

// PointRef is a point's entry in a channel's telemetry, channel detail and
// serial.signal webhooks.
type PointRef struct {
	ID      string `json:"id"`
	Value   any    `json:"value"`
	Unit    string `json:"unit"`
	Quality string `json:"quality"`
	At      *Time  `json:"at"`
}

// PointSample is one raw sample of GET /devices/{id}/points/{pointId}/samples:
// Value is a number, a boolean, or nil for a bad reading.
type PointSample struct {
	At    Time `json:"at"`
	Value any  `json:"value"`
}

// PointBucket is one non-empty `step` bucket of the samples route, At its
// start; the statistics are over the bucket's good samples (a bool as 0 or 1).
type PointBucket struct {
	At    Time    `json:"at"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Avg   float64 `json:"avg"`
	Last  float64 `json:"last"`
	Count int     `json:"count"`
}

// PointSamples is the body of the samples route without `step`.
type PointSamples struct {
	Data   []PointSample `json:"data"`
	Window Window        `json:"window"`
}

// PointBuckets is the body of the samples route with `step`.
type PointBuckets struct {
	Data   []PointBucket `json:"data"`
	Window Window        `json:"window"`
}

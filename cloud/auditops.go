package cloud

import (
	"net/url"
)

// What the audit records of operations carry (issue 30): the changes of
// serial state, channels, alerts, rules, silences, notification channels,
// rollouts and reboots are recorded by the store in their transactions;
// these are the pieces their details share.

// PointsImport is what a DBC import brings to a channel
// (SerialService.ImportPoints): the file's name (its base name, as the
// user chose it) and how many points it gave.
type PointsImport struct {
	File   string
	Points int
}

// MaxAuditFileName bounds the file name a record keeps.
const MaxAuditFileName = 255

// AuditURL is what an audit record keeps of a URL: its scheme and host
// ("https://hooks.example.com"), never its path, query or user
// information, where a chat or webhook URL keeps its secret; "" for an
// empty or unreadable one.
func AuditURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

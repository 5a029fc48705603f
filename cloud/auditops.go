package cloud

import (
	"net/url"
)

// What the audit records of operations carry (issue 30): the changes of
// serial state, channels, alerts, rules, silences, notification channels,
// rollouts and reboots are recorded by the store in their transactions
// (cloud/internal/sqlstore), whichever door made them:
//
//	serial.updated               serial/<device>        each of mode, enabled, forwarding that changed: {"from","to"}
//	                                                    (forwarding: webhookEnabled and the URL's scheme and host)
//	channel.configured           channel/<device>/<ch>  kind, changed (the configuration's members that differ)
//	channel.points_imported      channel/<device>/<ch>  kind, changed, file, points (a DBC import)
//	alert.acknowledged/resolved  alert/<id>             ruleId, rule, deviceId (only when the state moved)
//	rule.created                 rule/<id>              name, severity, enabled, condition (its kind)
//	rule.updated                 rule/<id>              name, changed; enabled, severity, repeatEvery, renamed: {"from","to"};
//	                                                    resolvedAlerts when the change resolved some
//	rule.deleted                 rule/<id>              name, resolvedAlerts
//	silence.created              silence/<id>           from, to, comment, scope (tags, device ids when few, or a count)
//	silence.deleted              silence/<id>           (ended; ending an ended one records nothing)
//	notification_channel.created notification_channel/<id>  kind, name, minSeverity, target (a URL's scheme and host)
//	                                                    or recipients (how many addresses), allRules
//	notification_channel.removed notification_channel/<id>  the same
//	rollout.created              rollout/<id>           version, scope, waves, devices
//	rollout.updated              rollout/<id>           action: pause, resume or cancel
//	device.reboot_requested      device/<id>            commandId (a reboot already waiting records nothing)
//
// The alert and rollout engines' own changes, testing a notification
// channel and refused changes have no record.

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

package storetest

import (
	"context"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// OldRulesSQL is an organization with the six fixed rules as a relay
// before migration 0012_rules stored them (high_temp edited with SQL:
// threshold 70, clear 65, one sample, disabled), in statements both
// dialects run; OldRulesOrg is its id and OldRuleIDs its rules' ids by
// name. A dialect's migration test runs it on a database migrated up to
// 0011 and then CheckMigratedRules.
const OldRulesSQL = `INSERT INTO orgs (id, name, webhook_secret, created_at) VALUES ('orgold', 'Old', 'whsec_old', 1700000000000);
INSERT INTO alert_rules (id, org_id, name, severity, metric, threshold, clear_threshold, consecutive, enabled, created_at) VALUES
	('rulecpu', 'orgold', 'high_cpu', 'WARNING', 'cpuPct', 90, 80, 3, true, 1700000000000),
	('rulemem', 'orgold', 'high_mem', 'WARNING', 'memPct', 90, 80, 3, true, 1700000000000),
	('ruledisk', 'orgold', 'disk_full', 'ERROR', 'diskUsedPct', 90, 85, 1, true, 1700000000000),
	('ruletemp', 'orgold', 'high_temp', 'WARNING', 'tempCpu', 70, 65, 1, false, 1700000000000),
	('ruleoffline', 'orgold', 'device_offline', 'ERROR', '', 0, 0, 1, true, 1700000000000),
	('rulevpn', 'orgold', 'vpn_down', 'ERROR', '', 0, 0, 1, true, 1700000000000);`

// OldRulesOrg is the organization of OldRulesSQL.
const OldRulesOrg = "orgold"

// OldRuleIDs are the ids of OldRulesSQL's rules by name.
var OldRuleIDs = map[string]string{"high_cpu": "rulecpu", "high_mem": "rulemem", "disk_full": "ruledisk", "high_temp": "ruletemp",
	"device_offline": "ruleoffline", "vpn_down": "rulevpn"}

// CheckMigratedRules checks, after migration 0012_rules, the rules of
// OldRulesSQL's organization on s: the six rules keep their ids and are
// the defaults (cloud.DefaultAlertRules), but for the edited high_temp,
// whose threshold became its condition; device_error was added; the alert
// engine reads them all.
func CheckMigratedRules(t *testing.T, s cloud.Stores) {
	t.Helper()
	ctx := context.Background()
	list, err := s.Rules().ListRules(ctx, OldRulesOrg, cloud.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]resource.AlertRule{}
	for _, r := range list.Data {
		got[r.Name] = r
	}
	for _, d := range cloud.DefaultAlertRules() {
		r, ok := got[d.Name]
		if !ok {
			t.Errorf("no rule %s after the migration", d.Name)
			continue
		}
		if id, old := OldRuleIDs[d.Name]; old && r.ID != id {
			t.Errorf("%s has id %s, want its old id %s", d.Name, r.ID, id)
		}
		if d.Name == "high_temp" {
			d.Enabled, d.Condition.Value, d.Condition.Clear, d.Condition.For = false, num(70), num(65), "0s"
		}
		if a, b := pointsJSON(t, d), pointsJSON(t, withoutStamps(r)); a != b {
			t.Errorf("%s after the migration:\n got %s\nwant %s", d.Name, b, a)
		}
		if d.Name != "device_error" && (!r.CreatedAt.Equal(r.UpdatedAt.Time) || r.CreatedAt.UnixMilli() != 1700000000000) {
			t.Errorf("%s: created %v, updated %v", d.Name, r.CreatedAt, r.UpdatedAt)
		}
	}
	if len(list.Data) != 7 || got["device_error"].ID == "" {
		t.Errorf("%d rules after the migration, want the 7 defaults", len(list.Data))
	}
	if rules, err := s.Engine.Rules(ctx, OldRulesOrg); err != nil || len(rules) != 7 {
		t.Errorf("engine rules: %v, %v", rules, err)
	}
}

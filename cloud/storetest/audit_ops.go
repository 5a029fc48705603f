package storetest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// The audit records of operations (issue 30): each change made with an
// actor in its context is exactly one record with the actor, the target
// and the details; the same change without an actor (the system's own)
// and a refused change have none.

// wantNoAudit fails unless the organization has no record f selects.
func (e *env) wantNoAudit(orgID, why string, f cloud.AuditFilter) {
	e.t.Helper()
	if got := e.auditOf(orgID, f); len(got) != 0 {
		e.t.Errorf("%s: %d audit records, want none: %+v", why, len(got), got)
	}
}

// detail is the value at path (keys separated by dots) in details.
func detail(d map[string]any, path string) any {
	var v any = d
	for k := range strings.SplitSeq(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// wantDetails checks details against want: each key a path, each value
// what it must hold (JSON numbers are float64).
func wantDetails(t testing.TB, action string, d map[string]any, want map[string]any) {
	t.Helper()
	for path, w := range want {
		got := detail(d, path)
		if ws, ok := w.([]string); ok {
			var gs []string
			for _, x := range asSlice(got) {
				s, _ := x.(string)
				gs = append(gs, s)
			}
			if !slices.Equal(gs, ws) {
				t.Errorf("%s: details %s = %v, want %v (details %v)", action, path, got, ws, d)
			}
			continue
		}
		if got != w {
			t.Errorf("%s: details %s = %#v, want %#v (details %v)", action, path, got, w, d)
		}
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// testAuditSerial: serial.updated names each field that changed, from
// and to, and of a forwarding URL only its scheme and host; "who turned
// forwarding off on Press line 1 last night" is one filter.
func testAuditSerial(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	target := cloud.AuditTarget{Kind: cloud.TargetSerial, ID: d.ID}
	str := func(s string) *string { return &s }
	yes, no := true, false
	if _, err := e.Store.Serial().PatchSerial(e.ctx, org.ID, d.ID, cloud.SerialPatch{Mode: str("both")}); err != nil {
		t.Fatal(err)
	}
	e.wantNoAudit(org.ID, "a serial change without an actor", cloud.AuditFilter{})
	user := e.acting(auditUser)
	if _, err := user.Store.Serial().PatchSerial(user.ctx, org.ID, d.ID, cloud.SerialPatch{Mode: str("auto")}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("bad mode: %v", err)
	}
	e.wantNoAudit(org.ID, "a refused serial change", cloud.AuditFilter{})

	if _, err := user.Store.Serial().PatchSerial(user.ctx, org.ID, d.ID,
		cloud.SerialPatch{WebhookURL: str("https://hooks.example.com/T00/s3cr3t-path?token=abc"), WebhookEnabled: &yes}); err != nil {
		t.Fatal(err)
	}
	r, det := e.wantAudit(org.ID, cloud.ActionSerialUpdated, auditUser, target)
	wantDetails(t, r.Action, det, map[string]any{"mode": nil, "enabled": nil,
		"forwarding.from.webhookEnabled": false, "forwarding.from.webhookUrl": nil,
		"forwarding.to.webhookEnabled": true, "forwarding.to.webhookUrl": "https://hooks.example.com"})
	if s := string(r.Details); strings.Contains(s, "s3cr3t") || strings.Contains(s, "token") {
		t.Errorf("the record keeps the webhook URL's path: %s", s)
	}

	e.clock.Add(time.Hour)
	key := e.acting(auditKey)
	if _, err := key.Store.Serial().PatchSerial(key.ctx, org.ID, d.ID, cloud.SerialPatch{WebhookEnabled: &no, Mode: str("managed")}); err != nil {
		t.Fatal(err)
	}
	cli := e.acting(auditCLI)
	if _, err := cli.Store.Serial().PatchSerial(cli.ctx, org.ID, d.ID, cloud.SerialPatch{Enabled: &no}); err != nil {
		t.Fatal(err)
	}
	recs := e.auditOf(org.ID, cloud.AuditFilter{Action: cloud.ActionSerialUpdated, TargetKind: cloud.TargetSerial, TargetID: d.ID, ActorKind: cloud.ActorAPIKey})
	if len(recs) != 1 || recs[0].Actor.Name != auditKey.Name || recs[0].IP != auditKey.IP {
		t.Fatalf("the key's serial changes: %+v", recs)
	}
	off := decodeDetails(t, recs[0])
	wantDetails(t, "forwarding off", off, map[string]any{"mode.from": "both", "mode.to": "managed", "enabled": nil,
		"forwarding.from.webhookEnabled": true, "forwarding.to.webhookEnabled": false, "forwarding.to.webhookUrl": "https://hooks.example.com"})
	recs = e.auditOf(org.ID, cloud.AuditFilter{Action: "serial.", ActorKind: cloud.ActorCLI})
	if len(recs) != 1 || recs[0].Actor.ID != auditCLI.ID {
		t.Fatalf("the CLI's serial changes: %+v", recs)
	}
	wantDetails(t, "port off", decodeDetails(t, recs[0]), map[string]any{"enabled.from": true, "enabled.to": false, "mode": nil, "forwarding": nil})
	if n := len(e.auditOf(org.ID, cloud.AuditFilter{})); n != 3 {
		t.Errorf("%d records, want the 3 changes made with an actor", n)
	}
}

// decodeDetails is r's details as a map.
func decodeDetails(t testing.TB, r cloud.AuditRecord) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(r.Details, &d); err != nil {
		t.Fatalf("%s: details %s: %v", r.Action, r.Details, err)
	}
	return d
}

// testAuditChannels: channel.configured names the kind and the members
// of the configuration that changed (against the catalog default for a
// channel never configured); a DBC import is channel.points_imported with
// the file's name and its count; a refused configuration has no record.
func testAuditChannels(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	e.report(d, e.online(d, 30*time.Second), e.clock.Now(), protocol.ChannelState{ID: "rs485-2", Available: false})
	rs485 := cloud.AuditTarget{Kind: cloud.TargetChannel, ID: d.ID + "/rs485-1"}
	if _, err := e.Store.Serial().PutChannel(e.ctx, org.ID, d.ID, "rs485-1", rs485Config(9600)); err != nil {
		t.Fatal(err)
	}
	e.wantNoAudit(org.ID, "a channel configured without an actor", cloud.AuditFilter{})

	key := e.acting(auditKey)
	svc := key.Store.Serial()
	bad := rs485Config(9600)
	bad.RS485.BaudRate = 9601
	if _, err := svc.PutChannel(key.ctx, org.ID, d.ID, "rs485-1", bad); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("bad baud rate: %v", err)
	}
	if _, err := svc.PutChannel(key.ctx, org.ID, d.ID, "rs485-2", rs485Config(9600)); cloud.ErrorCode(err) != cloud.EUNAVAILABLE {
		t.Fatalf("unavailable channel: %v", err)
	}
	e.wantNoAudit(org.ID, "refused channel configurations", cloud.AuditFilter{})

	cfg := rs485Config(19200)
	cfg.RS485.Points = rs485Points().RS485.Points
	if _, err := svc.PutChannel(key.ctx, org.ID, d.ID, "rs485-1", cfg); err != nil {
		t.Fatal(err)
	}
	r, det := e.wantAudit(org.ID, cloud.ActionChannelConfigured, auditKey, rs485)
	wantDetails(t, r.Action, det, map[string]any{"kind": "rs485", "changed": []string{"baudRate", "points"}})

	// A channel never configured changes from the catalog default.
	canfd := cloud.AuditTarget{Kind: cloud.TargetChannel, ID: d.ID + "/canfd-1"}
	ch, err := e.Store.Serial().Channel(e.ctx, org.ID, d.ID, "canfd-1")
	if err != nil || ch.Config.CANFD == nil {
		t.Fatalf("canfd-1: %+v, %v", ch.Config, err)
	}
	next := *ch.Config.CANFD
	next.ListenOnly = !next.ListenOnly
	user := e.acting(auditUser)
	if _, err := user.Store.Serial().PutChannel(user.ctx, org.ID, d.ID, "canfd-1", serialcfg.Config{Kind: serialcfg.KindCANFD, CANFD: &next}); err != nil {
		t.Fatal(err)
	}
	r, det = e.wantAudit(org.ID, cloud.ActionChannelConfigured, auditUser, canfd)
	wantDetails(t, r.Action, det, map[string]any{"kind": "canfd", "changed": []string{"listenOnly"}})

	// A DBC import.
	e.clock.Add(time.Second)
	imported := next
	imported.Points = []serialcfg.CANPoint{{Name: "engine_speed", CanID: "0x1", StartBit: 0, Length: 8, ByteOrder: "little"},
		{Name: "oil_temp", CanID: "0x2", StartBit: 8, Length: 8, ByteOrder: "little"}}
	cli := e.acting(auditCLI)
	if _, err := cli.Store.Serial().ImportPoints(cli.ctx, org.ID, d.ID, "canfd-1", serialcfg.Config{Kind: serialcfg.KindCANFD, CANFD: &imported},
		cloud.PointsImport{File: "press-line-1.dbc", Points: 2}); err != nil {
		t.Fatal(err)
	}
	r, det = e.wantAudit(org.ID, cloud.ActionPointsImported, auditCLI, canfd)
	wantDetails(t, r.Action, det, map[string]any{"kind": "canfd", "file": "press-line-1.dbc", "points": float64(2), "changed": []string{"points"}})
	if ch, _ := e.Store.Serial().Channel(e.ctx, org.ID, d.ID, "canfd-1"); ch.Config.CANFD == nil || len(ch.Config.CANFD.Points) != 2 {
		t.Errorf("the import was not stored: %+v", ch.Config)
	}
	if n := len(e.auditOf(org.ID, cloud.AuditFilter{Action: "channel."})); n != 3 {
		t.Errorf("%d channel records, want 3", n)
	}
}

// testAuditAlerts: acknowledging and resolving (one record per alert,
// none for an alert already in the state) name the rule and the device;
// the engine's own resolution has none.
func testAuditAlerts(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	a1 := e.alert(d, "high_cpu", resource.AlertActive)
	a2 := e.alert(d, "device_offline", resource.AlertActive)
	e.wantNoAudit(org.ID, "alerts opened and moved without an actor", cloud.AuditFilter{})

	user := e.acting(auditUser)
	for _, id := range []string{a1.ID, a2.ID} {
		if _, err := user.Store.Alerts().Acknowledge(user.ctx, org.ID, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := user.Store.Alerts().Acknowledge(user.ctx, org.ID, a1.ID); err != nil {
		t.Fatal(err)
	}
	r, det := e.wantAudit(org.ID, cloud.ActionAlertAcknowledged, auditUser, cloud.AuditTarget{Kind: cloud.TargetAlert, ID: a1.ID})
	wantDetails(t, r.Action, det, map[string]any{"ruleId": a1.RuleID, "rule": "high_cpu", "deviceId": d.ID})
	e.wantAudit(org.ID, cloud.ActionAlertAcknowledged, auditUser, cloud.AuditTarget{Kind: cloud.TargetAlert, ID: a2.ID})

	key := e.acting(auditKey)
	if _, err := key.Store.Alerts().Resolve(key.ctx, org.ID, a1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := key.Store.Alerts().Resolve(key.ctx, org.ID, a1.ID); err != nil {
		t.Fatal(err)
	}
	r, det = e.wantAudit(org.ID, cloud.ActionAlertResolved, auditKey, cloud.AuditTarget{Kind: cloud.TargetAlert, ID: a1.ID})
	wantDetails(t, r.Action, det, map[string]any{"rule": "high_cpu", "deviceId": d.ID})
	if _, err := key.Store.Alerts().Acknowledge(key.ctx, org.ID, a1.ID); cloud.ErrorCode(err) != cloud.ERESOLVED {
		t.Fatalf("acknowledging a resolved alert: %v", err)
	}
	if _, err := key.Store.Alerts().Resolve(key.ctx, org.ID, "nosuchalert"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Fatalf("resolving an unknown alert: %v", err)
	}
	// The engine resolves the other: the system's own change.
	if _, ok, err := e.Engine.ResolveAlert(e.ctx, org.ID, d.ID, e.rule(org.ID, "device_offline"), "back online", e.clock.Now()); err != nil || !ok {
		t.Fatalf("engine resolve: %v, %v", ok, err)
	}
	e.wantNoAudit(org.ID, "the engine's resolution", cloud.AuditFilter{Action: cloud.ActionAlertResolved, TargetID: a2.ID})
	if n := len(e.auditOf(org.ID, cloud.AuditFilter{})); n != 3 {
		t.Errorf("%d records, want 3 (two acknowledged, one resolved)", n)
	}
}

// testAuditRules: rules created, updated (the fields that changed) and
// deleted; silences created and ended; notification channels created and
// removed (of a URL only its scheme and host); testing a channel and
// refused changes have no record.
func testAuditRules(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	rules := e.Store.Rules()
	if _, err := rules.CreateRule(e.ctx, org.ID, cpuRule("quiet")); err != nil {
		t.Fatal(err)
	}
	e.wantNoAudit(org.ID, "a rule created without an actor", cloud.AuditFilter{})

	user := e.acting(auditUser)
	ur := user.Store.Rules()
	_, err := ur.CreateRule(user.ctx, org.ID, resource.AlertRule{Name: "broken", Severity: resource.SeverityWarning,
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "metric.nothing", Op: ">", Value: num(1)}})
	if cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("a bad rule: %v", err)
	}
	e.wantNoAudit(org.ID, "a refused rule", cloud.AuditFilter{})
	rule, err := ur.CreateRule(user.ctx, org.ID, cpuRule("hot press"))
	if err != nil {
		t.Fatal(err)
	}
	rt := cloud.AuditTarget{Kind: cloud.TargetRule, ID: rule.ID}
	r, det := e.wantAudit(org.ID, cloud.ActionRuleCreated, auditUser, rt)
	wantDetails(t, r.Action, det, map[string]any{"name": "hot press", "severity": "WARNING", "enabled": true, "condition": "threshold"})

	off, crit := false, resource.SeverityCritical
	if _, err := ur.UpdateRule(user.ctx, org.ID, rule.ID, cloud.RulePatch{Enabled: &off, Severity: &crit}); err != nil {
		t.Fatal(err)
	}
	r, det = e.wantAudit(org.ID, cloud.ActionRuleUpdated, auditUser, rt)
	wantDetails(t, r.Action, det, map[string]any{"name": "hot press", "changed": []string{"enabled", "severity"},
		"enabled.from": true, "enabled.to": false, "severity.from": "WARNING", "severity.to": "CRITICAL", "renamed": nil})

	key := e.acting(auditKey)
	high := e.rule(org.ID, "high_cpu")
	a := e.alert(d, "high_cpu", resource.AlertActive)
	if err := key.Store.Rules().DeleteRule(key.ctx, org.ID, high.ID); err != nil {
		t.Fatal(err)
	}
	r, det = e.wantAudit(org.ID, cloud.ActionRuleDeleted, auditKey, cloud.AuditTarget{Kind: cloud.TargetRule, ID: high.ID})
	wantDetails(t, r.Action, det, map[string]any{"name": "high_cpu", "resolvedAlerts": float64(1)})
	e.wantNoAudit(org.ID, "an alert a rule's deletion resolved", cloud.AuditFilter{Action: "alert.", TargetID: a.ID})
	if err := key.Store.Rules().DeleteRule(key.ctx, org.ID, high.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Fatalf("deleting a deleted rule: %v", err)
	}

	// Silences.
	now := e.clock.Now()
	if _, err := ur.CreateSilence(user.ctx, org.ID, cloud.NewSilence{From: now, To: now.Add(-time.Hour)}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("a silence ending before it starts: %v", err)
	}
	sil, err := ur.CreateSilence(user.ctx, org.ID, cloud.NewSilence{Scope: resource.RuleScope{DeviceIDs: []string{d.ID}},
		From: now, To: now.Add(2 * time.Hour), Comment: "press maintenance", CreatedBy: "user:" + auditUser.Name})
	if err != nil {
		t.Fatal(err)
	}
	st := cloud.AuditTarget{Kind: cloud.TargetSilence, ID: sil.ID}
	r, det = e.wantAudit(org.ID, cloud.ActionSilenceCreated, auditUser, st)
	wantDetails(t, r.Action, det, map[string]any{"comment": "press maintenance", "scope.deviceIds": []string{d.ID}})
	for range 2 {
		if err := ur.DeleteSilence(user.ctx, org.ID, sil.ID); err != nil {
			t.Fatal(err)
		}
	}
	e.wantAudit(org.ID, cloud.ActionSilenceDeleted, auditUser, st)

	// Notification channels.
	cli := e.acting(auditCLI)
	cr := cli.Store.Rules()
	if _, err := cr.CreateChannel(cli.ctx, cloud.NewChannel{OrgID: org.ID, Name: "x", Kind: resource.ChannelSlack, Target: "http://chat.example.com/hooks/T1"}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("an http chat URL: %v", err)
	}
	chat, err := cr.CreateChannel(cli.ctx, cloud.NewChannel{OrgID: org.ID, Name: "ops chat", Kind: resource.ChannelSlack,
		Target: "https://chat.example.com/hooks/T1/B2/s3cr3t", MinSeverity: resource.SeverityWarning, AllRules: true})
	if err != nil {
		t.Fatal(err)
	}
	mail, err := cr.CreateChannel(cli.ctx, cloud.NewChannel{OrgID: org.ID, Name: "ops mail", Kind: resource.ChannelEmail, Target: "ops@example.com, oncall@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cr.TestChannel(cli.ctx, org.ID, chat.ID); err != nil {
		t.Fatal(err)
	}
	ct := cloud.AuditTarget{Kind: cloud.TargetNotificationChannel, ID: chat.ID}
	r, det = e.wantAudit(org.ID, cloud.ActionNotifyCreated, auditCLI, ct)
	wantDetails(t, r.Action, det, map[string]any{"kind": "slack", "name": "ops chat", "minSeverity": "WARNING", "target": "https://chat.example.com", "allRules": true})
	r, det = e.wantAudit(org.ID, cloud.ActionNotifyCreated, auditCLI, cloud.AuditTarget{Kind: cloud.TargetNotificationChannel, ID: mail.ID})
	wantDetails(t, r.Action, det, map[string]any{"kind": "email", "recipients": float64(2), "target": nil})
	if err := cr.DeleteChannel(cli.ctx, org.ID, chat.ID); err != nil {
		t.Fatal(err)
	}
	if err := cr.DeleteChannel(cli.ctx, org.ID, chat.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Fatalf("removing a removed channel: %v", err)
	}
	r, det = e.wantAudit(org.ID, cloud.ActionNotifyRemoved, auditCLI, ct)
	wantDetails(t, r.Action, det, map[string]any{"kind": "slack", "name": "ops chat", "target": "https://chat.example.com"})
	for _, rec := range e.auditOf(org.ID, cloud.AuditFilter{}) {
		if strings.Contains(string(rec.Details), "s3cr3t") || strings.Contains(string(rec.Details), "/hooks") {
			t.Errorf("%s keeps a chat URL's path: %s", rec.Action, rec.Details)
		}
	}
	if n := len(e.auditOf(org.ID, cloud.AuditFilter{})); n != 8 {
		t.Errorf("%d records, want 8", n)
	}
}

// testAuditRollouts: a rollout created (version, scope, waves), paused,
// resumed and canceled (rollout.updated with the action), a reboot
// requested (the command's id); the engine's steps, refused changes and a
// reboot already waiting have no record.
func testAuditRollouts(t *testing.T, open Opener) {
	e, org, devs := newFleet(t, open, 3)
	e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{DeviceIDs: []string{devs[2].ID}}})
	e.advance()
	e.wantNoAudit(org.ID, "a rollout created and stepped without an actor", cloud.AuditFilter{})

	key := e.acting(auditKey)
	ro := key.Store.Rollouts()
	if _, err := ro.CreateRollout(key.ctx, org.ID, resource.NewRollout{Version: "9.9.9"}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("a rollout of no release: %v", err)
	}
	e.wantNoAudit(org.ID, "a refused rollout", cloud.AuditFilter{})
	r2, err := ro.CreateRollout(key.ctx, org.ID, resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{DeviceIDs: []string{devs[0].ID, devs[1].ID}}, Waves: []int{50, 100}})
	if err != nil {
		t.Fatal(err)
	}
	rt := cloud.AuditTarget{Kind: cloud.TargetRollout, ID: r2.ID}
	r, det := e.wantAudit(org.ID, cloud.ActionRolloutCreated, auditKey, rt)
	wantDetails(t, r.Action, det, map[string]any{"version": "2.0.0", "scope.deviceIds": []string{devs[0].ID, devs[1].ID}, "devices": float64(2)})
	if w := asSlice(det["waves"]); len(w) != 2 || w[0] != float64(50) || w[1] != float64(100) {
		t.Errorf("waves %v", det["waves"])
	}
	e.advance()
	user := e.acting(auditUser)
	for _, act := range []string{"pause", "resume", "cancel"} {
		e.clock.Add(time.Second)
		if _, err := user.Store.Rollouts().ActRollout(user.ctx, org.ID, r2.ID, act); err != nil {
			t.Fatalf("%s: %v", act, err)
		}
	}
	if _, err := user.Store.Rollouts().ActRollout(user.ctx, org.ID, r2.ID, "resume"); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Fatalf("resuming a canceled rollout: %v", err)
	}
	recs := e.auditOf(org.ID, cloud.AuditFilter{Action: cloud.ActionRolloutChanged, TargetKind: cloud.TargetRollout, TargetID: r2.ID})
	var acts []string
	for _, rec := range recs {
		if rec.Actor.ID != auditUser.ID {
			t.Errorf("%s by %+v", rec.Action, rec.Actor)
		}
		a, _ := decodeDetails(t, rec)["action"].(string)
		acts = append(acts, a)
	}
	if !slices.Equal(acts, []string{"cancel", "resume", "pause"}) {
		t.Errorf("rollout.updated actions, newest first: %v", acts)
	}

	// A reboot.
	cli := e.acting(auditCLI)
	e.agent(devs[2], "2.0.0", "amd64")
	acc, err := cli.Store.Rollouts().RebootDevice(cli.ctx, org.ID, devs[2].ID)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := cli.Store.Rollouts().RebootDevice(cli.ctx, org.ID, devs[2].ID); err != nil || again.CommandID != acc.CommandID {
		t.Fatalf("a reboot requested again: %+v, %v", again, err)
	}
	if _, err := cli.Store.Rollouts().RebootDevice(cli.ctx, org.ID, "nosuchdevice"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Fatalf("rebooting an unknown device: %v", err)
	}
	r, det = e.wantAudit(org.ID, cloud.ActionDeviceReboot, auditCLI, cloud.AuditTarget{Kind: cloud.TargetDevice, ID: devs[2].ID})
	wantDetails(t, r.Action, det, map[string]any{"commandId": acc.CommandID})
	if n := len(e.auditOf(org.ID, cloud.AuditFilter{})); n != 5 {
		t.Errorf("%d records, want 5", n)
	}
}

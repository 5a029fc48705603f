package storetest

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Rollouts and device commands (issue 28): the rollout service, the
// command store and the engine's step, as the API, the agent endpoint and
// the relay's engine loop use them.

// release adds a release of version for arch to the organization.
func (e *env) release(orgID, version, arch string) cloud.Release {
	e.t.Helper()
	data, sig := ReleaseBinary(e.t, 4096)
	return Release(e.t, e.Store.Releases(), cloud.NewRelease{OrgID: orgID, Version: version, Arch: arch, Signature: sig}, data)
}

// agent connects d's agent (a new session) announcing version and arch,
// as after a start or an update, and returns the session.
func (e *env) agent(d device, version, arch string) string {
	e.t.Helper()
	return Connect(e.t, e.Agent, e.auth(d), e.clock.Now(), protocol.Hello{AgentVersion: version, Arch: arch})
}

// newFleet is a store with the organization acme, its release 2.0.0 for
// amd64, and n of its devices running 1.0.0 on amd64 (fleet).
func newFleet(t *testing.T, open Opener, n int) (*env, cloud.Org, []device) {
	e := newEnv(t, open)
	org := e.org("acme")
	e.release(org.ID, "2.0.0", "amd64")
	return e, org, e.fleet(org.ID, n, "1.0.0", "amd64")
}

// fleet adds n devices of orgID, each connected with version and arch,
// sorted by id (the order of a rollout's waves).
func (e *env) fleet(orgID string, n int, version, arch string) []device {
	e.t.Helper()
	var out []device
	for range n {
		d := e.device(orgID, "IG-500")
		e.agent(d, version, arch)
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b device) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (e *env) createRollout(orgID string, nr resource.NewRollout) resource.RolloutDetail {
	e.t.Helper()
	r, err := e.Store.Rollouts().CreateRollout(e.ctx, orgID, nr)
	if err != nil {
		e.t.Fatalf("CreateRollout(%+v): %v", nr, err)
	}
	return r
}

func (e *env) rollout(orgID, id string) resource.RolloutDetail {
	e.t.Helper()
	r, err := e.Store.Rollouts().Rollout(e.ctx, orgID, id)
	if err != nil {
		e.t.Fatalf("Rollout(%s): %v", id, err)
	}
	return r
}

// advance runs one step of the rollout engine at the clock's time and
// returns the devices given commands, sorted.
func (e *env) advance() []string {
	e.t.Helper()
	got, err := e.Commands.AdvanceRollouts(e.ctx, e.clock.Now())
	if err != nil {
		e.t.Fatalf("AdvanceRollouts: %v", err)
	}
	slices.Sort(got)
	return got
}

// commands returns d's pending commands.
func (e *env) commands(d device) []protocol.Command {
	e.t.Helper()
	got, err := e.Commands.PendingCommands(e.ctx, e.auth(d))
	if err != nil {
		e.t.Fatalf("PendingCommands(%s): %v", d.ID, err)
	}
	return got
}

// command returns d's one pending command.
func (e *env) command(d device) protocol.Command {
	e.t.Helper()
	got := e.commands(d)
	if len(got) != 1 {
		e.t.Fatalf("%s has commands %+v, want one", d.ID, got)
	}
	return got[0]
}

// reportCommand stores d's agent's report of command id at the clock's time.
func (e *env) reportCommand(d device, id, state, msg string) {
	e.t.Helper()
	if err := e.Commands.CommandStatus(e.ctx, e.auth(d), protocol.CommandStatus{ID: id, State: state, Error: msg}, e.clock.Now()); err != nil {
		e.t.Fatalf("CommandStatus(%s %s): %v", id, state, err)
	}
}

// update takes d through its pending update as its agent does: download,
// install, the new binary connecting with the order's version, healthy.
func (e *env) update(d device, arch string) {
	e.t.Helper()
	c := e.command(d)
	if c.Kind != protocol.CommandUpdate || c.Update == nil {
		e.t.Fatalf("%s: command %+v is no update", d.ID, c)
	}
	e.reportCommand(d, c.ID, protocol.CommandAccepted, "")
	e.reportCommand(d, c.ID, protocol.CommandDownloading, "")
	e.reportCommand(d, c.ID, protocol.CommandInstalling, "")
	e.agent(d, c.Update.Version, arch)
	e.reportCommand(d, c.ID, protocol.CommandHealthy, "")
}

// deviceStates returns the rollout's devices' states in id order.
func deviceStates(r resource.RolloutDetail) []string {
	devs := slices.Clone(r.Devices)
	slices.SortFunc(devs, func(a, b resource.RolloutDevice) int { return strings.Compare(a.DeviceID, b.DeviceID) })
	var out []string
	for _, d := range devs {
		out = append(out, d.State)
	}
	return out
}

func deviceIDs(ds ...device) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	slices.Sort(out)
	return out
}

// testRolloutWaves: waves of 1 device, 50% and 100% of 4 devices start one
// after the other as their devices report healthy, each device given an
// update order for its architecture's release; the device shows UPDATING
// while it downloads and installs; a device already on the version is
// healthy at once; the rollout completes after its last wave.
func testRolloutWaves(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	amd, arm := e.release(org.ID, "2.0.0", "amd64"), e.release(org.ID, "2.0.0", "arm64")
	ds := e.fleet(org.ID, 4, "1.0.0", "amd64")
	e.agent(ds[1], "1.0.0", "arm64")
	e.agent(ds[3], "2.0.0", "amd64")
	if got := e.deviceRow(org.ID, ds[3].ID).AgentVersion; got != "2.0.0" {
		t.Errorf("agentVersion = %q", got)
	}
	r := e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", Waves: []int{1, 50, 100}})
	if r.State != resource.RolloutRunning || r.Total != 4 || r.Counts[resource.RolloutDevicePending] != 4 || r.Wave != 0 ||
		r.MaxFailures != 0 || r.HealthFor != "2m" || !slices.Equal(r.Waves, []int{1, 50, 100}) || r.Reason != nil {
		t.Fatalf("created %+v", r.Rollout)
	}
	var waves []int
	for _, d := range r.Devices {
		waves = append(waves, d.Wave)
		if d.DeviceName != "dev" || d.FromVersion != "" || d.Error != nil {
			t.Errorf("device %+v", d)
		}
	}
	if !slices.Equal(waves, []int{0, 1, 2, 2}) {
		t.Errorf("waves of the devices %v", waves)
	}
	for _, d := range ds {
		if c := e.commands(d); len(c) != 0 {
			t.Errorf("%s given %+v before the engine's step", d.ID, c)
		}
	}

	if got := e.advance(); !slices.Equal(got, deviceIDs(ds[0])) {
		t.Fatalf("first wave sent to %v", got)
	}
	c := e.command(ds[0])
	want := protocol.UpdateOrder{RolloutID: r.ID, ReleaseID: amd.ID, Version: "2.0.0", Path: protocol.ReleasePath(amd.ID), Size: amd.Size,
		SHA256: amd.SHA256, Signature: amd.Signature, HealthFor: protocol.Duration{Duration: 2 * time.Minute}}
	if c.Kind != protocol.CommandUpdate || c.ID == "" || c.Update == nil || *c.Update != want {
		t.Fatalf("update command %+v, want order %+v", c, want)
	}
	if got := e.advance(); len(got) != 0 {
		t.Errorf("a step with the first wave running sent %v", got)
	}
	e.reportCommand(ds[0], c.ID, protocol.CommandDownloading, "")
	if dd := e.deviceRow(org.ID, ds[0].ID); dd.Status != resource.StatusUpdating {
		t.Errorf("status while downloading %s", dd.Status)
	}
	if got := deviceStates(e.rollout(org.ID, r.ID)); got[0] != resource.RolloutDeviceDownloading {
		t.Errorf("states %v", got)
	}
	e.clock.Add(time.Second)
	e.reportCommand(ds[0], c.ID, protocol.CommandInstalling, "")
	e.agent(ds[0], "2.0.0", "amd64")
	if got := e.advance(); len(got) != 0 {
		t.Errorf("a step before the healthy report sent %v", got)
	}
	e.reportCommand(ds[0], c.ID, protocol.CommandHealthy, "")
	if got := e.statusChanges(ds[0]); !slices.Contains(got, "ONLINE>UPDATING INFO +0s") || !slices.Contains(got, "UPDATING>CONNECTING INFO +1s") {
		t.Errorf("status changes %v", got)
	}
	if cs := e.commands(ds[0]); len(cs) != 0 {
		t.Errorf("pending after healthy: %+v", cs)
	}

	// Second wave: the arm64 device gets the arm64 release.
	if got := e.advance(); !slices.Equal(got, deviceIDs(ds[1])) {
		t.Fatalf("second wave sent to %v", got)
	}
	if c := e.command(ds[1]); c.Update.ReleaseID != arm.ID || c.Update.Path != protocol.ReleasePath(arm.ID) || c.Update.SHA256 != arm.SHA256 {
		t.Errorf("arm64 order %+v", c.Update)
	}
	if got := e.rollout(org.ID, r.ID); got.Wave != 1 || got.Counts[resource.RolloutDeviceHealthy] != 1 || got.Counts[resource.RolloutDevicePending] != 3 {
		t.Errorf("during the second wave %+v", got.Rollout)
	}
	e.update(ds[1], "arm64")

	// Last wave: ds[3] already runs 2.0.0.
	if got := e.advance(); !slices.Equal(got, deviceIDs(ds[2])) {
		t.Fatalf("last wave sent to %v", got)
	}
	if got := deviceStates(e.rollout(org.ID, r.ID)); !slices.Equal(got, []string{"healthy", "healthy", "pending", "healthy"}) {
		t.Errorf("states in the last wave %v", got)
	}
	e.update(ds[2], "amd64")
	if got := e.advance(); len(got) != 0 {
		t.Errorf("the step after the last wave sent %v", got)
	}
	got := e.rollout(org.ID, r.ID)
	if got.State != resource.RolloutCompleted || got.Wave != 2 || got.Counts[resource.RolloutDeviceHealthy] != 4 || got.Total != 4 {
		t.Errorf("after the last wave %+v", got.Rollout)
	}
	from := map[string]string{}
	for _, d := range got.Devices {
		from[d.DeviceID] = d.FromVersion
	}
	if from[ds[0].ID] != "1.0.0" || from[ds[3].ID] != "2.0.0" {
		t.Errorf("fromVersion %v", from)
	}
	for _, d := range ds {
		if dd := e.deviceRow(org.ID, d.ID); dd.AgentVersion != "2.0.0" || dd.Status != resource.StatusOnline {
			t.Errorf("%s at the end: %s %s", d.ID, dd.AgentVersion, dd.Status)
		}
	}
	if got := e.advance(); len(got) != 0 {
		t.Errorf("a completed rollout sent %v", got)
	}
}

// testRolloutStops: failures within maxFailures go on (a device that
// reports no architecture fails at once, one reporting healthy on the old
// version fails); one more stops the rollout with its reason, the devices
// of later waves staying pending and sent nothing.
func testRolloutStops(t *testing.T, open Opener) {
	e, org, ds := newFleet(t, open, 4)
	e.agent(ds[0], "1.0.0", "")
	one := 1
	r := e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", Waves: []int{50, 75, 100}, MaxFailures: &one, HealthFor: "30s"})
	if got := e.advance(); !slices.Equal(got, deviceIDs(ds[1])) {
		t.Fatalf("first wave sent to %v", got)
	}
	d0 := e.rollout(org.ID, r.ID).Devices[0]
	if d0.State != resource.RolloutDeviceFailed || d0.Error == nil || *d0.Error != cloud.RolloutNoArch {
		t.Errorf("device without an architecture %+v", d0)
	}
	c := e.command(ds[1])
	e.reportCommand(ds[1], c.ID, protocol.CommandHealthy, "") // still on 1.0.0
	if got := e.advance(); len(got) != 0 {
		t.Errorf("the step after too many failures sent %v", got)
	}
	got := e.rollout(org.ID, r.ID)
	if got.State != resource.RolloutStopped || got.Reason == nil || *got.Reason != "2 devices failed, more than maxFailures 1" {
		t.Errorf("healthy on the old version: %+v", got.Rollout)
	}
	if d := got.Devices[1]; d.State != resource.RolloutDeviceFailed || d.Error == nil || !strings.Contains(*d.Error, `reported healthy on version "1.0.0"`) {
		t.Errorf("device healthy on the old version %+v", d)
	}
	if got := e.advance(); len(got) != 0 {
		t.Errorf("a stopped rollout sent %v", got)
	}
	if got := deviceStates(e.rollout(org.ID, r.ID)); !slices.Equal(got, []string{"failed", "failed", "pending", "pending"}) {
		t.Errorf("states %v", got)
	}
	for _, d := range ds[2:] {
		if cs := e.commands(d); len(cs) != 0 {
			t.Errorf("pending device of a stopped rollout has %+v", cs)
		}
	}
	for _, action := range []string{"pause", "resume"} {
		if _, err := e.Store.Rollouts().ActRollout(e.ctx, org.ID, r.ID, action); cloud.ErrorCode(err) != cloud.ECONFLICT {
			t.Errorf("%s a stopped rollout: %v", action, err)
		}
	}

	// A rolled-back device counts as a failure too, the engine stopping
	// the rollout at its next step.
	x := e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{DeviceIDs: []string{ds[3].ID, ds[2].ID}}})
	if got := e.advance(); !slices.Equal(got, deviceIDs(ds[2], ds[3])) {
		t.Fatalf("sent %v", got)
	}
	c = e.command(ds[2])
	e.reportCommand(ds[2], c.ID, protocol.CommandDownloading, "")
	e.reportCommand(ds[2], c.ID, protocol.CommandRolledBack, "new agent never connected")
	if got := e.statusChanges(ds[2]); !slices.Contains(got, "ONLINE>UPDATING INFO +0s") || !slices.Contains(got, "UPDATING>ONLINE INFO +0s") {
		t.Errorf("status changes of a rolled-back update %v", got)
	}
	e.reportCommand(ds[2], c.ID, protocol.CommandHealthy, "") // after the end: ignored
	e.advance()
	got = e.rollout(org.ID, x.ID)
	if got.State != resource.RolloutStopped || *got.Reason != "1 device failed, more than maxFailures 0" || got.Counts[resource.RolloutDeviceRolledBack] != 1 {
		t.Errorf("rolled back: %+v", got.Rollout)
	}
	for _, d := range got.Devices {
		if d.DeviceID == ds[2].ID && (d.Error == nil || *d.Error != "new agent never connected") {
			t.Errorf("rolled-back device %+v", d)
		}
	}
	// The other device's update was sent: it still runs, and another
	// rollout does not give the device a second one.
	c = e.command(ds[3])
	if c.Update == nil {
		t.Errorf("in-flight update of a stopped rollout: %+v", c)
	}
	y := e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{DeviceIDs: []string{ds[3].ID}}})
	if got := e.advance(); len(got) != 0 {
		t.Errorf("a device with an update under way sent another: %v", got)
	}
	if d := e.rollout(org.ID, y.ID).Devices[0]; d.State != resource.RolloutDeviceFailed || d.Error == nil || !strings.Contains(*d.Error, "another update") {
		t.Errorf("device with an update under way %+v", d)
	}
	if again := e.command(ds[3]); again.ID != c.ID {
		t.Errorf("pending %+v, want %s", again, c.ID)
	}
}

// testRolloutActions: pause stops new waves (the updates sent still count
// and finish), resume goes on, cancel skips the devices not started and
// the updates their agents did not take; other moves conflict.
func testRolloutActions(t *testing.T, open Opener) {
	e, org, ds := newFleet(t, open, 6)
	svc := e.Store.Rollouts()
	r := e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", Waves: []int{33, 66, 100}})
	if got := e.advance(); !slices.Equal(got, deviceIDs(ds[0], ds[1])) {
		t.Fatalf("first wave sent to %v", got)
	}
	p, err := svc.ActRollout(e.ctx, org.ID, r.ID, "pause")
	if err != nil || p.State != resource.RolloutPaused {
		t.Fatalf("pause: %+v %v", p.Rollout, err)
	}
	if _, err := svc.ActRollout(e.ctx, org.ID, r.ID, "pause"); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("pause a paused rollout: %v", err)
	}
	if _, err := svc.ActRollout(e.ctx, org.ID, r.ID, "restart"); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("unknown action: %v", err)
	}
	e.update(ds[0], "amd64")
	e.update(ds[1], "amd64")
	if got := e.advance(); len(got) != 0 {
		t.Errorf("a paused rollout sent %v", got)
	}
	if got := e.rollout(org.ID, r.ID); got.State != resource.RolloutPaused || got.Counts[resource.RolloutDeviceHealthy] != 2 || got.Wave != 0 {
		t.Errorf("paused %+v", got.Rollout)
	}
	if p, err := svc.ActRollout(e.ctx, org.ID, r.ID, "resume"); err != nil || p.State != resource.RolloutRunning {
		t.Fatalf("resume: %+v %v", p.Rollout, err)
	}
	if _, err := svc.ActRollout(e.ctx, org.ID, r.ID, "resume"); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("resume a running rollout: %v", err)
	}
	if got := e.advance(); !slices.Equal(got, deviceIDs(ds[2], ds[3])) {
		t.Fatalf("second wave sent to %v", got)
	}
	taken := e.command(ds[2])
	e.reportCommand(ds[2], taken.ID, protocol.CommandAccepted, "")
	c, err := svc.ActRollout(e.ctx, org.ID, r.ID, "cancel")
	if err != nil || c.State != resource.RolloutCanceled {
		t.Fatalf("cancel: %+v %v", c.Rollout, err)
	}
	if got := deviceStates(c); !slices.Equal(got, []string{"healthy", "healthy", "pending", "skipped", "skipped", "skipped"}) {
		t.Errorf("canceled: states %v", got)
	}
	if cs := e.commands(ds[3]); len(cs) != 0 {
		t.Errorf("an update not taken is still sent after cancel: %+v", cs)
	}
	if cs := e.commands(ds[2]); len(cs) != 1 || cs[0].ID != taken.ID {
		t.Errorf("the update taken is not sent any more: %+v", cs)
	}
	e.reportCommand(ds[2], taken.ID, protocol.CommandDownloading, "")
	e.reportCommand(ds[2], taken.ID, protocol.CommandInstalling, "")
	e.agent(ds[2], "2.0.0", "amd64")
	e.reportCommand(ds[2], taken.ID, protocol.CommandHealthy, "")
	if got := e.advance(); len(got) != 0 {
		t.Errorf("a canceled rollout sent %v", got)
	}
	got := e.rollout(org.ID, r.ID)
	if got.State != resource.RolloutCanceled || got.Counts[resource.RolloutDeviceHealthy] != 3 || got.Counts[resource.RolloutDeviceSkipped] != 3 {
		t.Errorf("canceled at the end %+v", got.Rollout)
	}
	for _, action := range []string{"pause", "resume", "cancel"} {
		if _, err := svc.ActRollout(e.ctx, org.ID, r.ID, action); cloud.ErrorCode(err) != cloud.ECONFLICT {
			t.Errorf("%s a canceled rollout: %v", action, err)
		}
	}
}

// testRolloutTimeout: a device not healthy within healthFor and
// cloud.RolloutDownloadGrace of being sent its update fails, its command
// no longer sent, a later report changing nothing.
func testRolloutTimeout(t *testing.T, open Opener) {
	e, org, ds := newFleet(t, open, 2)
	five := 5
	r := e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", MaxFailures: &five, HealthFor: "10s"})
	sent := e.clock.Now()
	if got := e.advance(); len(got) != 2 {
		t.Fatalf("sent %v", got)
	}
	c0 := e.command(ds[0])
	e.reportCommand(ds[0], c0.ID, protocol.CommandDownloading, "")
	e.clock.Set(sent.Add(10*time.Second + cloud.RolloutDownloadGrace - time.Millisecond))
	e.advance()
	if got := deviceStates(e.rollout(org.ID, r.ID)); !slices.Equal(got, []string{"downloading", "pending"}) {
		t.Errorf("just before the deadline %v", got)
	}
	e.clock.Add(time.Millisecond)
	e.advance()
	got := e.rollout(org.ID, r.ID)
	for _, d := range got.Devices {
		if d.State != resource.RolloutDeviceFailed || d.Error == nil || !strings.HasPrefix(*d.Error, "no report within 10m10s") {
			t.Errorf("device past its deadline %+v", d)
		}
	}
	if got.State != resource.RolloutCompleted || got.Counts[resource.RolloutDeviceFailed] != 2 {
		t.Errorf("rollout whose devices all failed within maxFailures %+v", got.Rollout)
	}
	for _, d := range ds {
		if cs := e.commands(d); len(cs) != 0 {
			t.Errorf("timed-out update still sent %+v", cs)
		}
	}
	e.agent(ds[0], "2.0.0", "amd64")
	e.reportCommand(ds[0], c0.ID, protocol.CommandHealthy, "")
	if got := deviceStates(e.rollout(org.ID, r.ID)); !slices.Equal(got, []string{"failed", "failed"}) {
		t.Errorf("a report after the deadline changed %v", got)
	}
}

// testRolloutCreate: CreateRollout names the field of what the store
// checks (no release of the version, an unknown device, a scope matching
// none); tags scope the devices holding every one; rollouts are listed
// newest first, keyset-paginated.
func testRolloutCreate(t *testing.T, open Opener) {
	e, org, ds := newFleet(t, open, 3)
	for _, d := range ds[:2] {
		if _, err := e.Store.Devices().PatchDevice(e.ctx, org.ID, d.ID, cloud.DevicePatch{Tags: &[]string{"line-3", "site:north"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Store.Devices().PatchDevice(e.ctx, org.ID, ds[2].ID, cloud.DevicePatch{Tags: &[]string{"line-3"}}); err != nil {
		t.Fatal(err)
	}
	svc := e.Store.Rollouts()
	for _, tc := range []struct {
		nr    resource.NewRollout
		field string
	}{
		{resource.NewRollout{Version: "3.0.0"}, "version"},
		{resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{DeviceIDs: []string{ds[0].ID, "nosuchdevice"}}}, "scope.deviceIds[1]"},
		{resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{Tags: []string{"line-4"}}}, "scope"},
		{resource.NewRollout{Version: "2.0.0", Waves: []int{50}}, "waves"},
	} {
		if _, err := svc.CreateRollout(e.ctx, org.ID, tc.nr); cloud.ErrorCode(err) != cloud.EINVALID || !strings.HasPrefix(cloud.ErrorMessage(err), tc.field+":") {
			t.Errorf("CreateRollout(%+v) = %v, want EINVALID naming %s", tc.nr, err, tc.field)
		}
	}
	var made []string
	r := e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{Tags: []string{"site:north", "line-3"}}})
	if r.Total != 2 || !slices.Equal([]string{r.Devices[0].DeviceID, r.Devices[1].DeviceID}, deviceIDs(ds[0], ds[1])) ||
		!slices.Equal(r.Scope.Tags, []string{"line-3", "site:north"}) {
		t.Errorf("tag scope: %+v", r)
	}
	made = append(made, r.ID)
	for range 4 {
		e.clock.Add(time.Millisecond)
		made = append(made, e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{DeviceIDs: []string{ds[2].ID}}}).ID)
	}
	slices.Reverse(made)
	got := walk(t, 2, func(cursor string) ([]string, resource.Pagination, error) {
		l, err := svc.ListRollouts(e.ctx, org.ID, cloud.Page{Limit: 2, Cursor: cursor})
		var out []string
		for _, r := range l.Data {
			out = append(out, r.ID)
			if r.Total == 0 || r.Counts[resource.RolloutDevicePending] != r.Total {
				t.Errorf("listed %+v", r)
			}
		}
		return out, l.Pagination, err
	})
	if !slices.Equal(got, made) {
		t.Errorf("listed %v, want newest first %v", got, made)
	}
	if _, err := svc.ListRollouts(e.ctx, org.ID, cloud.Page{Cursor: "nosuchrollout"}); cloud.ErrorCode(err) != cloud.ECURSOR {
		t.Errorf("unknown cursor: %v", err)
	}
}

// testRolloutIsolation: another organization neither sees nor moves a
// rollout, cannot name its devices or its releases, and a rollout of every
// device of an organization reaches only its own.
func testRolloutIsolation(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org, other := e.org("acme"), e.org("other")
	e.release(org.ID, "2.0.0", "amd64")
	ds := e.fleet(org.ID, 2, "1.0.0", "amd64")
	theirs := e.fleet(other.ID, 1, "1.0.0", "amd64")
	r := e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0"})
	if r.Total != 2 {
		t.Errorf("rollout of every device: %+v", r)
	}
	svc := e.Store.Rollouts()
	if _, err := svc.Rollout(e.ctx, other.ID, r.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("another organization reads the rollout: %v", err)
	}
	for _, action := range []string{"pause", "cancel"} {
		if _, err := svc.ActRollout(e.ctx, other.ID, r.ID, action); cloud.ErrorCode(err) != cloud.ENOTFOUND {
			t.Errorf("another organization can %s the rollout: %v", action, err)
		}
	}
	if l, err := svc.ListRollouts(e.ctx, other.ID, cloud.Page{}); err != nil || len(l.Data) != 0 {
		t.Errorf("another organization lists %+v, %v", l.Data, err)
	}
	if _, err := svc.CreateRollout(e.ctx, other.ID, resource.NewRollout{Version: "2.0.0"}); cloud.ErrorCode(err) != cloud.EINVALID ||
		!strings.HasPrefix(cloud.ErrorMessage(err), "version:") {
		t.Errorf("another organization rolls out acme's release: %v", err)
	}
	e.release(other.ID, "2.0.0", "amd64")
	if _, err := svc.CreateRollout(e.ctx, other.ID, resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{DeviceIDs: []string{ds[0].ID}}}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("another organization names acme's device: %v", err)
	}
	if got := e.advance(); !slices.Equal(got, deviceIDs(ds...)) {
		t.Errorf("sent %v", got)
	}
	if cs := e.commands(theirs[0]); len(cs) != 0 {
		t.Errorf("another organization's device given %+v", cs)
	}
	// Another device's command id is not its to report.
	c := e.command(ds[0])
	e.reportCommand(theirs[0], c.ID, protocol.CommandFailed, "not mine")
	e.reportCommand(ds[1], c.ID, protocol.CommandFailed, "not mine")
	if got := deviceStates(e.rollout(org.ID, r.ID)); !slices.Equal(got, []string{"pending", "pending"}) {
		t.Errorf("a report of another device's command changed %v", got)
	}
	e.reportCommand(ds[0], "nosuchcommand", protocol.CommandFailed, "")
}

// testRolloutConcurrentSteps: two relays stepping the engine at once start
// each wave once: every device is given one command.
func testRolloutConcurrentSteps(t *testing.T, open Opener) {
	e, org, ds := newFleet(t, open, 9)
	e2 := e.reopen()
	for round := range 3 {
		three := ds[round*3 : round*3+3]
		e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{DeviceIDs: deviceIDs(three[:2]...)}})
		e.createRollout(org.ID, resource.NewRollout{Version: "2.0.0", Scope: resource.RolloutScope{DeviceIDs: deviceIDs(three[2])}})
		var mu sync.Mutex
		var sent []string
		concurrently(4, func(i int) {
			s := []*env{e, e2}[i%2]
			got, err := s.Commands.AdvanceRollouts(s.ctx, s.clock.Now())
			if err != nil {
				t.Errorf("AdvanceRollouts: %v", err)
			}
			mu.Lock()
			sent = append(sent, got...)
			mu.Unlock()
		})
		slices.Sort(sent)
		if want := deviceIDs(three...); !slices.Equal(sent, want) {
			t.Errorf("round %d: concurrent steps sent %v, want each of %v once", round, sent, want)
		}
		for _, d := range three {
			if cs := e.commands(d); len(cs) != 1 {
				t.Errorf("round %d: %s has %d commands", round, d.ID, len(cs))
			}
		}
	}
}

// commandsHeard records the devices a CommandsObserver heard of.
type commandsHeard struct{ rulesHeard }

func (h *commandsHeard) CommandsChanged(deviceID string) { h.RulesChanged(deviceID) }

// testRebootCommand: a reboot is queued for a connected device and heard
// of, answered again while it waits, sent until the agent reports
// rebooting (the device REBOOTING then), refused for a device not
// connected, and expires after cloud.RebootExpiry.
func testRebootCommand(t *testing.T, open Opener) {
	e := newEnv(t, open)
	heard := &commandsHeard{}
	e.Store.ObserveCommands(heard)
	org, other := e.org("acme"), e.org("other")
	ds := e.fleet(org.ID, 2, "1.0.0", "amd64")
	d := ds[0]
	svc := e.Store.Rollouts()
	a, err := svc.RebootDevice(e.ctx, org.ID, d.ID)
	if err != nil || a.CommandID == "" || a.DeviceID != d.ID {
		t.Fatalf("RebootDevice: %+v %v", a, err)
	}
	if again, err := svc.RebootDevice(e.ctx, org.ID, d.ID); err != nil || again != a {
		t.Errorf("reboot again: %+v %v, want %+v", again, err, a)
	}
	if got := heard.take(); !slices.Equal(got, []string{d.ID}) {
		t.Errorf("observer heard %v", got)
	}
	if c := e.command(d); c.ID != a.CommandID || c.Kind != protocol.CommandReboot || c.Update != nil {
		t.Errorf("pending %+v", c)
	}
	if cs := e.commands(ds[1]); len(cs) != 0 {
		t.Errorf("another device given %+v", cs)
	}
	for _, tc := range []struct {
		org, dev string
		code     string
	}{{other.ID, d.ID, cloud.ENOTFOUND}, {org.ID, "nosuchdevice", cloud.ENOTFOUND}} {
		if _, err := svc.RebootDevice(e.ctx, tc.org, tc.dev); cloud.ErrorCode(err) != tc.code {
			t.Errorf("RebootDevice(%s, %s) = %v, want %s", tc.org, tc.dev, err, tc.code)
		}
	}
	e.reportCommand(d, a.CommandID, protocol.CommandDownloading, "") // not a reboot's state
	e.reportCommand(d, a.CommandID, protocol.CommandAccepted, "")
	if dd := e.deviceRow(org.ID, d.ID); dd.Status != resource.StatusOnline {
		t.Errorf("status after a reboot's accepted: %s", dd.Status)
	}
	e.clock.Add(time.Second)
	e.reportCommand(d, a.CommandID, protocol.CommandRebooting, "")
	if dd := e.deviceRow(org.ID, d.ID); dd.Status != resource.StatusRebooting {
		t.Errorf("status after rebooting: %s", dd.Status)
	}
	if got := e.statusChanges(d); got[len(got)-1] != "ONLINE>REBOOTING INFO +1s" {
		t.Errorf("status changes %v", got)
	}
	if cs := e.commands(d); len(cs) != 0 {
		t.Errorf("a reboot under way is still sent: %+v", cs)
	}
	if _, err := svc.RebootDevice(e.ctx, org.ID, d.ID); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("reboot a REBOOTING device: %v", err)
	}
	off := ds[1]
	Offline(t, e.Agent, e.auth(off), e.clock.Now(), time.Minute)
	if _, err := svc.RebootDevice(e.ctx, org.ID, off.ID); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("reboot an OFFLINE device: %v", err)
	}

	// Back online; a reboot never taken expires.
	e.agent(d, "1.0.0", "amd64")
	b, err := svc.RebootDevice(e.ctx, org.ID, d.ID)
	if err != nil || b.CommandID == a.CommandID {
		t.Fatalf("second reboot: %+v %v", b, err)
	}
	e.clock.Add(cloud.RebootExpiry - time.Millisecond)
	e.advance()
	if c := e.command(d); c.ID != b.CommandID {
		t.Errorf("pending just before expiry %+v", c)
	}
	e.clock.Add(time.Millisecond)
	if cs := e.commands(d); len(cs) != 0 {
		t.Errorf("an expired reboot is sent: %+v", cs)
	}
	e.advance()
	c, err := svc.RebootDevice(e.ctx, org.ID, d.ID)
	if err != nil || c.CommandID == b.CommandID {
		t.Errorf("reboot after expiry: %+v %v (expired %s)", c, err, b.CommandID)
	}
	if cs := e.commands(d); len(cs) != 1 || cs[0].ID != c.CommandID {
		t.Errorf("pending %+v, want %s", cs, c.CommandID)
	}
	if got := heard.take(); !slices.Equal(got, []string{d.ID, d.ID}) {
		t.Errorf("observer heard %v", got)
	}
}

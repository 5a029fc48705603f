package storetest

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

type configLog struct {
	mu      sync.Mutex
	devices []string
}

func (l *configLog) DesiredConfigChanged(id string) {
	l.mu.Lock()
	l.devices = append(l.devices, id)
	l.mu.Unlock()
}

func (l *configLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.devices...)
}

func rs485Config(baud int) serialcfg.Config {
	return serialcfg.Config{Kind: "rs485", RS485: &serialcfg.RS485{Kind: "rs485", BaudRate: baud, DataBits: 8, Parity: "even", StopBits: 1, Mode: "modbus_rtu_master", SlaveID: 7,
		Tx: serialcfg.RS485Tx{Enabled: true, IntervalMs: 1000, Register: 40, Value: 1}}}
}

// report stores a heartbeat of session carrying channel states: the
// device's every channel, those of chans as given and the others as
// reported before (as the agent endpoint hands them to the store).
func (e *env) report(d device, session string, at time.Time, chans ...protocol.ChannelState) {
	e.t.Helper()
	dev := e.auth(d)
	dev.Status = resource.StatusOnline
	if e.reported == nil {
		e.reported = map[string][]protocol.ChannelState{}
	}
	all := agentlink.MergeChannels(e.reported[d.ID], chans)
	_, err := e.heartbeat(agentlink.HeartbeatIn{Device: dev, Session: session, At: at, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline,
		Channels: all, HasChannels: true})
	if err != nil {
		e.t.Fatal(err)
	}
	e.reported[d.ID] = all
}

// desired returns the device's desired configuration as the agent
// endpoint sends it.
func (e *env) desired(d device) protocol.Config {
	e.t.Helper()
	cfg, ok, err := e.Agent.DesiredConfig(e.ctx, d.ref())
	if err != nil || !ok {
		e.t.Fatalf("desired config of %s: %v %v", d.ID, ok, err)
	}
	return cfg
}

func channelConfig(cfg protocol.Config, id string) serialcfg.Config {
	for _, c := range cfg.Channels {
		if c.ID == id {
			return c.Config
		}
	}
	return serialcfg.Config{}
}

func testSerialDefaults(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	svc := e.Store.Serial()
	st, err := svc.Serial(e.ctx, org.ID, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	model := catalog.MustLookup("IG-500")
	if st.DeviceID != d.ID || !st.Enabled || st.Mode != "managed" || st.Forwarding.WebhookURL != nil || st.Forwarding.WebhookEnabled || st.TelemetryAt != nil {
		t.Errorf("state = %+v", st)
	}
	if len(st.Channels) != len(model.Channels) {
		t.Fatalf("%d channels, want %d", len(st.Channels), len(model.Channels))
	}
	for i, c := range st.Channels {
		mc := model.Channels[i]
		def, _ := json.Marshal(mc.DefaultConfig())
		got, _ := json.Marshal(c.Config)
		if c.ID != mc.ID || c.Group != mc.Group || c.Label != mc.Label || !c.Available || c.Configurable != mc.Configurable || string(got) != string(def) {
			t.Errorf("channel %d = %+v (config %s), want catalog %s with %s", i, c, got, mc.ID, def)
		}
		if c.Telemetry != (serialcfg.Telemetry{}) {
			t.Errorf("channel %s telemetry %+v before any report", c.ID, c.Telemetry)
		}
	}
	tel, err := svc.Telemetry(e.ctx, org.ID, d.ID)
	if err != nil || tel.At != nil || len(tel.Channels) != len(model.Channels) || tel.Channels[0].ID != "uart-1" {
		t.Errorf("telemetry = %+v, %v", tel, err)
	}
	cfg := e.desired(d)
	if cfg.Version != 0 || !cfg.Enabled || cfg.Mode != "managed" || len(cfg.Channels) != len(model.Channels) {
		t.Errorf("desired = %+v", cfg)
	}
	d100 := e.device(org.ID, "IG-100")
	if _, ok, err := e.Agent.DesiredConfig(e.ctx, d100.ref()); ok || err != nil {
		t.Errorf("IG-100 desired config: ok %v, %v", ok, err)
	}
}

func testSerialTelemetry(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	session := e.online(d, 30*time.Second)
	svc := e.Store.Serial()
	at := time.Date(2026, 4, 1, 8, 30, 0, 123e6, time.UTC)
	e.report(d, session, at,
		protocol.ChannelState{ID: "rs485-1", Available: true, Live: "17 42", TxOn: true},
		protocol.ChannelState{ID: "canfd-1", Available: true, Error: "bus-off"},
		protocol.ChannelState{ID: "rs485-2", Available: false},
		protocol.ChannelState{ID: "uart-1", Available: true, PassthroughAddress: "10.8.0.2:4001"})
	tel, err := svc.Telemetry(e.ctx, org.ID, d.ID)
	if err != nil || tel.At == nil || !tel.At.Equal(at) {
		t.Fatalf("telemetry at = %v, %v", tel.At, err)
	}
	byID := map[string]resource.ChannelTelemetry{}
	for _, c := range tel.Channels {
		byID[c.ID] = c
	}
	if c := byID["rs485-1"]; c.Live != "17 42" || !c.TxOn || c.Error != "" {
		t.Errorf("rs485-1 = %+v", c)
	}
	if c := byID["canfd-1"]; c.Error != "bus-off" {
		t.Errorf("canfd-1 = %+v", c)
	}
	ch, err := svc.Channel(e.ctx, org.ID, d.ID, "rs485-2")
	if err != nil || ch.Available {
		t.Errorf("rs485-2 available = %v, %v; want false as reported", ch.Available, err)
	}
	ch, err = svc.Channel(e.ctx, org.ID, d.ID, "uart-1")
	if err != nil || ch.PassthroughAddress == nil || *ch.PassthroughAddress != "10.8.0.2:4001" {
		t.Errorf("uart-1 = %+v, %v", ch, err)
	}
	ch, err = svc.Channel(e.ctx, org.ID, d.ID, "rs485-1")
	if err != nil || !ch.Available || ch.Telemetry.Live != "17 42" || ch.Config.Kind != "rs485" {
		t.Errorf("rs485-1 = %+v, %v", ch, err)
	}
	// A desired config survives a telemetry report and vice versa.
	if _, err := svc.PutChannel(e.ctx, org.ID, d.ID, "rs485-1", rs485Config(19200)); err != nil {
		t.Fatal(err)
	}
	e.report(d, session, at.Add(time.Second), protocol.ChannelState{ID: "rs485-1", Available: true, Live: "1 2"})
	ch, _ = svc.Channel(e.ctx, org.ID, d.ID, "rs485-1")
	if ch.Config.RS485 == nil || ch.Config.RS485.BaudRate != 19200 || ch.Telemetry.Live != "1 2" {
		t.Errorf("after put and report: %+v", ch)
	}
	if ch, _ := svc.Channel(e.ctx, org.ID, d.ID, "canfd-1"); ch.Telemetry.Error != "bus-off" {
		t.Errorf("a channel left out of a report lost its state: %+v", ch.Telemetry)
	}
	// The agent endpoint learns the stored channel states at the next hello.
	out, err := e.Agent.Hello(e.ctx, agentlink.HelloIn{Device: e.auth(d), Session: session, At: at.Add(2 * time.Second), HeartbeatInterval: 30 * time.Second,
		Deadline: at.Add(time.Minute)})
	if err != nil || out.DesiredVersion != 1 || len(out.Channels) != 4 {
		t.Errorf("hello = %+v, %v", out, err)
	}
}

func testPutChannel(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	other := e.org("other")
	d := e.device(org.ID, "IG-500")
	d300 := e.device(org.ID, "IG-300")
	d100 := e.device(org.ID, "IG-100")
	od := e.device(other.ID, "IG-500")
	e.report(d, e.online(d, 30*time.Second), t0, protocol.ChannelState{ID: "rs485-2", Available: false})
	log := &configLog{}
	e.Store.Observe(log, nil)
	svc := e.Store.Serial()
	bad := rs485Config(9600)
	bad.RS485.BaudRate = 9601
	for _, tc := range []struct {
		name    string
		org     string
		dev     string
		channel string
		cfg     serialcfg.Config
		code    string
	}{
		{"other org's device", org.ID, od.ID, "rs485-1", rs485Config(9600), cloud.ENOTFOUND},
		{"device seen from other org", other.ID, d.ID, "rs485-1", rs485Config(9600), cloud.ENOTFOUND},
		{"model without serial.io", org.ID, d100.ID, "rs485-1", rs485Config(9600), cloud.ECAPABILITY},
		{"unknown channel", org.ID, d.ID, "rs485-9", rs485Config(9600), cloud.ENOTFOUND},
		{"not configurable", org.ID, d300.ID, "gpio-2", serialcfg.Config{Kind: "gpio", GPIO: &serialcfg.GPIO{Kind: "gpio", Direction: "in", Pull: "up"}}, cloud.ENOTCONFIG},
		{"unavailable", org.ID, d.ID, "rs485-2", rs485Config(9600), cloud.EUNAVAILABLE},
		{"kind mismatch", org.ID, d.ID, "canfd-1", rs485Config(9600), cloud.EKIND},
		{"invalid value", org.ID, d.ID, "rs485-1", bad, cloud.EINVALID},
	} {
		if _, err := svc.PutChannel(e.ctx, tc.org, tc.dev, tc.channel, tc.cfg); cloud.ErrorCode(err) != tc.code {
			t.Errorf("%s: err = %v, want %s", tc.name, err, tc.code)
		}
	}
	if got := log.list(); len(got) != 0 {
		t.Errorf("observer told of %v after failed puts", got)
	}
	before := e.desired(d)
	res, err := svc.PutChannel(e.ctx, org.ID, d.ID, "rs485-1", rs485Config(38400))
	if err != nil {
		t.Fatal(err)
	}
	if res.DeviceID != d.ID || res.ChannelID != "rs485-1" || res.Config.RS485.BaudRate != 38400 {
		t.Errorf("result = %+v", res)
	}
	after := e.desired(d)
	if after.Version != before.Version+1 || channelConfig(after, "rs485-1").RS485.BaudRate != 38400 || channelConfig(after, "uart-1").UART == nil {
		t.Errorf("desired before %+v after %+v", before, after)
	}
	// Another handle (another relay) reads the same desired configuration.
	if again := e.reopen().desired(d); again.Version != after.Version || channelConfig(again, "rs485-1").RS485.BaudRate != 38400 {
		t.Errorf("desired through another handle: %+v", again)
	}
	if got := log.list(); len(got) != 1 || got[0] != d.ID {
		t.Errorf("observer told %v", got)
	}
	if o := e.desired(od); o.Version != 0 {
		t.Errorf("other device's version %d", o.Version)
	}
	for _, call := range []func() error{
		func() error { _, err := svc.Serial(e.ctx, org.ID, d100.ID); return err },
		func() error { _, err := svc.Telemetry(e.ctx, org.ID, d100.ID); return err },
		func() error { _, err := svc.Channel(e.ctx, org.ID, d100.ID, "rs485-1"); return err },
		func() error {
			m := "both"
			_, err := svc.PatchSerial(e.ctx, org.ID, d100.ID, cloud.SerialPatch{Mode: &m})
			return err
		},
	} {
		if err := call(); cloud.ErrorCode(err) != cloud.ECAPABILITY {
			t.Errorf("IG-100 serial route: err = %v, want capability_unavailable", err)
		}
	}
}

func testPatchSerial(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	log := &configLog{}
	e.Store.Observe(log, nil)
	svc := e.Store.Serial()
	str := func(s string) *string { return &s }
	yes := true
	for _, tc := range []struct {
		name string
		p    cloud.SerialPatch
		code string
	}{
		{"empty", cloud.SerialPatch{}, cloud.EINVALID},
		{"bad mode", cloud.SerialPatch{Mode: str("auto")}, cloud.EINVALID},
		{"http url", cloud.SerialPatch{WebhookURL: str("http://example.com/hook")}, cloud.EINVALID},
		{"credentials", cloud.SerialPatch{WebhookURL: str("https://user:pw@example.com/hook")}, cloud.EINVALID},
		{"not a url", cloud.SerialPatch{WebhookURL: str("https://")}, cloud.EINVALID},
	} {
		if _, err := svc.PatchSerial(e.ctx, org.ID, d.ID, tc.p); cloud.ErrorCode(err) != tc.code {
			t.Errorf("%s: err = %v, want %s", tc.name, err, tc.code)
		}
	}
	res, err := svc.PatchSerial(e.ctx, org.ID, d.ID, cloud.SerialPatch{Mode: str("both"), WebhookURL: str("https://hooks.example.com/fleet?x=1"), WebhookEnabled: &yes})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "both" || res.Forwarding.WebhookURL == nil || *res.Forwarding.WebhookURL != "https://hooks.example.com/fleet?x=1" || !res.Forwarding.WebhookEnabled {
		t.Errorf("result = %+v", res)
	}
	if org2, url, err := e.Outbox.Forwarding(e.ctx, d.ID); err != nil || org2 != org.ID || url != "https://hooks.example.com/fleet?x=1" {
		t.Errorf("Forwarding = %q %q %v", org2, url, err)
	}
	// Only the fields sent change; null clears the URL.
	res, err = svc.PatchSerial(e.ctx, org.ID, d.ID, cloud.SerialPatch{ClearWebhookURL: true})
	if err != nil || res.Mode != "both" || res.Forwarding.WebhookURL != nil || !res.Forwarding.WebhookEnabled {
		t.Errorf("after clear = %+v, %v", res, err)
	}
	if _, url, _ := e.Outbox.Forwarding(e.ctx, d.ID); url != "" {
		t.Errorf("forwarding without a URL: %q", url)
	}
	st, _ := svc.Serial(e.ctx, org.ID, d.ID)
	if st.Mode != "both" || st.Forwarding.WebhookURL != nil {
		t.Errorf("stored state %+v", st)
	}
	des := e.desired(d)
	if des.Version != 2 || des.Mode != "both" || len(log.list()) != 2 {
		t.Errorf("desired version %d mode %s, observer %v", des.Version, des.Mode, log.list())
	}
	if _, _, err := e.Outbox.Forwarding(e.ctx, "nosuchdevice"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("Forwarding of unknown device: %v", err)
	}
}

// OldChannelsSQL is a device with channels as a relay before migration
// 0027 stored them, one serial_channels row each: uart-1 configured
// (19200 baud) and reported available, with text that needs escaping, a
// passthrough address and a point; rs485-2 reported unavailable, never
// configured; rs485-1 configured, never reported. blob writes a hex
// string as the dialect's binary literal, boolean a truth value.
func OldChannelsSQL(blob func(hex string) string, boolean func(bool) string) string {
	cfg, _ := json.Marshal(rs485Config(19200))
	uart, _ := json.Marshal(serialcfg.Config{Kind: "uart", UART: &serialcfg.UART{BaudRate: 19200, DataBits: 8, Parity: "none", StopBits: 1}})
	points := cloud.EncodePointStates([]protocol.PointState{{Name: "temp", Value: 21.5, Quality: "good", At: resource.T(time.UnixMilli(1700000000500))}})
	return `INSERT INTO orgs (id, name, webhook_secret, created_at) VALUES ('orgchan', 'Old', 'whsec_old', 1700000000000);
INSERT INTO devices (id, org_id, name, serial_number, model, token_hash, created_at) VALUES
	('devchan', 'orgchan', 'gw', 'SN-CHAN', 'IG-500', ` + blob("00112233") + `, 1700000000000);
INSERT INTO serial_channels (device_id, channel_id, config, available, live, tx_on, error, passthrough_address, points) VALUES
	('devchan', 'uart-1', '` + string(uart) + `', ` + boolean(true) + `, 'say "hi" \ ünï', ` + boolean(true) + `, 'read: timeout', '10.8.0.2:4001', '` + points + `'),
	('devchan', 'rs485-2', NULL, ` + boolean(false) + `, '', ` + boolean(false) + `, '', NULL, NULL),
	('devchan', 'rs485-1', '` + string(cfg) + `', NULL, '', ` + boolean(false) + `, '', NULL, NULL);`
}

// CheckMigratedChannels checks OldChannelsSQL's device after migration
// 0027: each channel's configuration and reported state as they were, the
// never-reported channel still unreported, and a channel configured for
// the first time afterwards refused or taken as its report says.
func CheckMigratedChannels(t *testing.T, s cloud.Stores) {
	t.Helper()
	ctx := context.Background()
	svc := s.Serial()
	uart, err := svc.Channel(ctx, "orgchan", "devchan", "uart-1")
	if err != nil || !uart.Available || uart.Config.UART == nil || uart.Config.UART.BaudRate != 19200 || uart.Telemetry.Live != `say "hi" \ ünï` ||
		!uart.Telemetry.TxOn || uart.Telemetry.Error != "read: timeout" || uart.PassthroughAddress == nil || *uart.PassthroughAddress != "10.8.0.2:4001" {
		t.Errorf("uart-1 after the migration: %+v, %v", uart, err)
	}
	rs2, err := svc.Channel(ctx, "orgchan", "devchan", "rs485-2")
	if err != nil || rs2.Available {
		t.Errorf("rs485-2 after the migration: available %v, %v; want reported unavailable", rs2.Available, err)
	}
	if _, err := svc.PutChannel(ctx, "orgchan", "devchan", "rs485-2", rs485Config(9600)); cloud.ErrorCode(err) != cloud.EUNAVAILABLE {
		t.Errorf("configuring the unavailable rs485-2: %v, want refused", err)
	}
	rs1, err := svc.Channel(ctx, "orgchan", "devchan", "rs485-1")
	if err != nil || !rs1.Available || rs1.Config.RS485 == nil || rs1.Config.RS485.BaudRate != 19200 || rs1.Telemetry.Live != "" {
		t.Errorf("rs485-1 after the migration: %+v, %v", rs1, err)
	}
	tel, err := svc.Telemetry(ctx, "orgchan", "devchan")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range tel.Channels {
		if c.ID == "uart-1" && c.Live != `say "hi" \ ünï` {
			t.Errorf("uart-1's telemetry after the migration: %+v", c)
		}
	}
}

package sqlite_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/hw/catalog"
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

func TestSerialDefaultsBeforeAnyReport(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	d := MustDevice(t, db, org.ID, "IG-500")
	svc := sqlite.NewSerialService(db)
	st, err := svc.Serial(ctx, org.ID, d.ID)
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
	tel, err := svc.Telemetry(ctx, org.ID, d.ID)
	if err != nil || tel.At != nil || len(tel.Channels) != len(model.Channels) || tel.Channels[0].ID != "uart-1" {
		t.Errorf("telemetry = %+v, %v", tel, err)
	}
	b, _ := json.Marshal(tel)
	var raw map[string]any
	json.Unmarshal(b, &raw)
	if v, ok := raw["at"]; !ok || v != nil {
		t.Errorf("telemetry JSON %s: at must be null", b)
	}
}

func TestSerialTelemetryAndAvailability(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	d := MustDevice(t, db, org.ID, "IG-500")
	svc := sqlite.NewSerialService(db)
	at := time.Date(2026, 4, 1, 8, 30, 0, 123e6, time.UTC)
	if err := db.SetChannelTelemetry(ctx, d.ID, at, []resource.ChannelTelemetry{
		{ID: "rs485-1", Live: "17 42", TxOn: true},
		{ID: "canfd-1", Live: "", Error: "bus-off"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.SetChannelAvailable(ctx, d.ID, "rs485-2", false); err != nil {
		t.Fatal(err)
	}
	tel, err := svc.Telemetry(ctx, org.ID, d.ID)
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
	ch, err := svc.Channel(ctx, org.ID, d.ID, "rs485-2")
	if err != nil || ch.Available {
		t.Errorf("rs485-2 available = %v, %v; want false as reported", ch.Available, err)
	}
	ch, err = svc.Channel(ctx, org.ID, d.ID, "rs485-1")
	if err != nil || !ch.Available || ch.Telemetry.Live != "17 42" || ch.Config.Kind != "rs485" {
		t.Errorf("rs485-1 = %+v, %v", ch, err)
	}
	// A desired config survives a telemetry report and vice versa.
	cfg := rs485Config(19200)
	if _, err := svc.PutChannel(ctx, org.ID, d.ID, "rs485-1", cfg); err != nil {
		t.Fatal(err)
	}
	if err := db.SetChannelTelemetry(ctx, d.ID, at.Add(time.Second), []resource.ChannelTelemetry{{ID: "rs485-1", Live: "1 2"}}); err != nil {
		t.Fatal(err)
	}
	ch, _ = svc.Channel(ctx, org.ID, d.ID, "rs485-1")
	if ch.Config.RS485 == nil || ch.Config.RS485.BaudRate != 19200 || ch.Telemetry.Live != "1 2" {
		t.Errorf("after put and report: %+v", ch)
	}
}

func rs485Config(baud int) serialcfg.Config {
	return serialcfg.Config{Kind: "rs485", RS485: &serialcfg.RS485{Kind: "rs485", BaudRate: baud, DataBits: 8, Parity: "even", StopBits: 1, Mode: "modbus_rtu_master", SlaveID: 7,
		Tx: serialcfg.RS485Tx{Enabled: true, IntervalMs: 1000, Register: 40, Value: 1}}}
}

func TestPutChannel(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	other := MustOrg(t, db, "other")
	d := MustDevice(t, db, org.ID, "IG-500")
	d300 := MustDevice(t, db, org.ID, "IG-300")
	d100 := MustDevice(t, db, org.ID, "IG-100")
	od := MustDevice(t, db, other.ID, "IG-500")
	if err := db.SetChannelAvailable(ctx, d.ID, "rs485-2", false); err != nil {
		t.Fatal(err)
	}
	log := &configLog{}
	svc := sqlite.NewSerialService(db)
	svc.Observer = log
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
		t.Run(tc.name, func(t *testing.T) {
			if _, err := svc.PutChannel(ctx, tc.org, tc.dev, tc.channel, tc.cfg); cloud.ErrorCode(err) != tc.code {
				t.Errorf("err = %v, want %s", err, tc.code)
			}
		})
	}
	if len(log.devices) != 0 {
		t.Errorf("observer told of %v after failed puts", log.devices)
	}
	before, _ := db.DesiredSerialConfig(ctx, d.ID)
	res, err := svc.PutChannel(ctx, org.ID, d.ID, "rs485-1", rs485Config(38400))
	if err != nil {
		t.Fatal(err)
	}
	if res.DeviceID != d.ID || res.ChannelID != "rs485-1" || res.Config.RS485.BaudRate != 38400 {
		t.Errorf("result = %+v", res)
	}
	after, _ := db.DesiredSerialConfig(ctx, d.ID)
	if after.Version != before.Version+1 || after.Channels["rs485-1"].RS485.BaudRate != 38400 || after.Channels["uart-1"].UART == nil {
		t.Errorf("desired before %+v after %+v", before, after)
	}
	if len(log.devices) != 1 || log.devices[0] != d.ID {
		t.Errorf("observer told %v", log.devices)
	}
	// The other org's identical device is untouched.
	if o, _ := db.DesiredSerialConfig(ctx, od.ID); o.Version != 0 {
		t.Errorf("other device's version %d", o.Version)
	}
	for _, call := range []func() error{
		func() error { _, err := svc.Serial(ctx, org.ID, d100.ID); return err },
		func() error { _, err := svc.Telemetry(ctx, org.ID, d100.ID); return err },
		func() error { _, err := svc.Channel(ctx, org.ID, d100.ID, "rs485-1"); return err },
		func() error {
			m := "both"
			_, err := svc.PatchSerial(ctx, org.ID, d100.ID, cloud.SerialPatch{Mode: &m})
			return err
		},
	} {
		if err := call(); cloud.ErrorCode(err) != cloud.ECAPABILITY {
			t.Errorf("IG-100 serial route: err = %v, want capability_unavailable", err)
		}
	}
}

func TestPatchSerial(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	d := MustDevice(t, db, org.ID, "IG-500")
	log := &configLog{}
	svc := sqlite.NewSerialService(db)
	svc.Observer = log
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
		if _, err := svc.PatchSerial(ctx, org.ID, d.ID, tc.p); cloud.ErrorCode(err) != tc.code {
			t.Errorf("%s: err = %v, want %s", tc.name, err, tc.code)
		}
	}
	res, err := svc.PatchSerial(ctx, org.ID, d.ID, cloud.SerialPatch{Mode: str("both"), WebhookURL: str("https://hooks.example.com/fleet?x=1"), WebhookEnabled: &yes})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "both" || res.Forwarding.WebhookURL == nil || *res.Forwarding.WebhookURL != "https://hooks.example.com/fleet?x=1" || !res.Forwarding.WebhookEnabled {
		t.Errorf("result = %+v", res)
	}
	// Only the fields sent change; null clears the URL.
	res, err = svc.PatchSerial(ctx, org.ID, d.ID, cloud.SerialPatch{ClearWebhookURL: true})
	if err != nil || res.Mode != "both" || res.Forwarding.WebhookURL != nil || !res.Forwarding.WebhookEnabled {
		t.Errorf("after clear = %+v, %v", res, err)
	}
	st, _ := svc.Serial(ctx, org.ID, d.ID)
	if st.Mode != "both" || st.Forwarding.WebhookURL != nil {
		t.Errorf("stored state %+v", st)
	}
	des, _ := db.DesiredSerialConfig(ctx, d.ID)
	if des.Version != 2 || des.Mode != "both" || len(log.devices) != 2 {
		t.Errorf("desired version %d mode %s, observer %v", des.Version, des.Mode, log.devices)
	}
}

func TestWebhookURLPolicy(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://example.com/hook", true},
		{"https://example.com:8443/a/b?c=d", true},
		{"HTTPS://EXAMPLE.COM/", true},
		{"http://example.com/hook", false},
		{"ftp://example.com", false},
		{"https://user@example.com/", false},
		{"https://user:pass@example.com/", false},
		{"https:///path", false},
		{"https://example.com/#frag", false},
		{"https://example.com:0/", false},
		{"https://example.com:70000/", false},
		{"https://exa mple.com/", false},
		{"//example.com/", false},
		{"", false},
		{"https://example.com/" + string(make([]byte, 2100)), false},
	} {
		err := cloud.ValidateWebhookURL("webhookUrl", tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateWebhookURL(%.40q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
		if err != nil && cloud.ErrorCode(err) != cloud.EINVALID {
			t.Errorf("code %s", cloud.ErrorCode(err))
		}
	}
}

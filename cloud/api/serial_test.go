package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

func rs485Body() map[string]any {
	return map[string]any{"kind": "rs485", "baudRate": 19200, "dataBits": 8, "parity": "even", "stopBits": 1, "mode": "modbus_rtu_master", "slaveId": 7,
		"tx": map[string]any{"enabled": true, "intervalMs": 1000, "register": 40, "value": 1234}}
}

func TestSerialState(t *testing.T) {
	t.Parallel()
	stores.Run(t, testSerialState)
}

func testSerialState(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	r := e.get("/devices/"+d.ID+"/serial", e.keyA)
	r.want(t, http.StatusOK, "")
	var st resource.One[resource.SerialState]
	r.decode(t, &st)
	ids := []string{}
	for _, c := range st.Data.Channels {
		ids = append(ids, c.ID)
		if c.Config.Kind != c.Group && c.Config.IsZero() {
			t.Errorf("channel %s has no config", c.ID)
		}
	}
	if got := strings.Join(ids, ","); got != "uart-1,rs485-1,rs485-2,canfd-1,gpio-1,gpio-2,gpio-3,gpio-4" {
		t.Fatalf("channels %s", got)
	}
	if st.Data.DeviceID != d.ID || st.Data.TelemetryAt != nil {
		t.Fatalf("state: %s", r.body)
	}

	// Telemetry: at is null until something was reported.
	r = e.get("/devices/"+d.ID+"/serial/telemetry", e.keyA)
	r.want(t, http.StatusOK, "")
	if !strings.Contains(string(r.body), `"at":null`) {
		t.Fatalf("telemetry before any report: %s", r.body)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	storetest.Channels(t, e.s.Agent, e.agent(d.ID), at, protocol.ChannelState{ID: "rs485-1", Available: true, Live: "12 34", TxOn: true},
		protocol.ChannelState{ID: "canfd-1", Available: true, Live: "0x123#DEADBEEF", Error: "bus-off"})
	r = e.get("/devices/"+d.ID+"/serial/telemetry", e.keyA)
	var tel resource.One[resource.SerialTelemetry]
	r.decode(t, &tel)
	if tel.Data.At == nil || !tel.Data.At.Equal(at) {
		t.Fatalf("telemetry at: %s", r.body)
	}
	found := false
	for _, c := range tel.Data.Channels {
		if c.ID == "canfd-1" && c.Live == "0x123#DEADBEEF" && c.Error == "bus-off" {
			found = true
		}
	}
	if !found {
		t.Fatalf("canfd-1 telemetry missing: %s", r.body)
	}

	// One channel.
	r = e.get("/devices/"+d.ID+"/serial/channels/rs485-1", e.keyA)
	r.want(t, http.StatusOK, "")
	var ch resource.One[resource.Channel]
	r.decode(t, &ch)
	if ch.Data.ID != "rs485-1" || ch.Data.Group != "rs485" || !ch.Data.Configurable || ch.Data.Telemetry.Live != "12 34" {
		t.Fatalf("channel: %s", r.body)
	}
	e.get("/devices/"+d.ID+"/serial/channels/rs485-9", e.keyA).want(t, http.StatusNotFound, cloud.ENOTFOUND)

	// A model without serial.io: 409 on every serial route.
	small := e.device(e.orgA.ID, "IG-100")
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/devices/" + small.ID + "/serial", nil},
		{"PATCH", "/devices/" + small.ID + "/serial", map[string]any{"mode": "both"}},
		{"GET", "/devices/" + small.ID + "/serial/telemetry", nil},
		{"GET", "/devices/" + small.ID + "/serial/channels/rs485-1", nil},
		{"PUT", "/devices/" + small.ID + "/serial/channels/rs485-1", rs485Body()},
	} {
		e.req(c.method, "/api/v1/public"+c.path, e.keyA, c.body).want(t, http.StatusConflict, cloud.ECAPABILITY)
	}
}

func TestPatchSerial(t *testing.T) {
	t.Parallel()
	stores.Run(t, testPatchSerial)
}

func testPatchSerial(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	path := "/api/v1/public/devices/" + d.ID + "/serial"
	patch := func(body string) resp { return e.req(http.MethodPatch, path, e.keyA, body) }

	r := patch(`{"mode":"passthrough","webhookUrl":"https://hooks.example.com/fleet?x=1","webhookEnabled":true}`)
	r.want(t, http.StatusOK, "")
	var res resource.One[resource.SerialPatchResult]
	r.decode(t, &res)
	if res.Data.DeviceID != d.ID || res.Data.Mode != "passthrough" || res.Data.Forwarding.WebhookURL == nil ||
		*res.Data.Forwarding.WebhookURL != "https://hooks.example.com/fleet?x=1" || !res.Data.Forwarding.WebhookEnabled {
		t.Fatalf("patch: %s", r.body)
	}
	// One field at a time leaves the others.
	r = patch(`{"webhookEnabled":false}`)
	r.decode(t, &res)
	if res.Data.Mode != "passthrough" || res.Data.Forwarding.WebhookURL == nil || res.Data.Forwarding.WebhookEnabled {
		t.Fatalf("partial patch: %s", r.body)
	}
	// null clears the URL.
	r = patch(`{"webhookUrl":null}`)
	r.want(t, http.StatusOK, "")
	if !strings.Contains(string(r.body), `"webhookUrl":null`) {
		t.Fatalf("webhookUrl not cleared: %s", r.body)
	}
	// The state shows the change.
	var st resource.One[resource.SerialState]
	e.get("/devices/"+d.ID+"/serial", e.keyA).decode(t, &st)
	if st.Data.Mode != "passthrough" || st.Data.Forwarding.WebhookURL != nil || !st.Data.Enabled {
		t.Fatalf("state after patch: %+v", st.Data)
	}
	// The serial I/O switch (additive): off, then on again; the desired
	// configuration the agent reads follows, at a newer version.
	before, _, err := e.s.Agent.DesiredConfig(context.Background(), e.agent(d.ID))
	if err != nil {
		t.Fatal(err)
	}
	r = patch(`{"enabled":false}`)
	r.want(t, http.StatusOK, "")
	r.decode(t, &res)
	if res.Data.Enabled || res.Data.Mode != "passthrough" {
		t.Fatalf("switch off: %s", r.body)
	}
	e.get("/devices/"+d.ID+"/serial", e.keyA).decode(t, &st)
	after, _, err := e.s.Agent.DesiredConfig(context.Background(), e.agent(d.ID))
	if err != nil {
		t.Fatal(err)
	}
	if st.Data.Enabled || after.Enabled || after.Version <= before.Version {
		t.Fatalf("switched off: state %+v, agent's config %+v (before %+v)", st.Data, after, before)
	}
	r = patch(`{"enabled":true,"mode":"both"}`)
	r.decode(t, &res)
	if !res.Data.Enabled || res.Data.Mode != "both" {
		t.Fatalf("switch on: %s", r.body)
	}

	for _, c := range []struct {
		name, body, code, field string
	}{
		{"empty object", `{}`, cloud.EINVALID, "at least one"},
		{"unknown field", `{"mode":"both","colour":"red"}`, cloud.EINVALID, "colour"},
		{"mode wrong type", `{"mode":3}`, cloud.EINVALID, "mode"},
		{"mode null", `{"mode":null}`, cloud.EINVALID, "mode"},
		{"mode unknown", `{"mode":"raw"}`, cloud.EINVALID, "mode"},
		{"enabled wrong type", `{"webhookEnabled":"yes"}`, cloud.EINVALID, "webhookEnabled"},
		{"enabled null", `{"webhookEnabled":null}`, cloud.EINVALID, "webhookEnabled"},
		{"switch wrong type", `{"enabled":"false"}`, cloud.EINVALID, "enabled"},
		{"switch null", `{"enabled":null}`, cloud.EINVALID, "enabled"},
		{"url wrong type", `{"webhookUrl":42}`, cloud.EINVALID, "webhookUrl"},
		{"url http", `{"webhookUrl":"http://hooks.example.com/x"}`, cloud.EINVALID, "webhookUrl"},
		{"url credentials", `{"webhookUrl":"https://user:pw@hooks.example.com/x"}`, cloud.EINVALID, "webhookUrl"},
		{"url empty", `{"webhookUrl":""}`, cloud.EINVALID, "webhookUrl"},
		{"url no host", `{"webhookUrl":"https:///x"}`, cloud.EINVALID, "webhookUrl"},
		{"url fragment", `{"webhookUrl":"https://h.example.com/x#frag"}`, cloud.EINVALID, "webhookUrl"},
		{"url too long", `{"webhookUrl":"https://h.example.com/` + strings.Repeat("a", 2100) + `"}`, cloud.EINVALID, "webhookUrl"},
		{"not json", `{"mode":`, "invalid_json", ""},
		{"garbage", `mode=both`, "invalid_json", ""},
		{"empty body", ``, "invalid_json", ""},
		{"two values", `{"mode":"both"}{"mode":"both"}`, "invalid_json", ""},
		{"array", `[]`, cloud.EINVALID, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := patch(c.body)
			r.want(t, http.StatusBadRequest, c.code)
			if c.field != "" && !strings.Contains(r.errMessage(), c.field) {
				t.Fatalf("message %q does not name %q", r.errMessage(), c.field)
			}
		})
	}
}

// TestPutChannel checks a successful PUT and the documented order of checks,
// cell by cell.
func TestPutChannel(t *testing.T) {
	t.Parallel()
	stores.Run(t, testPutChannel)
}

func testPutChannel(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	base := "/api/v1/public/devices/" + d.ID + "/serial/channels/"
	r := e.req(http.MethodPut, base+"rs485-1", e.keyA, rs485Body())
	r.want(t, http.StatusOK, "")
	var res resource.One[resource.ChannelPutResult]
	r.decode(t, &res)
	if res.Data.DeviceID != d.ID || res.Data.ChannelID != "rs485-1" || res.Data.Config.RS485 == nil || res.Data.Config.RS485.SlaveID != 7 || res.Data.Config.RS485.Tx.Value != 1234 {
		t.Fatalf("put: %s", r.body)
	}
	var ch resource.One[resource.Channel]
	e.get("/devices/"+d.ID+"/serial/channels/rs485-1", e.keyA).decode(t, &ch)
	if ch.Data.Config.RS485 == nil || ch.Data.Config.RS485.BaudRate != 19200 {
		t.Fatalf("stored config: %+v", ch.Data.Config)
	}
	canfd := map[string]any{"kind": "canfd", "nominalBitrate": 500000, "dataBitrate": 2000000, "samplePoint": 0.8, "listenOnly": false,
		"tx": map[string]any{"enabled": true, "intervalMs": 100, "canId": "0x1A2", "dataHex": "DE AD BE EF"}}
	e.req(http.MethodPut, base+"canfd-1", e.keyA, canfd).want(t, http.StatusOK, "")

	// Fixtures for the order of checks.
	ig300 := e.device(e.orgA.ID, "IG-300") // gpio-2 is not configurable
	storetest.Channels(t, e.s.Agent, e.agent(d.ID), time.Now(), protocol.ChannelState{ID: "rs485-2", Available: false})
	small := e.device(e.orgA.ID, "IG-100")
	other := e.device(e.orgB.ID, "IG-500")
	gpioOut := map[string]any{"kind": "gpio", "direction": "out", "pull": "none", "debounceMs": 0, "tx": map[string]any{"enabled": true, "intervalMs": 0, "value": 1}}
	bad := func(field string, v any) map[string]any {
		b := rs485Body()
		b[field] = v
		return b
	}
	for _, c := range []struct {
		name   string
		path   string
		body   any
		status int
		code   string
		inMsg  string
	}{
		{"unknown device, bad body", "/devices/nosuchdevice00000000000000/serial/channels/rs485-1", `{`, 404, cloud.ENOTFOUND, ""},
		{"other org's device", "/devices/" + other.ID + "/serial/channels/rs485-1", rs485Body(), 404, cloud.ENOTFOUND, ""},
		{"no capability before unknown channel", "/devices/" + small.ID + "/serial/channels/nope-1", `{`, 409, cloud.ECAPABILITY, ""},
		{"unknown channel before bad body", "/devices/" + d.ID + "/serial/channels/rs485-9", `{`, 404, cloud.ENOTFOUND, ""},
		{"not configurable before bad body", "/devices/" + ig300.ID + "/serial/channels/gpio-2", `{`, 409, cloud.ENOTCONFIG, ""},
		{"unavailable before bad body", "/devices/" + d.ID + "/serial/channels/rs485-2", `{`, 409, cloud.EUNAVAILABLE, ""},
		{"invalid json", "/devices/" + d.ID + "/serial/channels/rs485-1", `{"kind":`, 400, "invalid_json", ""},
		{"kind mismatch", "/devices/" + d.ID + "/serial/channels/rs485-1", canfd, 400, cloud.EKIND, "kind"},
		{"kind missing", "/devices/" + d.ID + "/serial/channels/rs485-1", `{"baudRate":9600}`, 400, cloud.EINVALID, "kind"},
		{"unknown field", "/devices/" + d.ID + "/serial/channels/rs485-1", bad("colour", "red"), 400, cloud.EINVALID, "colour"},
		{"wrong type", "/devices/" + d.ID + "/serial/channels/rs485-1", bad("baudRate", "fast"), 400, cloud.EINVALID, "baudRate"},
		{"baud not allowed", "/devices/" + d.ID + "/serial/channels/rs485-1", bad("baudRate", 14400), 400, cloud.EINVALID, "baudRate"},
		{"slave id range", "/devices/" + d.ID + "/serial/channels/rs485-1", bad("slaveId", 248), 400, cloud.EINVALID, "slaveId"},
		{"parity", "/devices/" + d.ID + "/serial/channels/rs485-1", bad("parity", "mark"), 400, cloud.EINVALID, "parity"},
		{"tx interval", "/devices/" + d.ID + "/serial/channels/rs485-1", bad("tx", map[string]any{"enabled": true, "intervalMs": 50, "register": 0, "value": 0}), 400, cloud.EINVALID, "tx.intervalMs"},
		{"gpio on rs485", "/devices/" + d.ID + "/serial/channels/rs485-1", gpioOut, 400, cloud.EKIND, "kind"},
		{"gpio output ok", "/devices/" + d.ID + "/serial/channels/gpio-1", gpioOut, 200, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.req(http.MethodPut, "/api/v1/public"+c.path, e.keyA, c.body)
			r.want(t, c.status, c.code)
			if c.inMsg != "" && !strings.Contains(r.errMessage(), c.inMsg) {
				t.Fatalf("message %q does not name %q", r.errMessage(), c.inMsg)
			}
		})
	}
}

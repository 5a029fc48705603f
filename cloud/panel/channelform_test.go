package panel_test

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/serialcfg"
)

// The channel forms, driven as a browser drives them: the page is fetched,
// the form's fields are read as a browser would send them (checked boxes,
// selected options, every text and number input), some are changed, the
// form is posted, and the stored config is read back from the store.

// readmeRS485 is the README's PUT /serial/channels/rs485-1: no poll.
const readmeRS485 = `{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"even","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,"tx":{"enabled":true,"intervalMs":0,"register":10,"value":42}}`

var (
	formRe   = regexp.MustCompile(`(?s)<form method="post" action="([^"]*)" class="config channel-form">(.*?)</form>`)
	inputRe  = regexp.MustCompile(`<input id="[^"]*" name="([^"]*)" type="(checkbox|number|text)"( value="[^"]*")?([^>]*)>`)
	selectRe = regexp.MustCompile(`(?s)<select id="[^"]*" name="([^"]*)"[^>]*>(.*?)</select>`)
	optRe    = regexp.MustCompile(`<option value="([^"]*)" selected>`)
)

// channelForm returns the fields of ch's form on page as a browser sends
// them (without the buttons).
func channelForm(t *testing.T, page, ch string) url.Values {
	t.Helper()
	for _, m := range formRe.FindAllStringSubmatch(page, -1) {
		if !strings.HasSuffix(m[1], "/channels/"+ch) {
			continue
		}
		v := url.Values{}
		for _, in := range inputRe.FindAllStringSubmatch(m[2], -1) {
			val := html.UnescapeString(strings.TrimSuffix(strings.TrimPrefix(in[3], ` value="`), `"`))
			switch {
			case in[2] != "checkbox":
				v.Add(html.UnescapeString(in[1]), val)
			case strings.Contains(in[4], " checked"):
				v.Add(html.UnescapeString(in[1]), val)
			}
		}
		for _, sel := range selectRe.FindAllStringSubmatch(m[2], -1) {
			opt := optRe.FindStringSubmatch(sel[2])
			if opt == nil {
				opt = regexp.MustCompile(`<option value="([^"]*)"`).FindStringSubmatch(sel[2]) // the first is selected
			}
			v.Add(html.UnescapeString(sel[1]), html.UnescapeString(opt[1]))
		}
		return v
	}
	t.Fatalf("no form of %s on the page", ch)
	return nil
}

// storedJSON is ch's config as stored, as JSON.
func (h *harness) storedJSON(ch string) string {
	h.t.Helper()
	c := must(h.db.Serial().Channel(h.ctx, h.org.ID, h.device.ID, ch))
	return string(must(json.Marshal(c.Config)))
}

func (h *harness) putConfig(ch, body string) {
	h.t.Helper()
	cfg, err := serialcfg.DecodeFor(strings.SplitN(ch, "-", 2)[0], []byte(body))
	if err != nil {
		h.t.Fatal(err)
	}
	must(h.db.Serial().PutChannel(h.ctx, h.org.ID, h.device.ID, ch, cfg))
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return string(must(json.Marshal(x))) == string(must(json.Marshal(y)))
}

// hasField reports whether page has the form field id with value (a
// checkbox: "checked" or "unchecked"; a select: the selected option).
func hasField(page, id, value string) bool {
	re := regexp.MustCompile(`<(input|select) id="` + regexp.QuoteMeta(id) + `"[^>]*>`)
	loc := re.FindStringIndex(page)
	if loc == nil {
		return false
	}
	tag := page[loc[0]:loc[1]]
	switch {
	case strings.Contains(tag, `type="checkbox"`):
		return strings.Contains(tag, " checked") == (value == "checked")
	case strings.HasPrefix(tag, "<select"):
		end := strings.Index(page[loc[1]:], "</select>")
		return strings.Contains(page[loc[1]:loc[1]+end], `<option value="`+value+`" selected>`)
	}
	return strings.Contains(tag, ` value="`+html.EscapeString(value)+`"`)
}

// TestChannelFormShowsEverySection: a form shows every section and member
// of its kind's schema with the stored value or the default: rs485 after
// the README's PUT (no poll) shows Poll switched off with its defaults,
// numbers carry the schema's bounds, allowed values are selects.
func TestChannelFormShowsEverySection(t *testing.T) { stores.Run(t, testChannelFormShowsEverySection) }

func testChannelFormShowsEverySection(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	h.putConfig("rs485-2", readmeRS485)
	h.putConfig("gpio-2", `{"kind":"gpio","direction":"out","pull":"none","debounceMs":0,"tx":{"enabled":true,"intervalMs":0,"value":1}}`)
	c := h.signIn(cloud.RoleMember)
	page := c.get("/panel/devices/" + h.device.ID).body
	for _, tc := range []struct{ id, value string }{
		// rs485 without poll: Poll off, its members at the schema's defaults.
		{"f-rs485-2-baudRate", "19200"}, {"f-rs485-2-slaveId", "7"}, {"f-rs485-2-tx-register", "10"},
		{"f-rs485-2-poll-enabled", "unchecked"}, {"f-rs485-2-poll-intervalMs", "1000"}, {"f-rs485-2-poll-register", "0"},
		{"f-rs485-2-poll-count", "2"}, {"f-rs485-2-poll-function", "holding"}, {"f-rs485-2-poll-slaveId", ""},
		// rs485 with the harness's point and the default poll.
		{"f-rs485-1-poll-enabled", "checked"}, {"f-rs485-1-points-0-name", "boiler_temp"}, {"f-rs485-1-points-0-type", "f32"},
		{"f-rs485-1-points-0-order", "ABCD"}, {"f-rs485-1-points-0-scale", "1"}, {"f-rs485-1-points-0-unit", "°C"},
		{"f-rs485-1-points-0-bit", ""},
		{"f-canfd-1-nominalBitrate", "500000"}, {"f-canfd-1-samplePoint", "0.875"}, {"f-canfd-1-listenOnly", "unchecked"},
		{"f-canfd-1-tx-canId", ""}, {"f-canfd-1-tx-dataHex", ""},
		{"f-uart-1-baudRate", "115200"}, {"f-uart-1-flowControl", "none"}, {"f-uart-1-tx-dataHex", ""},
		{"f-gpio-1-direction", "in"}, {"f-gpio-1-pull", "up"}, {"f-gpio-1-debounceMs", "20"}, {"f-gpio-1-tx-enabled", "unchecked"},
		{"f-gpio-2-direction", "out"}, {"f-gpio-2-debounceMs", "0"}, {"f-gpio-2-tx-enabled", "checked"}, {"f-gpio-2-tx-value", "1"},
	} {
		if !hasField(page, tc.id, tc.value) {
			t.Errorf("no field %s showing %q", tc.id, tc.value)
		}
	}
	for _, want := range []string{
		`<label for="f-rs485-2-poll-enabled">Poll: enabled</label>`,
		`id="f-canfd-1-samplePoint" name="samplePoint" type="number" value="0.875" step="any" min="0.5" max="0.95"`,
		`id="f-rs485-1-slaveId" name="slaveId" type="number" value="1" step="1" min="1" max="247"`,
		`id="f-rs485-1-tx-intervalMs" name="tx.intervalMs" type="number" value="0" step="1" min="0" max="86400000" aria-describedby="f-rs485-1-tx-intervalMs-hint"`,
		`<p class="hint sub" id="f-rs485-1-tx-intervalMs-hint">0 sends once</p>`,
		`<button type="submit" name="action" value="add polls" class="secondary" formnovalidate>Add extra poll</button>`,
		`<button type="submit" name="action" value="remove points[0]" class="secondary" formnovalidate>Remove point 1</button>`,
		`<button type="submit" name="action" value="add points" class="secondary" formnovalidate>Add point</button>`,
		`<option value="">—</option><option value="ABCD" selected>ABCD</option>`,
		`<fieldset class="section" id="s-rs485-2-poll" aria-describedby="s-rs485-2-poll-hint">`,
		`<p class="sub" id="s-rs485-2-poll-hint">reads count registers of the slave every interval</p>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// A VIEWER reads the same sections without a form.
	view := h.signIn(cloud.RoleViewer).get("/panel/devices/" + h.device.ID).body
	if strings.Contains(view, `class="config channel-form"`) || !strings.Contains(view, "<dt>Poll: interval (ms)</dt><dd>1000</dd>") {
		t.Error("a VIEWER's channel configuration: not a read-only view with its poll")
	}
}

// TestChannelFormsRoundTrip: each kind's form, posted as shown, stores
// what was stored (defaults round-trip, an absent poll stays absent), and
// posted with changes stores them as the API would.
func TestChannelFormsRoundTrip(t *testing.T) { stores.Run(t, testChannelFormsRoundTrip) }

func testChannelFormsRoundTrip(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	h.putConfig("rs485-2", readmeRS485)
	c := h.signIn(cloud.RoleMember)
	devPage := "/panel/devices/" + h.device.ID
	post := func(ch string, form url.Values) response {
		t.Helper()
		return c.post(devPage+"/channels/"+ch, form)
	}
	for _, tc := range []struct {
		name, ch string
		change   map[string]string // form values to set ("" unchecks a box)
		want     string            // the stored config afterwards
	}{
		{"rs485 without poll keeps none", "rs485-2", map[string]string{"parity": "odd"},
			`{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"odd","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,"tx":{"enabled":true,"intervalMs":0,"register":10,"value":42}}`},
		{"rs485 poll switched on", "rs485-2", map[string]string{"poll.enabled": "true", "poll.register": "100", "poll.function": "input"},
			`{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"odd","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,"tx":{"enabled":true,"intervalMs":0,"register":10,"value":42},
			  "poll":{"enabled":true,"intervalMs":1000,"register":100,"count":2,"function":"input"}}`},
		{"rs485 poll switched off is kept off", "rs485-2", map[string]string{"poll.enabled": ""},
			`{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"odd","stopBits":1,"mode":"modbus_rtu_master","slaveId":7,"tx":{"enabled":true,"intervalMs":0,"register":10,"value":42},
			  "poll":{"enabled":false,"intervalMs":1000,"register":100,"count":2,"function":"input"}}`},
		{"rs485 with poll and a point", "rs485-1", map[string]string{"points[0].deadband": "0.5", "points[0].order": "CDAB", "poll.count": "4"},
			`{"kind":"rs485","baudRate":9600,"dataBits":8,"parity":"none","stopBits":1,"mode":"modbus_rtu_master","slaveId":1,"tx":{"enabled":false,"intervalMs":0,"register":0,"value":0},
			  "poll":{"enabled":true,"intervalMs":1000,"register":0,"count":4,"function":"holding"},
			  "points":[{"name":"boiler_temp","slaveId":1,"function":"holding","register":0,"type":"f32","order":"CDAB","scale":1,"unit":"°C","intervalMs":1000,"deadband":0.5}]}`},
		{"canfd", "canfd-1", map[string]string{"nominalBitrate": "250000", "samplePoint": "0.8", "tx.enabled": "true", "tx.intervalMs": "500", "tx.canId": "1a", "tx.dataHex": "01 0a"},
			`{"kind":"canfd","nominalBitrate":250000,"dataBitrate":2000000,"samplePoint":0.8,"listenOnly":false,"tx":{"enabled":true,"intervalMs":500,"canId":"0x1A","dataHex":"01 0A"}}`},
		{"uart", "uart-1", map[string]string{"baudRate": "9600", "dataBits": "7", "flowControl": "rtscts", "tx.enabled": "true", "tx.dataHex": "41 54 0D 0A"},
			`{"kind":"uart","baudRate":9600,"dataBits":7,"parity":"none","stopBits":1,"flowControl":"rtscts","tx":{"enabled":true,"intervalMs":0,"dataHex":"41 54 0D 0A"}}`},
		{"gpio in", "gpio-1", map[string]string{"pull": "down", "debounceMs": "50"},
			`{"kind":"gpio","direction":"in","pull":"down","debounceMs":50,"tx":{"enabled":false,"intervalMs":0,"value":0}}`},
		{"gpio out", "gpio-2", map[string]string{"direction": "out", "pull": "none", "debounceMs": "0", "tx.enabled": "true", "tx.intervalMs": "1000", "tx.value": "1"},
			`{"kind":"gpio","direction":"out","pull":"none","debounceMs":0,"tx":{"enabled":true,"intervalMs":1000,"value":1}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What the API would store for the stored config (the
			// harness stores its point without the defaults filled).
			norm := must(serialcfg.DecodeFor(strings.SplitN(tc.ch, "-", 2)[0], []byte(h.storedJSON(tc.ch))))
			before := string(must(json.Marshal(norm)))
			form := channelForm(t, c.get(devPage).body, tc.ch)
			if r := post(tc.ch, form); r.status != http.StatusSeeOther {
				t.Fatalf("the form as shown: %d %s", r.status, r.body)
			}
			if got := h.storedJSON(tc.ch); !sameJSON(t, got, before) {
				t.Errorf("the form posted as shown changed the config:\n%s\nto\n%s", before, got)
			}
			for k, v := range tc.change {
				if v == "" {
					form.Del(k)
				} else {
					form.Set(k, v)
				}
			}
			if r := post(tc.ch, form); r.status != http.StatusSeeOther || r.header.Get("Location") != devPage+"#config-"+tc.ch {
				t.Fatalf("changed form: %d %s", r.status, r.body)
			}
			if got := h.storedJSON(tc.ch); !sameJSON(t, got, tc.want) {
				t.Errorf("stored\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestChannelFormLists: "Add point" and "Remove point N" show the form
// again with one item more or less, keeping what was typed and saving
// nothing; Save then stores the list.
func TestChannelFormLists(t *testing.T) { stores.Run(t, testChannelFormLists) }

func testChannelFormLists(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleMember)
	devPage := "/panel/devices/" + h.device.ID
	before := h.state()
	form := channelForm(t, c.get(devPage).body, "rs485-1")
	form.Set("baudRate", "19200") // typed before adding: kept
	form.Set("action", "add points")
	r := c.post(devPage+"/channels/rs485-1", form)
	if r.status != http.StatusOK || h.state() != before {
		t.Fatalf("Add point: %d, or it saved", r.status)
	}
	for _, want := range []string{`<details id="config-rs485-1" class="channel-config" open>`,
		`<input id="f-rs485-1-points-1-name" name="points[1].name" type="text" value="" aria-describedby="f-rs485-1-points-1-name-hint" autofocus>`,
		`<label for="f-rs485-1-points-1-name">Point 2: name</label>`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("after Add point the page lacks %s", want)
		}
	}
	if !hasField(r.body, "f-rs485-1-baudRate", "19200") || !hasField(r.body, "f-rs485-1-points-1-intervalMs", "1000") ||
		!hasField(r.body, "f-rs485-1-points-1-function", "holding") || !hasField(r.body, "f-rs485-1-points-1-type", "") {
		t.Error("Add point lost a typed value or shows no defaults in the new point")
	}
	form = channelForm(t, r.body, "rs485-1")
	form.Set("points[1].name", "flow")
	form.Set("points[1].register", "20")
	form.Set("points[1].type", "u16")
	form.Set("points[1].unit", "l/min")
	form.Set("action", "add polls")
	r = c.post(devPage+"/channels/rs485-1", form)
	form = channelForm(t, r.body, "rs485-1")
	form.Set("polls[0].slaveId", "9")
	form.Set("action", "remove points[0]")
	r = c.post(devPage+"/channels/rs485-1", form)
	if r.status != http.StatusOK || h.state() != before || strings.Contains(r.body, `value="boiler_temp"`) || !hasField(r.body, "f-rs485-1-points-0-name", "flow") {
		t.Fatalf("Remove point 1: %d, saved, or the wrong point went", r.status)
	}
	form = channelForm(t, r.body, "rs485-1")
	form.Set("action", "save")
	if r := c.post(devPage+"/channels/rs485-1", form); r.status != http.StatusSeeOther {
		t.Fatalf("Save: %d %s", r.status, r.body)
	}
	want := `{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"none","stopBits":1,"mode":"modbus_rtu_master","slaveId":1,"tx":{"enabled":false,"intervalMs":0,"register":0,"value":0},
	  "poll":{"enabled":true,"intervalMs":1000,"register":0,"count":2,"function":"holding"},
	  "polls":[{"enabled":true,"intervalMs":1000,"register":0,"count":2,"function":"holding","slaveId":9}],
	  "points":[{"name":"flow","slaveId":1,"function":"holding","register":20,"type":"u16","order":"ABCD","scale":1,"unit":"l/min","intervalMs":1000}]}`
	if got := h.storedJSON("rs485-1"); !sameJSON(t, got, want) {
		t.Errorf("stored\n%s\nwant\n%s", got, want)
	}
	// A canfd signal added through the form gets the DBC defaults.
	form = channelForm(t, c.get(devPage).body, "canfd-1")
	form.Set("action", "add points")
	form = channelForm(t, c.post(devPage+"/channels/canfd-1", form).body, "canfd-1")
	for k, v := range map[string]string{"points[0].name": "speed", "points[0].canId": "18fef100", "points[0].startBit": "8",
		"points[0].length": "16", "points[0].scale": "0.00390625", "points[0].unit": "km/h", "points[0].max": "250.5"} {
		form.Set(k, v)
	}
	form.Del("action")
	if r := c.post(devPage+"/channels/canfd-1", form); r.status != http.StatusSeeOther {
		t.Fatalf("Save canfd-1: %d %s", r.status, r.body)
	}
	want = `{"kind":"canfd","nominalBitrate":500000,"dataBitrate":2000000,"samplePoint":0.875,"listenOnly":false,"tx":{"enabled":false,"intervalMs":0,"canId":"","dataHex":""},
	  "points":[{"name":"speed","canId":"0x18FEF100","startBit":8,"length":16,"byteOrder":"little","scale":0.00390625,"unit":"km/h","max":250.5,"intervalMs":1000}]}`
	if got := h.storedJSON("canfd-1"); !sameJSON(t, got, want) {
		t.Errorf("stored\n%s\nwant\n%s", got, want)
	}
}

// TestChannelFormErrorKeepsInput: a bad value is shown beside its field
// (aria-invalid, aria-describedby), every other input is kept as typed, and
// nothing is saved.
func TestChannelFormErrorKeepsInput(t *testing.T) { stores.Run(t, testChannelFormErrorKeepsInput) }

func testChannelFormErrorKeepsInput(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleMember)
	devPage := "/panel/devices/" + h.device.ID
	before := h.state()
	for _, tc := range []struct {
		ch, field, value, msg string
		keep                  map[string]string // other fields changed, by id: shown as typed
	}{
		{"canfd-1", "samplePoint", "0.99", "must be between 0.5 and 0.95 (got 0.99)",
			map[string]string{"nominalBitrate": "250000", "tx.dataHex": "01 02 0x"}},
		{"uart-1", "tx.intervalMs", "soon", "Enter a whole number.", map[string]string{"tx.dataHex": "41 54", "parity": "even"}},
		{"rs485-1", "points[0].name", "Boiler Temp", `must match [a-z][a-z0-9_]{0,31} (got &#34;Boiler Temp&#34;)`,
			map[string]string{"poll.count": "7", "points[0].unit": "K"}},
		{"gpio-1", "debounceMs", "5000", "must be between 0 and 1000 (got 5000)", map[string]string{"pull": "none"}},
	} {
		form := channelForm(t, c.get(devPage).body, tc.ch)
		form.Set(tc.field, tc.value)
		for k, v := range tc.keep {
			form.Set(k, v)
		}
		r := c.post(devPage+"/channels/"+tc.ch, form)
		if r.status != http.StatusBadRequest {
			t.Fatalf("%s %s=%s: %d", tc.ch, tc.field, tc.value, r.status)
		}
		id := "f-" + tc.ch + "-" + strings.NewReplacer(".", "-", "[", "-", "]", "").Replace(tc.field)
		beside := regexp.MustCompile(`(?s)<(input|select) id="` + regexp.QuoteMeta(id) + `"[^>]*aria-describedby="[^"]*` + regexp.QuoteMeta(id) + `-error"[^>]*aria-invalid="true"[^>]*>.*?<p class="field-error" id="` + regexp.QuoteMeta(id) + `-error">` + regexp.QuoteMeta(tc.msg) + `</p>`)
		if !beside.MatchString(r.body) {
			t.Errorf("%s: no error %q beside %s", tc.ch, tc.msg, id)
		}
		if !hasField(r.body, id, tc.value) {
			t.Errorf("%s: the bad value %q is not kept", tc.ch, tc.value)
		}
		for k, v := range tc.keep {
			kid := "f-" + tc.ch + "-" + strings.NewReplacer(".", "-", "[", "-", "]", "").Replace(k)
			if !hasField(r.body, kid, v) {
				t.Errorf("%s: %s lost what was typed (%q)", tc.ch, k, v)
			}
		}
		if !strings.Contains(r.body, `<details id="config-`+tc.ch+`" class="channel-config" open>`) {
			t.Errorf("%s: the form is not shown open", tc.ch)
		}
	}
	// A list over its bound (a form no page offers: Add stops at 64) is
	// refused with the error under the list.
	form := channelForm(t, c.get(devPage).body, "rs485-1")
	for i := range serialcfg.MaxPoints + 1 {
		p := fmt.Sprintf("points[%d].", i)
		form.Set(p+"name", fmt.Sprintf("p%d", i))
		form.Set(p+"function", "holding")
		form.Set(p+"register", fmt.Sprint(i))
		form.Set(p+"type", "u16")
	}
	r := c.post(devPage+"/channels/rs485-1", form)
	if r.status != http.StatusBadRequest || !regexp.MustCompile(`<fieldset class="section list" id="s-rs485-1-points" aria-describedby="s-rs485-1-points-hint s-rs485-1-points-error">\s*<legend>Points</legend>(?s:.*?)<p class="field-error" id="s-rs485-1-points-error" role="alert">at most 64 points per channel \(got 65\)</p>`).MatchString(r.body) {
		t.Errorf("65 points: %d, or no error under the list", r.status)
	}
	if strings.Count(r.body, ">Add point</button>") != 2 { // rs485-2's and canfd-1's
		t.Errorf("Add point is offered at the bound (%d on the page)", strings.Count(r.body, ">Add point</button>"))
	}
	if h.state() != before {
		t.Error("a refused form saved something")
	}
}

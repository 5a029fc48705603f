package api_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/dialects"
)

// TestLenientInputRefused: member names are matched exactly and once;
// CAN ids and hex bytes have one stored spelling (stray whitespace refused);
// time parameters stay within years 0001 to 9999.
func TestLenientInputRefused(t *testing.T) {
	t.Parallel()
	stores.Run(t, testLenientInputRefused)
}

func testLenientInputRefused(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	serial := api.Prefix + "/devices/" + d.ID + "/serial"

	for _, tc := range []struct{ name, body, field string }{
		{"member in another case", `{"Mode":"both"}`, "Mode"},
		{"member given twice", `{"mode":"both","mode":"managed"}`, "mode"},
		{"case twin given twice", `{"mode":"both","MODE":"managed"}`, "MODE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.req(http.MethodPatch, serial, e.keyA, tc.body)
			r.want(t, http.StatusBadRequest, "validation_error")
			if !strings.HasPrefix(r.errMessage(), tc.field+":") {
				t.Errorf("message %q does not name %s", r.errMessage(), tc.field)
			}
		})
	}
	if r := e.get("/devices/"+d.ID+"/serial", e.keyA); !strings.Contains(string(r.body), `"mode":"managed"`) {
		t.Errorf("a refused body changed the mode: %s", r.body)
	}

	canfd := serial + "/channels/canfd-1"
	body := func(canID, data string) string {
		return `{"kind":"canfd","nominalBitrate":500000,"dataBitrate":2000000,"samplePoint":0.8,` +
			`"tx":{"enabled":true,"intervalMs":1000,"canId":"` + canID + `","dataHex":"` + data + `"}}`
	}
	for _, tc := range []struct{ name, canID, data, field string }{
		{"canId with a space", ` 0x123`, "01", "tx.canId"},
		{"canId with a tab", `0x123\t`, "01", "tx.canId"},
		{"canId with a newline", `0x1\n23`, "01", "tx.canId"},
		{"dataHex with a tab", "0x123", `01\t02`, "tx.dataHex"},
		{"dataHex with a newline", "0x123", `01 02\n`, "tx.dataHex"},
		{"dataHex with two spaces", "0x123", `01  02`, "tx.dataHex"},
		{"dataHex with a leading space", "0x123", ` 01 02`, "tx.dataHex"},
		{"nested member twice", "0x123", `01","dataHex":"02`, "tx.dataHex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.req(http.MethodPut, canfd, e.keyA, body(tc.canID, tc.data))
			r.want(t, http.StatusBadRequest, "validation_error")
			if !strings.HasPrefix(r.errMessage(), tc.field+":") {
				t.Errorf("message %q does not name %s", r.errMessage(), tc.field)
			}
		})
	}
	nested := strings.Replace(body("0x123", "01"), `"intervalMs"`, `"IntervalMs"`, 1)
	r := e.req(http.MethodPut, canfd, e.keyA, nested)
	r.want(t, http.StatusBadRequest, "validation_error")
	if !strings.HasPrefix(r.errMessage(), "tx.IntervalMs: unknown field") {
		t.Errorf("nested member in another case: %q", r.errMessage())
	}
	for _, tc := range []struct{ canID, data, wantID, wantData string }{
		{"0X1a", "de ad be ef", "0x1A", "DE AD BE EF"},
		{"7ff", "deadbeef", "0x7FF", "DE AD BE EF"},
		{"0x00000123", "", "0x123", ""},
	} {
		r := e.req(http.MethodPut, canfd, e.keyA, body(tc.canID, tc.data))
		r.want(t, http.StatusOK, "")
		want := `"canId":"` + tc.wantID + `","dataHex":"` + tc.wantData + `"`
		if !strings.Contains(string(r.body), want) {
			t.Errorf("PUT canId %q dataHex %q answered %s, want %s", tc.canID, tc.data, r.body, want)
		}
		if got := e.get("/devices/"+d.ID+"/serial/channels/canfd-1", e.keyA); !strings.Contains(string(got.body), want) {
			t.Errorf("stored %s, want %s", got.body, want)
		}
	}
	r = e.req(http.MethodPut, serial+"/channels/uart-1", e.keyA,
		`{"kind":"uart","baudRate":9600,"dataBits":8,"parity":"none","stopBits":1,"flowControl":"none","tx":{"enabled":true,"intervalMs":0,"dataHex":"410d0a"}}`)
	r.want(t, http.StatusOK, "")
	if !strings.Contains(string(r.body), `"dataHex":"41 0D 0A"`) {
		t.Errorf("uart dataHex stored as sent: %s", r.body)
	}

	metrics := "/devices/" + d.ID + "/metrics"
	for _, q := range []string{"to=0000-01-01T00:00:00Z", "from=0000-12-31T23:00:00Z", "to=0001-01-01T00:30:00%2B01:00", "to=10000-01-01T00:00:00Z"} {
		e.get(metrics+"?"+q, e.keyA).want(t, http.StatusBadRequest, "validation_error")
	}
	r = e.get(metrics+"?to=0001-01-01T00:30:00Z", e.keyA)
	r.want(t, http.StatusOK, "")
	if !strings.Contains(string(r.body), `"window":{"from":"0001-01-01T00:00:00.000Z","to":"0001-01-01T00:30:00.000Z"}`) {
		t.Errorf("window near year 1: %s", r.body)
	}
}

// TestStorageFullAnswers503: a write refused because the store's disk is
// full (SQLite's SQLITE_FULL on a real database on a full filesystem) is a
// 503 service_unavailable in the error envelope, with Retry-After, and
// writes succeed again once space is freed. It runs on SQLite only: the
// full disk is the one under the relay's database file.
//
// A commit only appends to the WAL; cloud/sqlite's checkpointer copies the
// WAL into relay.db every 500 ms, after which the next commit restarts the
// WAL from its beginning, over space the file already has (and when idle
// it truncates the WAL to zero bytes). So a full disk refuses a commit only
// when the WAL must grow past its size, and rewriting the same row never
// makes it: after a checkpoint that copied the WAL of the setup (about
// 230 KiB), such PATCHes reuse it for ever. Here each request stores a new
// device's forwarding (a row of about 1.5 KiB, a new page of relay.db), so
// the checkpointer soon cannot extend relay.db, the WAL can no longer
// restart, and every commit appends to it until the disk refuses one:
// within a bounded number of requests whatever the checkpointer did before.
func TestStorageFullAnswers503(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a size-limited tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	e := &env{}
	newEnvOn(t, e, dialects.SQLiteAt(t, filepath.Join(dir, "relay.db"), e.now))
	devices := make([]resource.DeviceDetail, 64) // 64 new rows of 1.5 KiB: more than relay.db's slack
	for i := range devices {
		devices[i] = e.device(e.orgA.ID, "IG-500")
	}
	// Fill the filesystem the database is on.
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	// The disk holds 2 MiB and each commit appends at least one 2 KiB page
	// to the WAL once it cannot restart: 2,000 requests are far more than
	// it takes.
	const most = 2000
	var r resp
	n := 0
	for ; n < most; n++ {
		d := devices[n%len(devices)]
		r = e.req(http.MethodPatch, api.Prefix+"/devices/"+d.ID+"/serial", e.keyA, fmt.Sprintf(`{"webhookUrl":"https://hooks.example.com/%d/%s"}`, n, strings.Repeat("x", 1500)))
		if r.status != http.StatusOK {
			break
		}
	}
	if n == most {
		sizes := ""
		for _, name := range []string{"relay.db", "relay.db-wal"} {
			if st, err := os.Stat(filepath.Join(dir, name)); err == nil {
				sizes += fmt.Sprintf(" %s %d B", name, st.Size())
			}
		}
		t.Fatalf("%d PATCHes storing new data all answered 200 on a full disk (%s): the store wrote them somewhere", most, sizes)
	}
	r.want(t, http.StatusServiceUnavailable, "service_unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	os.Remove(filepath.Join(dir, "filler"))
	e.req(http.MethodPatch, api.Prefix+"/devices/"+devices[0].ID+"/serial", e.keyA, `{"mode":"both"}`).want(t, http.StatusOK, "")
}

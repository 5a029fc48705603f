package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fleet/fleet/hw/modbus/modbustest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/ptytest"
	"github.com/fleet/fleet/test/rig/relaystub"
	"github.com/fleet/fleet/test/rig/testnet"
)

func channel(hb protocol.Heartbeat, id string) protocol.ChannelState {
	for _, c := range hb.Channels {
		if c.ID == id {
			return c
		}
	}
	return protocol.ChannelState{}
}

// TestAgentLinuxHardware runs the agent with --hw linux on real termios
// devices (pseudo-terminals): uart-1 on a pty, rs485-1 on a path that
// appears later (a symlink to a pty with a Modbus slave simulator), and the
// CAN and GPIO channels on devices this machine lacks. Then passthrough mode
// exposes uart-1 over TCP.
func TestAgentLinuxHardware(t *testing.T) {
	uartCtl, uartPath := ptytest.Open(t)
	sim := modbustest.New(modbustest.Options{})
	rsPath := ptytest.Serve(t, func(ctx context.Context, f *os.File) { sim.Serve(ctx, modbustest.FileLine{F: f}) })

	dir := t.TempDir()
	rsLink := filepath.Join(dir, "ttyRS485")
	base := testnet.FreePort(t)
	r := relaystub.Start("tok-123")
	defer r.Close()
	c, err := ParseConfig([]string{
		"--relay", r.URL, "--token", "tok-123", "--hw", "linux", "--model", "IG-500",
		"--state-dir", filepath.Join(dir, "state"), "--heartbeat", "1s", "--metrics-interval", "1h",
		"--port", "uart-1=" + uartPath, "--port", "rs485-1=" + rsLink, "--port", "rs485-2=" + filepath.Join(dir, "none"),
		"--port", "canfd-1=nocan9", "--port", "gpio-1=gpiochip99:1", "--port", "gpio-2=gpiochip99:2",
		"--port", "gpio-3=gpiochip99:3", "--port", "gpio-4=gpiochip99:4",
		"--recheck-interval", "100ms", "--vpn-interface", "none", "--dev-root", "none",
		"--passthrough-listen", "127.0.0.1:" + strconv.Itoa(base),
		"--proc-root", "metrics/testdata/normal/proc", "--sys-root", "metrics/testdata/normal/sys",
	}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, c)

	waitFor(t, "first heartbeat", func() bool { return len(r.LastHeartbeat().Channels) == 8 })
	hb := r.LastHeartbeat()
	if u := channel(hb, "uart-1"); !u.Available || u.Error != "" {
		t.Fatalf("uart-1 on a pty: %+v", u)
	}
	for _, id := range []string{"rs485-1", "rs485-2", "canfd-1", "gpio-1", "gpio-4"} {
		if s := channel(hb, id); s.Available || s.Error != "device missing" {
			t.Fatalf("%s without its device: %+v", id, s)
		}
	}

	// Bytes on the line show in uart-1's live value.
	if _, err := uartCtl.Write([]byte("hello fleet\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "uart live line", func() bool { return channel(r.LastHeartbeat(), "uart-1").Live == "hello fleet" })

	// The RS485 adapter appears: the channel opens and polls the slave
	// (default poll: slave 1, holding registers 0 and 1 = 100, 101).
	if err := os.Symlink(rsPath, rsLink); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rs485-1 polling", func() bool {
		s := channel(r.LastHeartbeat(), "rs485-1")
		return s.Available && s.Live == "100 101"
	})
	waitFor(t, "serial.channel_available", func() bool { return len(r.Events(protocol.EventChannelAvailable)) == 1 })
	var data map[string]string
	json.Unmarshal(r.Events(protocol.EventChannelAvailable)[0].Data, &data)
	if data["channelId"] != "rs485-1" || data["device"] != rsLink {
		t.Fatalf("channel_available data %v", data)
	}

	// Passthrough: uart-1 (first serial channel) listens on BASE, rs485-1 on BASE+1.
	if err := r.Push(protocol.Config{Version: 2, Enabled: true, Mode: "passthrough"}); err != nil {
		t.Fatal(err)
	}
	uartAddr := fmt.Sprintf("127.0.0.1:%d", base)
	waitFor(t, "passthrough addresses", func() bool {
		hb := r.LastHeartbeat()
		return channel(hb, "uart-1").PassthroughAddress == uartAddr &&
			channel(hb, "rs485-1").PassthroughAddress == fmt.Sprintf("127.0.0.1:%d", base+1) &&
			channel(hb, "rs485-2").PassthroughAddress == ""
	})
	conn, err := net.DialTimeout("tcp", uartAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("RAW>")); err != nil {
		t.Fatal(err)
	}
	got := readUntil(t, uartCtl, []byte("RAW>"))
	if !bytes.Contains(got, []byte("RAW>")) {
		t.Fatalf("line got %q", got)
	}
	uartCtl.Write([]byte("<BACK"))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	var back []byte
	for !bytes.Contains(back, []byte("<BACK")) {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("client read: %v (got %q)", err, back)
		}
		back = append(back, buf[:n]...)
	}

	// Back to managed: the listeners close.
	if err := r.Push(protocol.Config{Version: 3, Enabled: true, Mode: "managed"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "passthrough closed", func() bool { return channel(r.LastHeartbeat(), "uart-1").PassthroughAddress == "" })
}

func readUntil(t *testing.T, f *os.File, want []byte) []byte {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var got []byte
	buf := make([]byte, 256)
	for !bytes.Contains(got, want) && time.Now().Before(deadline) {
		f.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, _ := f.Read(buf)
		got = append(got, buf[:n]...)
	}
	return got
}

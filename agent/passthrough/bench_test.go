package passthrough_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/agent/passthrough"
	"github.com/fleet/fleet/hw/modbus"
	"github.com/fleet/fleet/hw/modbus/modbustest"
	"github.com/fleet/fleet/hw/uart"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/ptytest"
	"github.com/fleet/fleet/test/rig/testnet"
)

// BenchmarkPassthroughVsSer2net measures a raw TCP client reaching a device
// on a pseudo-terminal pair through our passthrough and through ser2net
// (Debian's package), one after the other on the same pty pair: round-trip
// latency of 32-byte messages and echo throughput of 4 MiB, with a device
// that echoes every byte at once. The target: at least as fast as ser2net,
// taken at its fastest (chardelay off; its default, which waits at least
// 1 ms to batch serial bytes, is printed too).
// A second comparison runs Modbus RTU requests through an rs485 channel,
// where our passthrough holds the bus per transaction and keeps the
// 3.5-character silence between frames that ser2net does not know about;
// it is shown for information.
func BenchmarkPassthroughVsSer2net(b *testing.B) {
	ser2net, err := exec.LookPath("ser2net")
	if err != nil {
		fmt.Println("passthrough bench: ser2net is not installed (make bench installs it); measuring ours alone")
	}

	// Raw byte stream on a uart channel.
	path := ptytest.Serve(b, echoDevice)

	ours := measureOurs(b, path, "uart", func(c net.Conn) result { return measureRaw(b, c) })
	var theirs result
	if ser2net != "" {
		def := measureSer2netWith(b, ser2net, path, "true", func(c net.Conn) result { return measureRaw(b, c) })
		fmt.Printf("passthrough raw uart     ser2net with its default chardelay: round trip p50 %.1f us, throughput %.2f MB/s\n",
			float64(def.p50.Nanoseconds())/1000, def.mbps)
		theirs = measureSer2net(b, ser2net, path, func(c net.Conn) result { return measureRaw(b, c) })
	}
	report(b, "raw uart", ours, theirs, true)

	// Modbus RTU transactions on an rs485 channel.
	sim := modbustest.New(modbustest.Options{FrameByLength: true})
	mpath := ptytest.Serve(b, func(ctx context.Context, f *os.File) { sim.Serve(ctx, modbustest.FileLine{F: f}) })
	mours := measureOurs(b, mpath, "rs485", func(c net.Conn) result { return measureModbus(b, c) })
	var mtheirs result
	if ser2net != "" {
		mtheirs = measureSer2net(b, ser2net, mpath, func(c net.Conn) result { return measureModbus(b, c) })
	}
	report(b, "modbus rs485", mours, mtheirs, false)
	if st := sim.Stats(); st.BadFrames != 0 {
		b.Fatalf("slave saw %d corrupted frames", st.BadFrames)
	}
}

type result struct {
	p50, p99 time.Duration
	mbps     float64 // MB/s echoed, 0 when not measured
}

func echoDevice(ctx context.Context, f *os.File) {
	buf := make([]byte, 64<<10)
	line := modbustest.FileLine{F: f}
	for ctx.Err() == nil {
		n, err := line.Read(buf, 50*time.Millisecond)
		if err != nil {
			return
		}
		if n > 0 {
			if _, err := f.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

func measureOurs(b *testing.B, path, kind string, measure func(net.Conn) result) result {
	var raw passthrough.RawServer
	switch kind {
	case "uart":
		p, err := uart.Open(context.Background(), path, serialcfg.Config{Kind: "uart", UART: &serialcfg.UART{
			Kind: "uart", BaudRate: 115200, DataBits: 8, Parity: "none", StopBits: 1, FlowControl: "none"}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		raw = p
	case "rs485":
		p, err := modbus.Open(context.Background(), path, serialcfg.Config{Kind: "rs485", RS485: &serialcfg.RS485{
			Kind: "rs485", BaudRate: 115200, DataBits: 8, Parity: "none", StopBits: 1, Mode: "modbus_rtu_master", SlaveID: 1}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		raw = p
	}
	s, err := passthrough.New(passthrough.Config{Listen: "127.0.0.1:" + strconv.Itoa(testnet.FreePort(b))}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Apply(passthrough.ModePassthrough, []passthrough.Channel{{ID: kind + "-1", Raw: raw}}); err != nil {
		b.Fatal(err)
	}
	c, err := net.Dial("tcp", s.PassthroughAddress(kind+"-1"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(true)
	return measure(c)
}

func measureSer2net(b *testing.B, bin, path string, measure func(net.Conn) result) result {
	// chardelay off: ser2net's lowest-latency setting (by default it waits
	// two characters, at least 1 ms, before forwarding serial data).
	return measureSer2netWith(b, bin, path, "false", measure)
}

func measureSer2netWith(b *testing.B, bin, path, chardelay string, measure func(net.Conn) result) result {
	port := testnet.FreePort(b)
	dir := b.TempDir()
	cfg := filepath.Join(dir, "ser2net.yaml")
	conf := fmt.Sprintf(`connection: &bench
  accepter: tcp,127.0.0.1,%d
  enable: on
  options:
    kickolduser: false
    chardelay: %s
    mdns: false
  connector: serialdev,%s,115200n81,local
`, port, chardelay, path)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-n", "-u", "-c", cfg, "-P", filepath.Join(dir, "ser2net.pid"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var c net.Conn
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		c, err = net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("ser2net did not listen: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(true)
	// ser2net opens the device when the client connects; let it settle.
	time.Sleep(100 * time.Millisecond)
	return measure(c)
}

func measureRaw(b *testing.B, c net.Conn) result {
	msg := make([]byte, 32)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	got := make([]byte, len(msg))
	rtts := make([]time.Duration, 0, 2000)
	for i := range 2100 {
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil {
			b.Fatalf("round trip %d: %v", i, err)
		}
		if i >= 100 { // the first ones warm up
			rtts = append(rtts, time.Since(start))
		}
	}
	// Throughput: 4 MiB written while the echo is read back.
	const total = 4 << 20
	chunk := make([]byte, 16<<10)
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		for sent := 0; sent < total; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	buf := make([]byte, 64<<10)
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	for recv := 0; recv < total; {
		n, err := c.Read(buf)
		recv += n
		if err != nil {
			b.Fatalf("throughput: %d of %d bytes echoed: %v", recv, total, err)
		}
	}
	elapsed := time.Since(start)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	r := percentiles(rtts)
	r.mbps = float64(total) / elapsed.Seconds() / 1e6
	return r
}

func measureModbus(b *testing.B, c net.Conn) result {
	rtts := make([]time.Duration, 0, 1000)
	for i := range 1100 {
		req := readReq(1, 3, uint16(i%100), 10)
		start := time.Now()
		reply, err := transact(c, req, 25)
		if err != nil || !modbus.CheckCRC(reply) {
			b.Fatalf("transaction %d: % x %v", i, reply, err)
		}
		if i >= 100 {
			rtts = append(rtts, time.Since(start))
		}
	}
	return percentiles(rtts)
}

func percentiles(d []time.Duration) result {
	slices.Sort(d)
	return result{p50: d[len(d)/2], p99: d[len(d)*99/100]}
}

func report(b *testing.B, name string, ours, theirs result, target bool) {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	unit := strings.ReplaceAll(name, " ", "-")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(us(ours.p50), unit+"-p50-us")
	if ours.mbps > 0 {
		b.ReportMetric(ours.mbps, unit+"-MB/s")
	}
	line := fmt.Sprintf("passthrough %-12s ours: round trip p50 %7.1f us p99 %7.1f us", name, us(ours.p50), us(ours.p99))
	if ours.mbps > 0 {
		line += fmt.Sprintf(", throughput %6.2f MB/s", ours.mbps)
	}
	if theirs.p50 == 0 {
		fmt.Println(line)
		return
	}
	b.ReportMetric(us(theirs.p50), unit+"-ser2net-p50-us")
	line += fmt.Sprintf("\n            %-12s ser2net (chardelay off): round trip p50 %7.1f us p99 %7.1f us", "", us(theirs.p50), us(theirs.p99))
	if theirs.mbps > 0 {
		b.ReportMetric(theirs.mbps, unit+"-ser2net-MB/s")
		line += fmt.Sprintf(", throughput %6.2f MB/s", theirs.mbps)
	}
	if target {
		ok := ours.p50 <= theirs.p50 && ours.mbps >= theirs.mbps
		verdict := "meets target"
		if !ok {
			verdict = "MISSES target"
		}
		line += fmt.Sprintf("\n            target: latency and throughput at least as good as ser2net: %s", verdict)
	} else {
		line += "\n            (for information: ours keeps the 3.5-character silence between frames and holds the bus per transaction)"
	}
	fmt.Println(line)
}

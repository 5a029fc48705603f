// Command modbus-sim is the Modbus RTU slave simulator of hw/modbus/modbustest
// as a program: it serves a serial tty (a real port, or the host end of a
// qemu chardev pty) or a fresh pseudo-terminal pair whose terminal side it
// links at a path, with optional baud-rate pacing and injected faults.
//
//	modbus-sim --pty-link /tmp/ttyRS485 --ids 1,7 --fault 7:exception=2
//	modbus-sim --tty /dev/pts/5 --baud 9600 --parity even --pace
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/fleet/fleet/hw/modbus/modbustest"
	"github.com/fleet/fleet/hw/serialport"
)

type faults []string

func (f *faults) String() string     { return strings.Join(*f, ",") }
func (f *faults) Set(s string) error { *f = append(*f, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "modbus-sim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("modbus-sim", flag.ContinueOnError)
	tty := fs.String("tty", "", "serve this serial device")
	ptyLink := fs.String("pty-link", "", "create a pty pair and link its terminal side at this path")
	baud := fs.Int("baud", 9600, "baud rate (tty settings, and pacing with --pace)")
	dataBits := fs.Int("data-bits", 8, "data bits")
	parity := fs.String("parity", "even", "parity: none, even, odd")
	stopBits := fs.Int("stop-bits", 1, "stop bits")
	pace := fs.Bool("pace", false, "pace replies at --baud (needed on a pty, which has no baud rate)")
	ids := fs.String("ids", "", "comma-separated slave ids to serve (default: every id)")
	verbose := fs.Bool("v", false, "log every request")
	var fl faults
	fs.Var(&fl, "fault", "inject a fault [SLAVE:]no-reply|bad-crc|exception=N|delay=D|split=D (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*tty == "") == (*ptyLink == "") {
		return errors.New("give exactly one of --tty or --pty-link")
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	opts := modbustest.Options{Log: log}
	if *pace {
		opts.Baud = *baud
		s := serialport.Settings{BaudRate: *baud, DataBits: *dataBits, Parity: *parity, StopBits: *stopBits}
		opts.CharBits = s.CharBits()
	}
	for _, f := range strings.Split(*ids, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		id, err := strconv.Atoi(f)
		if err != nil || id < 1 || id > 247 {
			return fmt.Errorf("--ids: %q is not a slave id 1..247", f)
		}
		opts.IDs = append(opts.IDs, id)
	}
	sim := modbustest.New(opts)
	for _, f := range fl {
		slave, fault, err := modbustest.ParseFault(f)
		if err != nil {
			return err
		}
		sim.SetFault(slave, fault)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var line modbustest.Line
	if *tty != "" {
		p, err := serialport.Open(*tty, serialport.Settings{BaudRate: *baud, DataBits: *dataBits, Parity: *parity, StopBits: *stopBits}, log)
		if err != nil {
			return err
		}
		defer p.Close()
		line = p
		log.Info("serving", "tty", *tty, "baud", *baud)
	} else {
		ctl, path, err := serialport.OpenPTY()
		if err != nil {
			return err
		}
		defer ctl.Close()
		os.Remove(*ptyLink)
		if err := os.Symlink(path, *ptyLink); err != nil {
			return err
		}
		defer os.Remove(*ptyLink)
		line = modbustest.FileLine{F: ctl}
		log.Info("serving", "pty", path, "link", *ptyLink)
	}
	err := sim.Serve(ctx, line)
	st := sim.Stats()
	log.Info("stopped", "requests", st.Requests, "replies", st.Replies, "badFrames", st.BadFrames)
	return err
}

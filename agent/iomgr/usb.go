package iomgr

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// USBPatterns are the device names of USB serial adapters under /dev:
// ttyUSB* (FTDI, CP210x, CH34x and other usb-serial drivers) and ttyACM*
// (CDC-ACM modems and boards).
var usbPrefixes = []string{"ttyUSB", "ttyACM"}

// USBWatcher reports USB serial adapters appearing and disappearing under a
// /dev root by comparing directory listings; it needs neither udev nor
// netlink, so it works in minimal images and in tests on a temp dir. The
// adapters present at the first Scan are recorded without events.
type USBWatcher struct {
	root  string
	emit  func(Event)
	log   *slog.Logger
	known map[string]bool
}

// NewUSBWatcher returns a watcher of root (normally /dev).
func NewUSBWatcher(root string, emit func(Event), log *slog.Logger) *USBWatcher {
	return &USBWatcher{root: root, emit: emit, log: log}
}

// Scan lists the adapters and emits usb.attached / usb.detached for changes.
func (w *USBWatcher) Scan() {
	ents, err := os.ReadDir(w.root)
	if err != nil {
		w.log.Debug("usb scan", "root", w.root, "err", err)
		return
	}
	now := map[string]bool{}
	for _, e := range ents {
		for _, p := range usbPrefixes {
			if strings.HasPrefix(e.Name(), p) {
				now[filepath.Join(w.root, e.Name())] = true
			}
		}
	}
	first := w.known == nil
	prev := w.known
	w.known = now
	if first {
		return
	}
	for _, d := range sortedKeys(now) {
		if !prev[d] {
			w.log.Info("usb serial adapter attached", "device", d)
			w.emit(Event{Type: protocol.EventUSBAttached, Severity: resource.SeverityInfo,
				Message: fmt.Sprintf("USB serial adapter attached: %s", d), Data: map[string]any{"device": d}})
		}
	}
	for _, d := range sortedKeys(prev) {
		if !now[d] {
			w.log.Info("usb serial adapter detached", "device", d)
			w.emit(Event{Type: protocol.EventUSBDetached, Severity: resource.SeverityWarning,
				Message: fmt.Sprintf("USB serial adapter detached: %s", d), Data: map[string]any{"device": d}})
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

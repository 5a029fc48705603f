package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// detectTimezone returns the IANA zone: $TZ, then /etc/timezone, then the
// target of the /etc/localtime symlink, then "UTC".
func detectTimezone(etc string) string {
	if tz := strings.TrimPrefix(os.Getenv("TZ"), ":"); tz != "" && !strings.HasPrefix(tz, "/") {
		return tz
	}
	if b, err := os.ReadFile(filepath.Join(etc, "timezone")); err == nil {
		if tz := strings.TrimSpace(string(b)); tz != "" {
			return tz
		}
	}
	if target, err := os.Readlink(filepath.Join(etc, "localtime")); err == nil {
		if i := strings.Index(target, "zoneinfo/"); i >= 0 {
			return target[i+len("zoneinfo/"):]
		}
	}
	return "UTC"
}

// defaultVPN resolves VPNAuto: "wg0" when the interface exists or
// etc/wireguard/wg0.conf does (wg-quick's configuration), else "".
func defaultVPN(etc string) string {
	if _, err := net.InterfaceByName("wg0"); err == nil {
		return "wg0"
	}
	if _, err := os.Stat(filepath.Join(etc, "wireguard", "wg0.conf")); err == nil {
		return "wg0"
	}
	return ""
}

// osReleaseVersion returns PRETTY_NAME of an os-release file (falling back
// to NAME VERSION_ID), or "" when it cannot be read.
func osReleaseVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		vals[k] = strings.Trim(v, `"'`)
	}
	if v := vals["PRETTY_NAME"]; v != "" {
		return v
	}
	return strings.TrimSpace(vals["NAME"] + " " + vals["VERSION_ID"])
}

// defaultRouteIP returns the first IPv4 address of the interface holding the
// default route in procRoot/net/route, or "".
func defaultRouteIP(procRoot string) string {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return ""
	}
	routes, err := fs.NetRoute()
	if err != nil {
		return ""
	}
	best := -1
	for i, r := range routes {
		if r.Destination == 0 && r.Mask == 0 && r.Flags&0x1 != 0 { // RTF_UP
			if best < 0 || r.Metric < routes[best].Metric {
				best = i
			}
		}
	}
	if best < 0 {
		return ""
	}
	return interfaceIPv4(routes[best].Iface)
}

// interfaceIPv4 returns the first IPv4 address of the named interface, or "".
func interfaceIPv4(name string) string {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return ""
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// readStatus reads the status file: one of ONLINE, REBOOTING, UPDATING or
// ERROR (any case, surrounding space ignored). A missing or empty file is
// ONLINE; anything else is an error and counts as ONLINE.
func readStatus(path string) (resource.DeviceStatus, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return resource.StatusOnline, nil
	}
	if err != nil {
		return resource.StatusOnline, fmt.Errorf("status file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	s := resource.DeviceStatus(strings.ToUpper(strings.TrimSpace(line)))
	switch {
	case s == "":
		return resource.StatusOnline, nil
	case protocol.ReportedStatus(s):
		return s, nil
	}
	return resource.StatusOnline, fmt.Errorf("status file %s: %q is not ONLINE, REBOOTING, UPDATING or ERROR", path, s)
}

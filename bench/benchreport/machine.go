package benchreport

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Machine describes the machine a run used.
type Machine struct {
	CPU      string `json:"cpu"`      // model name from /proc/cpuinfo
	Cores    int    `json:"cores"`    // processors listed in /proc/cpuinfo
	MemBytes int64  `json:"memBytes"` // MemTotal from /proc/meminfo
	Kernel   string `json:"kernel"`   // /proc/sys/kernel/osrelease
	Go       string `json:"go"`       // Go version the benchmarks were built with
	Commit   string `json:"commit"`   // git describe --always --dirty
}

// Load is how busy the machine was at one moment: other processes on the
// same cores move every figure.
type Load struct {
	At time.Time `json:"at"`
	// LoadAvg is the first three fields of /proc/loadavg ("" when absent).
	LoadAvg string `json:"loadAvg,omitempty"`
	// CPUPressure is the "some" line of /proc/pressure/cpu without its
	// prefix ("avg10=1.00 avg60=0.50 avg300=0.20 total=123"; "" when the
	// kernel has no PSI).
	CPUPressure string `json:"cpuPressure,omitempty"`
}

// ReadMachine reads the CPU, memory and kernel from the proc file system
// at procRoot ("/proc" on a live machine); what it cannot read stays
// empty. Go and Commit are left to the caller.
func ReadMachine(procRoot string) Machine {
	var m Machine
	if b, err := os.ReadFile(filepath.Join(procRoot, "cpuinfo")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			key, val, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			key, val = strings.TrimSpace(key), strings.TrimSpace(val)
			switch key {
			case "processor":
				m.Cores++
			case "model name", "Model", "Hardware":
				if m.CPU == "" {
					m.CPU = val
				}
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(procRoot, "meminfo")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "MemTotal:" {
				kib, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemBytes = kib << 10
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel/osrelease")); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// ReadLoad reads the load average and the CPU pressure from the proc file
// system at procRoot, stamped with at.
func ReadLoad(procRoot string, at time.Time) Load {
	l := Load{At: at}
	if b, err := os.ReadFile(filepath.Join(procRoot, "loadavg")); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			l.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if b, err := os.ReadFile(filepath.Join(procRoot, "pressure/cpu")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "some "); ok {
				l.CPUPressure = strings.TrimSpace(rest)
			}
		}
	}
	return l
}

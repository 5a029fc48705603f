package benchreport

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// unit is a unit Convert knows: its family and its size in the family's
// base unit.
type unit struct {
	family string
	scale  float64
}

// units are the convertible units; any other unit compares only with
// itself ("req/s", "heartbeats/s", "% of a core").
var units = map[string]unit{
	"ns":    {"time", 1e-9},
	"µs":    {"time", 1e-6},
	"us":    {"time", 1e-6},
	"ms":    {"time", 1e-3},
	"s":     {"time", 1},
	"min":   {"time", 60},
	"B":     {"bytes", 1},
	"KiB":   {"bytes", 1 << 10},
	"MiB":   {"bytes", 1 << 20},
	"GiB":   {"bytes", 1 << 30},
	"kB":    {"bytes", 1e3},
	"MB":    {"bytes", 1e6},
	"GB":    {"bytes", 1e9},
	"B/s":   {"bytes/s", 1},
	"kB/s":  {"bytes/s", 1e3},
	"MB/s":  {"bytes/s", 1e6},
	"GB/s":  {"bytes/s", 1e9},
	"MiB/s": {"bytes/s", 1 << 20},
}

// Convert expresses v, measured in unit from, in unit to. Units convert
// within a family (time, bytes, bytes per second); an identical unit
// always converts.
func Convert(v float64, from, to string) (float64, error) {
	if from == to {
		return v, nil
	}
	f, okf := units[from]
	t, okt := units[to]
	if !okf || !okt || f.family != t.family {
		return 0, fmt.Errorf("unit %q does not convert to %q", from, to)
	}
	return v * f.scale / t.scale, nil
}

// FormatValue prints a figure with its unit: three significant digits
// below 100 without trailing zeros, whole numbers with thousands
// separators above ("3.53 ms", "0.5 %", "22,114 req/s").
func FormatValue(v float64, unit string) string {
	s := formatNumber(v)
	if strings.Contains(s, ".") {
		s = strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
	}
	if unit == "" {
		return s
	}
	return s + " " + unit
}

func formatNumber(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'f', -1, 64)
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return thousands(strconv.FormatFloat(math.Round(v), 'f', 0, 64))
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	// Three significant digits, never an exponent.
	digits := 2 - int(math.Floor(math.Log10(math.Abs(v))))
	return strconv.FormatFloat(v, 'f', digits, 64)
}

// thousands puts commas between groups of three digits of an integer.
func thousands(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// FormatTarget prints a target ("≥ 15,000 req/s", "< 5 ms"); rowUnit is
// the unit used when the target has none of its own.
func FormatTarget(t *Target, rowUnit string) string {
	if t == nil {
		return "—"
	}
	u := t.Unit
	if u == "" {
		u = rowUnit
	}
	return t.Op.Symbol() + " " + FormatValue(t.Value, u)
}

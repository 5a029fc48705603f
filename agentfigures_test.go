package fleet_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The agent's size, memory and CPU as README.md, docs/agent.md and
// docs/benchmarks.md state them are bench/results.md's: a size range must
// hold every architecture's measured size, a quoted figure must be the
// measured one. A new `make bench` that moves a figure fails here with the
// line to fix.

// agentResults reads bench/results.md's agent rows: "amd64", "arm64",
// "arm v7" (binary sizes, MiB), "rss" (MiB) and "cpu" (% of a core).
func agentResults(t *testing.T) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile("bench/results.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| agent \| ([^|]+) \| [^|]* \| ([\d.]+) (MiB|% of a core) \|`)
	out := map[string]float64{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("bench/results.md: %q: %v", m[0], err)
		}
		figure := strings.TrimSpace(m[1])
		switch {
		case strings.HasPrefix(figure, "static binary size, linux/"):
			out[strings.TrimPrefix(figure, "static binary size, linux/")] = v
		case strings.HasPrefix(figure, "fleet-agent RSS at defaults"):
			out["rss"] = v
		case strings.HasPrefix(figure, "fleet-agent CPU at defaults"):
			out["cpu"] = v
		}
	}
	for _, k := range []string{"amd64", "arm64", "arm v7", "rss", "cpu"} {
		if _, ok := out[k]; !ok {
			t.Fatalf("bench/results.md has no agent row for %s", k)
		}
	}
	return out
}

func TestAgentFiguresMatchResults(t *testing.T) {
	got := agentResults(t)
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The size as a range ("`CGO_ENABLED=0`, 12.8–13.7 MiB"), in README.md
	// and docs/agent.md at least once each, holding every architecture.
	sizeRange := regexp.MustCompile("`CGO_ENABLED=0`,\\s+(?:about\\s+)?([\\d.]+)[–-]([\\d.]+)\\s+MiB")
	for _, doc := range []string{"README.md", "docs/agent.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		ms := sizeRange.FindAllStringSubmatch(string(b), -1)
		if len(ms) == 0 {
			t.Errorf("%s states no size range of the agent binary (`CGO_ENABLED=0`, A–B MiB)", doc)
		}
		for _, m := range ms {
			lo, hi := num(m[1]), num(m[2])
			for _, arch := range []string{"amd64", "arm64", "arm v7"} {
				if got[arch] < lo || got[arch] > hi {
					t.Errorf("%s: %q, but bench/results.md measures %s at %.1f MiB", doc, m[0], arch, got[arch])
				}
			}
		}
	}
	// Quoted figures: docs/agent.md's "binaries A / B / C MiB ... RSS R MiB;
	// CPU P %" and docs/benchmarks.md's bench-agent rows.
	b, err := os.ReadFile("docs/agent.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`binaries\s+([\d.]+)\s+/\s+([\d.]+)\s+/\s+([\d.]+)\s+MiB\s+\(amd64 / arm64 / arm v7[^)]*\);\s+RSS\s+([\d.]+)\s+MiB;\s+CPU\s+([\d.]+)\s+%`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("docs/agent.md: no measured figures (binaries A / B / C MiB (amd64 / arm64 / arm v7); RSS R MiB; CPU P %)")
	}
	for i, k := range []string{"amd64", "arm64", "arm v7", "rss", "cpu"} {
		if num(m[i+1]) != got[k] {
			t.Errorf("docs/agent.md gives %s as %s, bench/results.md %v", k, m[i+1], got[k])
		}
	}
	b, err = os.ReadFile("docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	for k, re := range map[string]string{
		"amd64 / arm64 / arm v7": `(?m)^\| ` + "`bench-agent`" + ` \| static binary, linux amd64 / arm64 / arm v7 \| ([\d.]+) / ([\d.]+) / ([\d.]+) MiB \|`,
		"rss":                    `(?m)^\| ` + "`bench-agent`" + ` \| agent RSS at defaults \| ([\d.]+) MiB \|`,
		"cpu":                    `(?m)^\| ` + "`bench-agent`" + ` \| agent CPU at defaults \| ([\d.]+) % of a core \|`,
	} {
		m := regexp.MustCompile(re).FindStringSubmatch(string(b))
		if m == nil {
			t.Errorf("docs/benchmarks.md has no bench-agent row for %s", k)
			continue
		}
		keys := strings.Split(k, " / ")
		for i, key := range keys {
			if num(m[i+1]) != got[key] {
				t.Errorf("docs/benchmarks.md gives the agent's %s as %s, bench/results.md %v", key, m[i+1], got[key])
			}
		}
	}
}

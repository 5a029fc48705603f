package fleet_test

// The README is kept true by these tests: every flag and FLEET_ variable of
// fleet-relay (serve and each admin command) and fleet-agent against the
// binaries' own --help; the dependency table against go.mod; every curl
// example of the API section run with real curl against a real relay with a
// real agent connected; the webhook verification code against the receiver
// cloud/webhook's tests run, and its openssl lines run against the relay's
// signatures.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	fleetrelay "github.com/fleet/fleet/cloud/relay"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/deploy/demo/webhooksink"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/test/rig/linktest"
	"github.com/fleet/fleet/test/rig/minisign"
	"github.com/fleet/fleet/test/rig/testnet"
)

// readmeSection returns the text of the README's "## <title>" section, up to
// the next "## " heading.
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## "+title+"\n")
	if start < 0 {
		t.Fatalf("README.md has no section %q", "## "+title)
	}
	rest := text[start+1:]
	if end := strings.Index(rest[3:], "\n## "); end >= 0 {
		rest = rest[:end+4]
	}
	return rest
}

// fence is one fenced code block: its language and its content, with the
// fence's own indentation removed from every line.
type fence struct {
	lang, body string
}

// fences returns the fenced code blocks of text in order.
func fences(text string) []fence {
	var out []fence
	var cur *fence
	var indent string
	var lines []string
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if !strings.HasPrefix(trimmed, "```") {
			if cur != nil {
				lines = append(lines, strings.TrimPrefix(line, indent))
			}
			continue
		}
		if cur == nil {
			cur = &fence{lang: strings.TrimPrefix(trimmed, "```")}
			indent = line[:len(line)-len(trimmed)]
			lines = nil
			continue
		}
		cur.body = strings.Join(lines, "\n")
		out = append(out, *cur)
		cur = nil
	}
	return out
}

// tableRows returns the cells of every body row of the Markdown tables in
// text (header and separator rows left out), each cell trimmed.
func tableRows(text string) [][]string {
	var rows [][]string
	inTable := false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if !inTable { // the header row
			inTable = true
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows = append(rows, cells)
	}
	return rows
}

// subsections splits a section at its "### " headings: heading -> text.
func subsections(text string) map[string]string {
	out := map[string]string{}
	parts := strings.Split(text, "\n### ")
	for _, p := range parts[1:] {
		title, body, _ := strings.Cut(p, "\n")
		out[strings.TrimSpace(title)] = body
	}
	return out
}

// unquote removes the backticks around a table cell's code.
func unquote(cell string) string { return strings.Trim(cell, "`") }

// envName is the FLEET_ variable of a flag.
func envName(flag string) string {
	return "FLEET_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// buildBinaries builds fleet-relay and fleet-agent into a temporary
// directory and returns their paths.
func buildBinaries(t *testing.T) (relay, agent string) {
	t.Helper()
	dir := t.TempDir()
	relay, agent = filepath.Join(dir, "fleet-relay"), filepath.Join(dir, "fleet-agent")
	for _, b := range []struct{ out, pkg, cgo string }{
		{relay, "./cloud/cmd/fleet-relay", "1"},
		{agent, "./agent/cmd/fleet-agent", "0"},
	} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return relay, agent
}

var (
	helpCommandLine = regexp.MustCompile(`^  ([a-z][a-z0-9 -]*[a-z0-9])\s{2,}\S`)
	helpFlagLine    = regexp.MustCompile(`^  -([a-z0-9][a-z0-9-]*)`)
)

// usage is what a command's -h lists: its flags, sorted, and the default
// each shows ("" when it shows none).
type usage struct {
	flags    []string
	defaults map[string]string
}

// helpFlags runs bin with args (ending in -h) and returns the flags its
// usage lists, with their defaults.
func helpFlags(t *testing.T, bin string, args ...string) usage {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	u := usage{defaults: map[string]string{}}
	var cur string
	var isString bool
	for _, line := range strings.Split(string(out), "\n") {
		if m := helpFlagLine.FindStringSubmatch(line); m != nil {
			cur = m[1]
			isString = strings.HasSuffix(line, " string")
			u.flags = append(u.flags, cur)
			continue
		}
		if cur == "" {
			continue
		}
		if i := strings.LastIndex(line, "(default "); i >= 0 && strings.HasSuffix(line, ")") {
			d := strings.TrimSuffix(line[i+len("(default "):], ")")
			uq, err := strconv.Unquote(d)
			switch {
			case err == nil:
				u.defaults[cur] = uq
			case !isString: // a string flag's default is quoted; anything else is its description's own words
				u.defaults[cur] = d
			}
		}
	}
	if len(u.flags) == 0 {
		t.Fatalf("%s %s lists no flags:\n%s", filepath.Base(bin), strings.Join(args, " "), out)
	}
	sort.Strings(u.flags)
	return u
}

// sameDefault reports whether a README default cell shows the default a
// binary prints: the cell's first code span (or the whole cell) equals it,
// as text or as equal durations (720h and 720h0m0s).
func sameDefault(cell, printed string) bool {
	if printed == "" {
		return true // the binary shows none (an empty string, false, or computed at start)
	}
	if i := strings.Index(cell, "`"); i >= 0 {
		if j := strings.Index(cell[i+1:], "`"); j >= 0 {
			cell = cell[i+1 : i+1+j]
		}
	}
	if cell == printed {
		return true
	}
	a, err1 := time.ParseDuration(cell)
	b, err2 := time.ParseDuration(printed)
	return err1 == nil && err2 == nil && a == b
}

// relayCommands returns the subcommands `fleet-relay --help` lists.
func relayCommands(t *testing.T, relay string) []string {
	t.Helper()
	out, err := exec.Command(relay, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("fleet-relay --help: %v\n%s", err, out)
	}
	_, list, ok := strings.Cut(string(out), "\ncommands:\n")
	if !ok {
		t.Fatalf("fleet-relay --help has no command list:\n%s", out)
	}
	var cmds []string
	for _, line := range strings.Split(list, "\n") {
		if m := helpCommandLine.FindStringSubmatch(line); m != nil {
			cmds = append(cmds, m[1])
		}
	}
	if !slices.Contains(cmds, "serve") || len(cmds) < 10 {
		t.Fatalf("fleet-relay --help: parsed commands %q from:\n%s", cmds, out)
	}
	return cmds
}

// documentedFlags reads a flag table (flag, variable, default, meaning)
// and checks each row's variable, and its default against defaults (what
// the binary prints). It returns the flags in order.
func documentedFlags(t *testing.T, where string, rows [][]string, defaults map[string]string) []string {
	t.Helper()
	var flags []string
	for _, r := range rows {
		if len(r) < 4 {
			t.Errorf("%s: row %q has fewer than 4 cells", where, r)
			continue
		}
		flag, env := strings.TrimPrefix(unquote(r[0]), "--"), unquote(r[1])
		if env != envName(flag) {
			t.Errorf("%s: --%s is documented with variable %q, want %q", where, flag, env, envName(flag))
		}
		if r[3] == "" {
			t.Errorf("%s: --%s has no meaning", where, flag)
		}
		if !sameDefault(r[2], defaults[flag]) {
			t.Errorf("%s: --%s is documented with default %q; the binary's is %q", where, flag, r[2], defaults[flag])
		}
		flags = append(flags, flag)
	}
	return flags
}

// sameSet reports the differences between what a binary has and what the
// README documents.
func sameSet(t *testing.T, what string, have, documented []string) {
	t.Helper()
	for _, f := range have {
		if !slices.Contains(documented, f) {
			t.Errorf("%s: --%s is not in the README", what, f)
		}
	}
	for _, f := range documented {
		if !slices.Contains(have, f) {
			t.Errorf("%s: the README documents --%s, which the binary does not have", what, f)
		}
	}
	seen := map[string]bool{}
	for _, f := range documented {
		if seen[f] {
			t.Errorf("%s: --%s is documented twice", what, f)
		}
		seen[f] = true
	}
}

// otherToolsFlags are the long options of other programs the README's
// commands use.
var otherToolsFlags = map[string]string{
	"now":             "systemctl enable --now",
	"reload":          "udevadm control --reload",
	"reload-rules":    "udevadm control --reload-rules",
	"subsystem-match": "udevadm trigger --subsystem-match",
	"action":          "udevadm trigger --action",
	"strict":          "tsc --strict",
	"system":          "groupadd/useradd --system",
	"user-group":      "useradd --user-group",
	"groups":          "useradd --groups",
	"home-dir":        "useradd --home-dir",
	"shell":           "useradd --shell",
}

// unitVariables returns the variables the systemd units of deploy/systemd
// set with Environment= and read themselves (${NAME} or $NAME in the unit),
// such as fleet-relay-backup.service's FLEET_BACKUP_KEEP_DAYS.
func unitVariables(t *testing.T) map[string]bool {
	t.Helper()
	units, err := filepath.Glob("deploy/systemd/*.service")
	if err != nil || len(units) == 0 {
		t.Fatalf("deploy/systemd/*.service: %v (%d units)", err, len(units))
	}
	vars := map[string]bool{}
	envLine := regexp.MustCompile(`(?m)^Environment=([A-Z][A-Z0-9_]*)=`)
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range envLine.FindAllStringSubmatch(text, -1) {
			if strings.Contains(text, "${"+m[1]+"}") || regexp.MustCompile(`\$`+m[1]+`\b`).MatchString(text) {
				vars[m[1]] = true
			}
		}
	}
	return vars
}

// TestREADMEFlags checks the "Flags and variables" section against the
// binaries: every flag of fleet-relay serve, of each admin command, of
// fleet-agent and of fleet-webhook-sink is documented (the first three with
// their FLEET_ variable, the sink with its secret's variable), nothing
// documented is unknown, and every --flag and FLEET_ variable named anywhere
// in the README exists (on the command it is written with, in command
// lines). Besides flags' variables, the README may name the sink's secret
// variable and the variables the systemd units set and read themselves.
func TestREADMEFlags(t *testing.T) {
	relay, agent := buildBinaries(t)
	subs := subsections(readmeSection(t, "Flags and variables"))

	// fleet-relay serve and fleet-agent: one table each.
	serve := helpFlags(t, relay, "serve", "-h")
	serveFlags := serve.flags
	sameSet(t, "fleet-relay serve", serveFlags, documentedFlags(t, "fleet-relay serve", tableRows(subs["fleet-relay serve"]), serve.defaults))
	agentUsage := helpFlags(t, agent, "-h")
	agentFlags := agentUsage.flags
	sameSet(t, "fleet-agent", agentFlags, documentedFlags(t, "fleet-agent", tableRows(subs["fleet-agent"]), agentUsage.defaults))

	// fleet-webhook-sink: a table of flag, default, meaning (its flags have
	// no variables), and its secret's variable named in the text.
	sink := filepath.Join(t.TempDir(), "fleet-webhook-sink")
	if out, err := exec.Command("go", "build", "-o", sink, "./deploy/demo/cmd/fleet-webhook-sink").CombinedOutput(); err != nil {
		t.Fatalf("go build ./deploy/demo/cmd/fleet-webhook-sink: %v\n%s", err, out)
	}
	sinkUsage := helpFlags(t, sink, "-h")
	sinkFlags := sinkUsage.flags
	var sinkDocumented []string
	for _, r := range tableRows(subs["fleet-webhook-sink"]) {
		if len(r) < 3 {
			t.Errorf("fleet-webhook-sink: row %q has fewer than 3 cells", r)
			continue
		}
		flag := strings.TrimPrefix(unquote(r[0]), "--")
		if r[2] == "" {
			t.Errorf("fleet-webhook-sink: --%s has no meaning", flag)
		}
		if !sameDefault(r[1], sinkUsage.defaults[flag]) {
			t.Errorf("fleet-webhook-sink: --%s is documented with default %q; the binary's is %q", flag, r[1], sinkUsage.defaults[flag])
		}
		sinkDocumented = append(sinkDocumented, flag)
	}
	sameSet(t, "fleet-webhook-sink", sinkFlags, sinkDocumented)
	if !strings.Contains(subs["fleet-webhook-sink"], "`"+webhooksink.SecretEnv+"`") {
		t.Errorf("fleet-webhook-sink: the README does not name its secret's variable %s", webhooksink.SecretEnv)
	}

	// Admin commands: one table, rows "command | flag | variable | default | meaning".
	known := map[string][]string{"serve": serveFlags}
	defaults := map[string]map[string]string{}
	adminDefaults := map[string]string{} // flag -> default, of any admin command
	documented := map[string][]string{}
	var everyCommand []string
	except := map[string][]string{} // command -> common flags it lacks
	cmds := relayCommands(t, relay)
	for _, c := range cmds {
		if c != "serve" {
			u := helpFlags(t, relay, append(strings.Fields(c), "-h")...)
			known[c], defaults[c] = u.flags, u.defaults
			for f, d := range u.defaults {
				adminDefaults[f] = d
			}
			documented[c] = nil
		}
	}
	rows := tableRows(subs["fleet-relay admin commands"])
	if len(rows) == 0 {
		t.Fatal(`README: no table under "### fleet-relay admin commands"`)
	}
	listed := map[string]bool{}
	for _, r := range rows {
		if len(r) < 5 {
			t.Errorf("admin commands: row %q has fewer than 5 cells", r)
			continue
		}
		if r[1] == "" { // a command without flags of its own
			listed[unquote(r[0])] = true
			continue
		}
		rowDefaults := adminDefaults
		if d, ok := defaults[unquote(r[0])]; ok {
			rowDefaults = d
		}
		flags := documentedFlags(t, "fleet-relay "+r[0], [][]string{{r[1], r[2], r[3], r[4]}}, rowDefaults)
		if strings.HasPrefix(r[0], "every admin command") {
			// "every admin command except `a`, `b`": the exceptions are
			// added back below as flags they lack.
			everyCommand = append(everyCommand, flags...)
			for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(r[0], -1) {
				except[m[1]] = append(except[m[1]], flags...)
			}
			continue
		}
		cmd := unquote(r[0])
		if _, ok := documented[cmd]; !ok {
			t.Errorf("admin commands: %q is not a fleet-relay admin command (have %q)", r[0], cmds)
			continue
		}
		listed[cmd] = true
		documented[cmd] = append(documented[cmd], flags...)
	}
	for cmd, flags := range documented {
		if !listed[cmd] {
			t.Errorf("admin commands: fleet-relay %s is not in the README's table", cmd)
		}
		var common []string
		for _, f := range everyCommand {
			if !slices.Contains(except[cmd], f) {
				common = append(common, f)
			}
		}
		sameSet(t, "fleet-relay "+cmd, known[cmd], append(common, flags...))
	}

	// Every --flag and FLEET_ variable anywhere in the README exists.
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	all := map[string]bool{}
	for _, fs := range known {
		for _, f := range fs {
			all[f] = true
		}
	}
	for _, f := range agentFlags {
		all[f] = true
	}
	for _, m := range regexp.MustCompile(`(?:^|[^-\w])--([a-z][a-z0-9-]*)`).FindAllStringSubmatch(text, -1) {
		if !all[m[1]] && !slices.Contains(sinkFlags, m[1]) && otherToolsFlags[m[1]] == "" {
			t.Errorf("README names --%s, which no fleet command has", m[1])
		}
	}
	otherVars := unitVariables(t)
	otherVars[webhooksink.SecretEnv] = true
	otherVars[fleetrelay.OIDCSecretEnv] = true // org set-oidc's client secret, never a flag
	for _, m := range regexp.MustCompile(`FLEET_[A-Z0-9_]*[A-Z0-9]`).FindAllString(text, -1) {
		flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(m, "FLEET_")), "_", "-")
		if !all[flag] && !otherVars[m] {
			t.Errorf("README names %s, which is no flag's variable, nor the sink's secret, nor a systemd unit's own", m)
		}
	}

	// Command lines: the flags written after "fleet-relay <command>" or
	// "fleet-agent" on one line (continuations joined) are that command's.
	text = strings.ReplaceAll(text, "\\\n", " ")
	paths := slices.Clone(cmds)
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	flagRE := regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
	for _, line := range strings.Split(text, "\n") {
		for _, span := range strings.Split(line, "`") {
			if i := strings.Index(span, "fleet-relay "); i >= 0 {
				rest := span[i+len("fleet-relay "):]
				for _, c := range paths {
					if strings.HasPrefix(rest, c+" ") || rest == c {
						for _, m := range flagRE.FindAllStringSubmatch(rest[len(c):], -1) {
							if !slices.Contains(known[c], m[1]) {
								t.Errorf("README: %q: fleet-relay %s has no --%s", strings.TrimSpace(span), c, m[1])
							}
						}
						break
					}
				}
			}
			if i := strings.Index(span, "fleet-agent "); i >= 0 && (i == 0 || span[i-1] == ' ') {
				for _, m := range flagRE.FindAllStringSubmatch(span[i:], -1) {
					if !slices.Contains(agentFlags, m[1]) && otherToolsFlags[m[1]] == "" {
						t.Errorf("README: %q: fleet-agent has no --%s", strings.TrimSpace(span), m[1])
					}
				}
			}
			if i := strings.Index(span, "fleet-webhook-sink "); i >= 0 {
				for _, m := range flagRE.FindAllStringSubmatch(span[i:], -1) {
					if !slices.Contains(sinkFlags, m[1]) {
						t.Errorf("README: %q: fleet-webhook-sink has no --%s", strings.TrimSpace(span), m[1])
					}
				}
			}
		}
	}
}

// directModules returns the modules of go.mod's require directives that are
// not marked // indirect.
func directModules(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	inBlock := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if line == "" || strings.HasPrefix(line, "//") || strings.Contains(line, "// indirect") {
			continue
		}
		mods = append(mods, strings.Fields(line)[0])
	}
	if len(mods) == 0 {
		t.Fatal("go.mod: no direct requirements found")
	}
	return mods
}

// TestREADMEDependencies checks that the dependency table lists exactly the
// direct requirements of go.mod, each with a reason.
func TestREADMEDependencies(t *testing.T) {
	want := directModules(t)
	var got []string
	for _, r := range tableRows(readmeSection(t, "Dependencies, and why each")) {
		mod := unquote(r[0])
		if !strings.Contains(mod, "/") || !strings.Contains(mod, ".") || strings.Contains(mod, " ") {
			continue // a system package row
		}
		got = append(got, mod)
		if len(r) < 3 || r[len(r)-1] == "" {
			t.Errorf("dependency %s has no reason", mod)
		}
	}
	for _, m := range want {
		if !slices.Contains(got, m) {
			t.Errorf("go.mod requires %s directly; the README's dependency table does not list it", m)
		}
	}
	for _, m := range got {
		if !slices.Contains(want, m) {
			t.Errorf("the README lists %s, which is not a direct requirement in go.mod", m)
		}
	}
}

// TestREADMEWebhookVerification checks the README's webhook verification:
// the Go code is the receiver cloud/webhook's tests run against real
// deliveries, byte for byte, and the openssl lines, run as written, give the
// relay's own signatures.
func TestREADMEWebhookVerification(t *testing.T) {
	section := readmeSection(t, "Webhooks and their signatures")
	var goCode []string
	var shell []string
	for _, f := range fences(section) {
		switch f.lang {
		case "go":
			goCode = append(goCode, f.body)
		case "sh":
			shell = append(shell, f.body)
		}
	}
	if len(goCode) != 1 || len(shell) != 2 {
		t.Fatalf("README webhooks section: %d go blocks and %d sh blocks, want 1 and 2", len(goCode), len(shell))
	}

	b, err := os.ReadFile("cloud/webhook/receiver_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "// --- docs/webhooks.md: Go receiver (begin) ---", "// --- docs/webhooks.md: Go receiver (end) ---"
	_, rest, ok1 := strings.Cut(string(b), begin)
	tested, _, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatal("cloud/webhook/receiver_example_test.go lost its receiver markers")
	}
	if strings.TrimSpace(tested) != strings.TrimSpace(goCode[0]) {
		t.Errorf("the README's Go receiver differs from the one cloud/webhook/receiver_example_test.go runs:\nREADME:\n%s\ntested:\n%s", goCode[0], tested)
	}

	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is needed to run the README's command lines (make test installs it)")
	}
	body := []byte(`{"event":"serial.signal","deviceId":"d1","at":"2026-11-22T03:00:00.000Z","channels":[{"id":"rs485-1","live":"17 42","txOn":true,"error":""}]}`)
	const id, ts = "whd_readme1", int64(1795300000)
	for _, secret := range []string{webhook.NewSecret(), "whsec_Dn9ckCwlMFOhk4OkVed21GRhklN6K2wuOgCeGR7ZdyJ"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "body.json"), body, 0o600); err != nil {
			t.Fatal(err)
		}
		run := func(script string) string {
			cmd := exec.Command("bash", "-c", script)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "SECRET="+secret, "ID="+id, "TS="+strconv.FormatInt(ts, 10))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v", script, err)
			}
			return strings.TrimSpace(string(out))
		}
		if got, want := "sha256="+run(shell[0]), webhook.Sign(secret, body); got != want {
			t.Errorf("X-Service-Signature: the README's openssl line gives %s, the relay %s", got, want)
		}
		if got, want := "v1,"+run(shell[1]), webhook.SignStandard(secret, id, ts, body); got != want {
			t.Errorf("webhook-signature: the README's openssl lines give %s, the relay %s", got, want)
		}
	}
}

// apiExample is one endpoint of the README's API section: its heading
// ("GET /devices/{id}"), its curl command and its sample response, or
// noContent when the section says it answers `204 No Content`.
type apiExample struct {
	endpoint, command, sample string
	noContent                 bool
}

// apiExamples reads the "### METHOD /path" subsections of the API section
// in order; each must hold one sh block with one curl command and a json
// sample after it.
func apiExamples(t *testing.T) []apiExample {
	t.Helper()
	section := readmeSection(t, "The public API")
	parts := strings.Split(section, "\n### ")
	var out []apiExample
	for _, p := range parts[1:] {
		title, body, _ := strings.Cut(p, "\n")
		ex := apiExample{endpoint: strings.TrimSpace(title)}
		for _, f := range fences(body) {
			switch {
			case f.lang == "sh" && ex.command == "":
				ex.command = strings.TrimSpace(strings.ReplaceAll(f.body, "\\\n", " "))
			case f.lang == "json" && ex.command != "" && ex.sample == "":
				ex.sample = f.body
			}
		}
		if !strings.HasPrefix(ex.command, "curl ") || strings.Contains(ex.command, "\n") {
			t.Errorf("README API %q: want one curl command in a sh block, got %q", ex.endpoint, ex.command)
			continue
		}
		if ex.sample == "" && strings.Contains(body, "`204 No Content`") {
			ex.noContent = true
		} else if ex.sample == "" {
			t.Errorf("README API %q: no json sample response after the curl command", ex.endpoint)
			continue
		}
		out = append(out, ex)
	}
	return out
}

var (
	curlMethod = regexp.MustCompile(`\s-X\s+([A-Z]+)\s`)
	curlURL    = regexp.MustCompile(`"\$RELAY/api/v1/public(/[^"?]*)(?:\?[^"]*)?"`)
)

// endpointOf is the "METHOD /template" a README curl command calls.
func endpointOf(command string) string {
	method := "GET"
	if m := curlMethod.FindStringSubmatch(command); m != nil {
		method = m[1]
	}
	m := curlURL.FindStringSubmatch(command)
	if m == nil {
		return method + " ?"
	}
	path := strings.NewReplacer("$DEVICE_ID", "{id}", "$ALERT_ID", "{id}", "$RULE_ID", "{id}", "$SILENCE_ID", "{id}", "$ROLLOUT_ID", "{id}",
		"$CHANNEL", "{channelId}", "$POINT", "{pointId}").Replace(m[1])
	return method + " " + path
}

// specEndpoints are the twelve endpoints of the public API specification.
var specEndpoints = []string{
	"GET /devices", "GET /devices/{id}", "GET /devices/{id}/metrics", "GET /devices/{id}/events",
	"GET /devices/{id}/serial", "PATCH /devices/{id}/serial", "GET /devices/{id}/serial/telemetry",
	"GET /devices/{id}/serial/channels/{channelId}", "PUT /devices/{id}/serial/channels/{channelId}",
	"GET /alerts", "POST /alerts/{id}/acknowledge", "POST /alerts/{id}/resolve",
}

// openAPIEndpoints returns the operations of cloud/api/openapi.json, the
// contract the API's tests validate every response against.
func openAPIEndpoints(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("cloud/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for path, ops := range doc.Paths {
		for m := range ops {
			switch m {
			case "get", "put", "post", "patch", "delete":
				if path != "/openapi.json" {
					out = append(out, strings.ToUpper(m)+" "+path)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// sameShape reports where actual lacks a field of the sample or has one the
// sample does not show. It descends into objects and into the first element
// of arrays; the type-dependent "payload" of alerts, "data" of events and
// "condition" of alert rules are not compared.
func sameShape(where string, sample, actual any) []string {
	var diffs []string
	switch s := sample.(type) {
	case map[string]any:
		a, ok := actual.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: sample is an object, response has %T", where, actual)}
		}
		for k := range s {
			if _, ok := a[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the sample, not in the response", where, k))
			}
		}
		for k := range a {
			if _, ok := s[k]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: in the response, not in the sample", where, k))
			}
		}
		for k, sv := range s {
			if av, ok := a[k]; ok && k != "payload" && k != "condition" && !(k == "data" && where != "") {
				diffs = append(diffs, sameShape(where+"."+k, sv, av)...)
			}
		}
	case []any:
		a, ok := actual.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: sample is an array, response has %T", where, actual)}
		}
		if len(s) > 0 && len(a) == 0 {
			return []string{where + ": the response's list is empty"}
		}
		if len(s) > 0 {
			diffs = append(diffs, sameShape(where+"[0]", s[0], a[0])...)
		}
	}
	return diffs
}

// startProcess runs bin with args, output to logFile, and stops it at the
// end of the test.
func startProcess(t *testing.T, logFile, bin string, args ...string) *exec.Cmd {
	t.Helper()
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		f.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logFile); err == nil {
				t.Logf("%s:\n%s", filepath.Base(logFile), tail(b, 30))
			}
		}
	})
	return cmd
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// readmeRollout prepares the rollout examples: a device tagged line-3 whose
// agent is simulated (it announces version 1.3.2 on amd64 and ignores the
// commands it is sent, so that no test reboots or updates anything), a
// signed release 1.4.0 for amd64, and a rollout of it to line-3 that stays
// running (its device never takes its update). It returns the rollout's and
// the simulated device's ids.
func readmeRollout(t *testing.T, relay, db, orgID, base string, api *apiClient) (string, string) {
	t.Helper()
	var sim struct{ ID, Token string }
	adminJSON(t, relay, &sim, "device", "add", "--db", db, "--org", orgID, "--name", "Line 3 press", "--serial", "SN-0006", "--model", "IG-500")
	adminJSON(t, relay, &struct{}{}, "device", "set", "--db", db, "--id", sim.ID, "--tags", "line-3")
	ws := linktest.MustDial(t, base, sim.Token)
	hello, _ := json.Marshal(protocol.Message{Type: protocol.TypeHello, Hello: &protocol.Hello{AgentVersion: "1.3.2", Arch: "amd64", Model: "IG-500",
		HeartbeatInterval: protocol.Duration{Duration: 5 * time.Minute}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, hello); err != nil {
		t.Fatal(err)
	}
	go func() { // read (and answer pings) until the test closes the socket
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	bin := filepath.Join(t.TempDir(), "fleet-agent")
	if err := os.WriteFile(bin, []byte("fleet-agent 1.4.0 (not run by this test)"), 0o600); err != nil {
		t.Fatal(err)
	}
	sig, _ := minisign.NewKey(t).Sign(t, bin, "fleet-agent 1.4.0")
	adminJSON(t, relay, &struct{}{}, "release", "add", "--db", db, "--org", orgID, "--version", "1.4.0", "--arch", "amd64", "--file", bin, "--sig", sig)
	var ro struct{ Data struct{ ID string } }
	api.waitFor("the line-3 press online", func() string {
		var d struct{ Data struct{ Status string } }
		if api.get("/devices/"+sim.ID, &d); d.Data.Status != "ONLINE" {
			return "status " + d.Data.Status
		}
		return ""
	})
	if code := api.post("/rollouts", map[string]any{"version": "1.4.0", "scope": map[string]any{"tags": []string{"line-3"}},
		"waves": []int{10, 50, 100}, "maxFailures": 2, "healthFor": "5m"}, &ro); code != http.StatusCreated {
		t.Fatalf("POST /rollouts: %d", code)
	}
	return ro.Data.ID, sim.ID
}

// adminJSON runs a fleet-relay admin command with --json and decodes its
// output into v.
func adminJSON(t *testing.T, relay string, v any, args ...string) {
	t.Helper()
	out, err := exec.Command(relay, append(args, "--json")...).Output()
	if err != nil {
		t.Fatalf("fleet-relay %s: %v", strings.Join(args, " "), err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("fleet-relay %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// apiClient calls the public API of a test relay.
type apiClient struct {
	t        *testing.T
	base     string
	key      string
	client   *http.Client
	deadline time.Time
}

// get decodes GET base+path into v and returns the status (0 when the relay
// did not answer).
func (c *apiClient) get(path string, v any) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode
}

// post sends body as JSON to base+path, decodes the answer into v and
// returns the status (0 when the relay did not answer).
func (c *apiClient) post(path string, body, v any) int {
	b, err := json.Marshal(body)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		c.t.Fatalf("POST %s: %v", path, err)
	}
	return resp.StatusCode
}

// waitFor polls cond until it returns "" or the client's deadline passes.
func (c *apiClient) waitFor(what string, cond func() string) {
	c.t.Helper()
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(c.deadline) {
			c.t.Fatalf("waiting for %s: %s", what, why)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestREADMECurlExamples runs every curl example of the README's API
// section with real curl against a real relay (a temporary SQLite file, a
// free port) to which a real fleet-agent --hw sim is connected, so that
// metrics, events, serial state and telemetry exist; an alert comes from a
// second agent killed with SIGKILL (the device_offline rule). Each example
// must answer 2xx with the fields of the README's sample response, and the
// examples must cover every endpoint of the API.
func TestREADMECurlExamples(t *testing.T) {
	examples := apiExamples(t)
	var covered []string
	for _, ex := range examples {
		if got := endpointOf(ex.command); got != ex.endpoint {
			t.Errorf("README API %q: its curl command calls %s", ex.endpoint, got)
		}
		covered = append(covered, ex.endpoint)
	}
	sort.Strings(covered)
	spec := slices.Sorted(slices.Values(specEndpoints))
	openapi := openAPIEndpoints(t)
	if !slices.Equal(covered, openapi) {
		t.Errorf("the README's curl examples cover\n%q\nthe API (cloud/api/openapi.json) has\n%q", covered, openapi)
	}
	for _, e := range spec {
		if !slices.Contains(covered, e) {
			t.Errorf("the spec's endpoint %s has no curl example in the README", e)
		}
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed to run the README's examples (make test installs it)")
	}

	relay, agent := buildBinaries(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "relay.db")
	var org struct{ ID string }
	adminJSON(t, relay, &org, "org", "create", "--db", db, "--name", "Acme")
	var key struct{ Key string }
	adminJSON(t, relay, &key, "key", "create", "--db", db, "--org", org.ID, "--name", "readme",
		"--scopes", "devices:read,devices:write,metrics:read,logs:read,alerts:read,alerts:write")
	var gw, gate struct{ ID, Token string }
	adminJSON(t, relay, &gw, "device", "add", "--db", db, "--org", org.ID, "--name", "Press 4", "--serial", "SN-0004", "--model", "IG-500", "--location", "Hall B")
	adminJSON(t, relay, &gate, "device", "add", "--db", db, "--org", org.ID, "--name", "Gatehouse", "--serial", "SN-0005", "--model", "IG-100")

	port := testnet.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	startProcess(t, filepath.Join(dir, "relay.log"), relay, "serve", "--db", db, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--rate-limit", "100000") // the waits below poll; the examples do not depend on the limit
	api := &apiClient{t: t, base: base + "/api/v1/public", key: key.Key, client: &http.Client{Timeout: 5 * time.Second}, deadline: time.Now().Add(60 * time.Second)}
	api.waitFor("the relay", func() string {
		var v any
		if api.get("/devices", &v) != http.StatusOK {
			return "not answering"
		}
		return ""
	})
	thermalSys, err := filepath.Abs(filepath.Join("agent", "metrics", "testdata", "multizone", "sys"))
	if err != nil {
		t.Fatal(err)
	}
	agentArgs := func(token, model, name string) []string {
		return []string{"--relay", base, "--token", token, "--hw", "sim", "--model", model,
			"--state-dir", filepath.Join(dir, name), "--heartbeat", "1s", "--metrics-interval", "1s",
			"--dev-root", "none", "--passthrough-listen", "none",
			// A sysfs with thermal zones (the agent's own test data), so
			// that the samples carry a temperature, as the README's do,
			// on a machine without a sensor too.
			"--sys-root", thermalSys}
	}
	startProcess(t, filepath.Join(dir, "agent-gw.log"), agent, agentArgs(gw.Token, "IG-500", "gw")...)
	gateAgent := startProcess(t, filepath.Join(dir, "agent-gate.log"), agent, agentArgs(gate.Token, "IG-100", "gate")...)

	online := func(id string) func() string {
		return func() string {
			var d struct{ Data struct{ Status string } }
			api.get("/devices/"+id, &d)
			if d.Data.Status != "ONLINE" {
				return "status " + d.Data.Status
			}
			return ""
		}
	}
	api.waitFor("the gatehouse agent online", online(gate.ID))
	// A real alert: the gatehouse agent dies; device_offline opens after
	// three missed heartbeat intervals.
	if err := gateAgent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	api.waitFor("the gateway's metrics, events and telemetry", func() string {
		var m, e struct{ Data []any }
		var tel struct{ Data struct{ At *string } }
		switch {
		case online(gw.ID)() != "":
			return online(gw.ID)()
		case api.get("/devices/"+gw.ID+"/metrics", &m) != 200 || len(m.Data) == 0:
			return "no metrics"
		case api.get("/devices/"+gw.ID+"/events", &e) != 200 || len(e.Data) == 0:
			return "no events"
		case api.get("/devices/"+gw.ID+"/serial/telemetry", &tel) != 200 || tel.Data.At == nil:
			return "no telemetry"
		case api.get("/devices/"+gw.ID+"/points/gpio-1.level/samples", &m) != 200 || len(m.Data) == 0:
			return "no point samples"
		}
		return ""
	})
	var alertID string
	api.waitFor("an active alert", func() string {
		var a struct{ Data []struct{ ID string } }
		if api.get("/alerts", &a) != 200 || len(a.Data) == 0 {
			return "no active alert"
		}
		alertID = a.Data[0].ID
		return ""
	})

	// A rule and a silence for the examples that name one.
	var rules struct{ Data []struct{ ID, Name string } }
	api.get("/alert-rules?limit=100", &rules)
	ruleID := ""
	for _, r := range rules.Data {
		if r.Name == "high_temp" {
			ruleID = r.ID
		}
	}
	if ruleID == "" {
		t.Fatalf("no default rule high_temp in %+v", rules.Data)
	}
	var silence struct{ Data struct{ ID string } }
	if code := api.post("/silences", map[string]any{"scope": map[string]any{"tags": []string{"hall-b"}},
		"to": time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "comment": "readme"}, &silence); code != http.StatusCreated {
		t.Fatalf("POST /silences: %d", code)
	}

	rolloutID, simID := readmeRollout(t, relay, db, org.ID, base, api)

	env := append(os.Environ(), "RELAY="+base, "KEY="+key.Key, "DEVICE_ID="+gw.ID, "ALERT_ID="+alertID, "CHANNEL=rs485-1", "POINT=gpio-1.level",
		"RULE_ID="+ruleID, "SILENCE_ID="+silence.Data.ID, "ROLLOUT_ID="+rolloutID)
	for _, ex := range examples {
		t.Run(ex.endpoint, func(t *testing.T) {
			env := env
			if ex.endpoint == "POST /devices/{id}/reboot" {
				// Never reboot the machine the test runs on: the reboot
				// goes to a simulated agent that ignores it.
				env = append(env, "DEVICE_ID="+simID)
			}
			var sample any
			if err := json.Unmarshal([]byte(ex.sample), &sample); err != nil && !ex.noContent {
				t.Fatalf("the README's sample response is not JSON: %v\n%s", err, ex.sample)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", ex.command+` --max-time 10 -w '\n%{http_code}'`)
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", ex.command, err, stderr.String())
			}
			i := bytes.LastIndexByte(out, '\n')
			if i < 0 {
				t.Fatalf("%s: no status line in %q", ex.command, out)
			}
			body, code := string(out[:i]), string(out[i+1:])
			if !strings.HasPrefix(code, "2") {
				t.Fatalf("%s: status %s: %s", ex.command, code, body)
			}
			if ex.noContent {
				if code != "204" || body != "" {
					t.Fatalf("%s: status %s with %q, the README says 204 No Content", ex.command, code, body)
				}
				return
			}
			var actual any
			if err := json.Unmarshal([]byte(body), &actual); err != nil {
				t.Fatalf("%s: body is not JSON: %v: %s", ex.command, err, body)
			}
			for _, d := range sameShape("", sample, actual) {
				t.Error(d)
			}
			if s, ok := sample.(map[string]any)["data"].(map[string]any); ok {
				if state, ok := s["state"]; ok {
					if got := actual.(map[string]any)["data"].(map[string]any)["state"]; got != state {
						t.Errorf("state %v, the README's sample shows %v", got, state)
					}
				}
			}
		})
	}
}

// TestREADMEMakeTargets checks that every `make TARGET` the README names in
// code is a rule of the Makefile or of an mk/*.mk fragment.
func TestREADMEMakeTargets(t *testing.T) {
	files, err := filepath.Glob("mk/*.mk")
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]bool{}
	ruleLine := regexp.MustCompile(`(?m)^([A-Za-z0-9_.-]+(?:[ \t]+[A-Za-z0-9_.-]+)*)[ \t]*:([^=]|$)`)
	for _, f := range append(files, "Makefile") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ruleLine.FindAllStringSubmatch(string(b), -1) {
			for _, target := range strings.Fields(m[1]) {
				rules[target] = true
			}
		}
	}
	for _, want := range []string{"run", "test", "build"} {
		if !rules[want] {
			t.Fatalf("the Makefile parse found no %q rule (found %d rules)", want, len(rules))
		}
	}
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	// In code: a code span ("`make package`") or a code block's line.
	for _, m := range regexp.MustCompile("(?m)(?:^\\s*|`)make ([a-z][a-z0-9-]*)").FindAllStringSubmatch(string(b), -1) {
		if !rules[m[1]] {
			t.Errorf("README names `make %s`, which no Makefile rule defines", m[1])
		}
	}
}

package deploy_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/logbuf"
)

// image is the final stage of deploy/container/Dockerfile, as parsed.
type image struct {
	copies      []imageCopy
	env         []string
	uid, gid    uint32
	volumes     []string
	expose      []string
	entrypoint  []string
	cmd         []string
	healthcheck []string
	// buildOut is the BIN= folder of the build stage's `make relay-static`;
	// buildDirs are the folders its `RUN mkdir -p` made (empty).
	buildOut  string
	buildDirs []string
}

type imageCopy struct {
	from, src, dst string
	chown          *[2]int
}

// parseDockerfile reads the Dockerfile. It knows the instructions the file
// uses and fails on any other in the final stage, so that the layout built
// from it cannot silently drift from what docker would build.
func parseDockerfile(t *testing.T, path string) image {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	var img image
	stage := -1
	var froms []string
	jsonArgs := func(instr, rest string) []string {
		var v []string
		if err := json.Unmarshal([]byte(rest), &v); err != nil {
			t.Fatalf("%s %s: want the JSON (exec) form: %v", instr, rest, err)
		}
		return v
	}
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		instr = strings.ToUpper(instr)
		rest = strings.TrimSpace(rest)
		if instr == "FROM" {
			stage++
			froms = append(froms, rest)
			continue
		}
		if stage == 0 {
			if instr == "RUN" && strings.HasPrefix(rest, "make relay-static BIN=") {
				img.buildOut = strings.TrimPrefix(rest, "make relay-static BIN=")
			}
			if instr == "RUN" && strings.HasPrefix(rest, "mkdir -p ") {
				img.buildDirs = append(img.buildDirs, strings.Fields(strings.TrimPrefix(rest, "mkdir -p "))...)
			}
			continue
		}
		switch instr {
		case "COPY":
			f := strings.Fields(rest)
			c := imageCopy{}
			for len(f) > 2 && strings.HasPrefix(f[0], "--") {
				k, v, _ := strings.Cut(strings.TrimPrefix(f[0], "--"), "=")
				switch k {
				case "from":
					c.from = v
				case "chown":
					u, g, _ := strings.Cut(v, ":")
					ui, err1 := strconv.Atoi(u)
					gi, err2 := strconv.Atoi(g)
					if err1 != nil || err2 != nil {
						t.Fatalf("COPY --chown=%s: numeric ids only here", v)
					}
					c.chown = &[2]int{ui, gi}
				default:
					t.Fatalf("COPY --%s: not understood by this test", k)
				}
				f = f[1:]
			}
			if len(f) != 2 || c.from == "" {
				t.Fatalf("COPY %s: want --from=<stage> SRC DST", rest)
			}
			c.src, c.dst = f[0], f[1]
			img.copies = append(img.copies, c)
		case "ENV":
			k, v, ok := strings.Cut(rest, "=")
			if !ok {
				t.Fatalf("ENV %s: want KEY=value", rest)
			}
			img.env = append(img.env, k+"="+v)
		case "USER":
			u, g, _ := strings.Cut(rest, ":")
			ui, err1 := strconv.ParseUint(u, 10, 32)
			gi, err2 := strconv.ParseUint(g, 10, 32)
			if err1 != nil || err2 != nil {
				t.Fatalf("USER %s: want numeric UID:GID (no /etc/passwd in the image)", rest)
			}
			img.uid, img.gid = uint32(ui), uint32(gi)
		case "VOLUME":
			img.volumes = append(img.volumes, strings.Fields(rest)...)
		case "EXPOSE":
			img.expose = append(img.expose, strings.Fields(rest)...)
		case "ENTRYPOINT":
			img.entrypoint = jsonArgs(instr, rest)
		case "CMD":
			img.cmd = jsonArgs(instr, rest)
		case "HEALTHCHECK":
			_, c, ok := strings.Cut(rest, " CMD ")
			if !ok {
				t.Fatalf("HEALTHCHECK %s: want ... CMD [json]", rest)
			}
			img.healthcheck = jsonArgs(instr, c)
		default:
			t.Fatalf("%s in the final stage: not understood by this test", instr)
		}
	}
	if len(froms) != 2 || !strings.HasPrefix(froms[0], "golang:") || froms[1] != "scratch" {
		t.Fatalf("stages %q: want a golang build stage and a scratch final stage", froms)
	}
	if img.buildOut == "" {
		t.Fatal("the build stage does not run `make relay-static BIN=...`")
	}
	return img
}

// layout builds the final stage's root file system in a temporary folder:
// each COPY from the build stage (its relay-static output is our
// bin/fleet-relay-static, the folders it made are empty, other files are
// this Debian host's, as in the golang bookworm image), owned as --chown
// says (root otherwise), and each VOLUME folder docker would make.
func layout(t *testing.T, img image) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range img.copies {
		dst := filepath.Join(root, c.dst)
		owner := [2]int{0, 0}
		if c.chown != nil {
			owner = *c.chown
		}
		var src string
		switch {
		case strings.HasPrefix(c.src, img.buildOut+"/"):
			src = filepath.Join(bin, strings.TrimPrefix(c.src, img.buildOut+"/"))
		case contains(img.buildDirs, c.src):
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dst, owner[0], owner[1]); err != nil {
				t.Fatal(err)
			}
			continue
		default:
			src = c.src
		}
		st, err := os.Stat(src)
		if err != nil {
			t.Fatalf("COPY %s: %v", c.src, err)
		}
		if st.IsDir() {
			t.Fatalf("COPY %s: directories other than the build stage's mkdir are not laid out by this test", c.src)
		}
		if strings.HasSuffix(c.dst, "/") {
			dst = filepath.Join(dst, filepath.Base(src))
		}
		copyFile(t, src, dst, st.Mode().Perm())
		if err := os.Chown(dst, owner[0], owner[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range img.volumes {
		// Docker creates a missing volume folder as root:root 0755: a
		// Dockerfile that forgot to make it the USER's fails here.
		if err := os.MkdirAll(filepath.Join(root, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// inImage runs args inside root as the image's USER, with its ENV only.
func inImage(ctx context.Context, img image, root string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = "/"
	cmd.Env = append([]string{"HOME=/"}, img.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: img.uid, Gid: img.gid, Groups: []uint32{}},
	}
	return cmd
}

// TestContainerImage lays out the relay image's final stage, checks that
// its binary is static and its CA bundle usable, starts ENTRYPOINT + CMD in
// a chroot as the image's USER (with the listen address mapped to a free
// loopback port, as `docker run -p` would), and checks /healthz, the
// image's HEALTHCHECK and an admin command (org create) on the volume's
// database, as `docker exec` would run it.
func TestContainerImage(t *testing.T) {
	img := parseDockerfile(t, "container/Dockerfile")
	if img.uid == 0 || img.gid == 0 {
		t.Fatalf("USER %d:%d: the image must not run as root", img.uid, img.gid)
	}
	if len(img.volumes) != 1 || img.volumes[0] != "/var/lib/fleet-relay" {
		t.Fatalf("VOLUME %q", img.volumes)
	}
	root := layout(t, img)

	exe := filepath.Join(root, img.entrypoint[0])
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s has an ELF interpreter: not static, it cannot run FROM scratch", img.entrypoint[0])
		}
	}
	if libs, _ := ef.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("%s needs shared libraries %v", img.entrypoint[0], libs)
	}
	ef.Close()

	// HTTPS webhooks: Go reads /etc/ssl/certs/ca-certificates.crt on Debian
	// layouts; the file must be there and hold certificates.
	pem, err := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil {
		t.Fatalf("no CA bundle in the image: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) || strings.Count(string(pem), "BEGIN CERTIFICATE") < 50 {
		t.Fatalf("CA bundle holds %d certificates", strings.Count(string(pem), "BEGIN CERTIFICATE"))
	}

	// Map the listen port: CMD's --listen 0.0.0.0:<EXPOSE> becomes a free
	// loopback port (the test shares the host's network).
	args := append(append([]string{}, img.entrypoint...), img.cmd...)
	var db string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--listen":
			_, port, _ := net.SplitHostPort(args[i+1])
			if !contains(img.expose, port) {
				t.Fatalf("CMD listens on %s, EXPOSE %v", args[i+1], img.expose)
			}
			args[i+1] = addr
		case "--db":
			db = args[i+1]
		}
	}
	if !strings.HasPrefix(db, img.volumes[0]+"/") {
		t.Fatalf("CMD --db %q is not on the volume %s", db, img.volumes[0])
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	relay := inImage(ctx, img, root, args...)
	logs := &logbuf.Buffer{}
	relay.Stdout, relay.Stderr = logs, logs
	if err := relay.Start(); err != nil {
		t.Fatalf("start %v in the image: %v", args, err)
	}
	stopped := false
	defer func() {
		if !stopped {
			relay.Process.Kill()
			relay.Wait()
		}
	}()
	waitHealthy(t, "http://"+addr+"/readyz", logs)

	hc := append([]string{}, img.healthcheck...)
	for i, a := range hc {
		hc[i] = strings.Replace(a, "127.0.0.1:8080", addr, 1)
	}
	if out, err := inImage(ctx, img, root, hc...).CombinedOutput(); err != nil {
		t.Fatalf("HEALTHCHECK %v: %v\n%s", hc, err, out)
	}

	out, err := inImage(ctx, img, root, img.entrypoint[0], "org", "create", "--db", db, "--name", "Acme", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("org create in the image: %v\n%s", err, out)
	}
	var org struct{ ID, Name string }
	if err := json.Unmarshal(out, &org); err != nil || org.Name != "Acme" || org.ID == "" {
		t.Fatalf("org create printed %q (%v)", out, err)
	}
	st, err := os.Stat(filepath.Join(root, db))
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != img.uid {
		t.Fatalf("%s owned by %d, want the image's USER %d", db, sys.Uid, img.uid)
	}
	out, err = inImage(ctx, img, root, img.entrypoint[0], "org", "list", "--db", db, "--json").CombinedOutput()
	if err != nil || !strings.Contains(string(out), org.ID) {
		t.Fatalf("org list in the image: %v\n%s", err, out)
	}

	relay.Process.Signal(syscall.SIGTERM)
	err = relay.Wait()
	stopped = true
	if err != nil {
		t.Fatalf("relay exit on SIGTERM: %v\n%s", err, logs.String())
	}
}

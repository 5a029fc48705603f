// Package pgtest runs throwaway PostgreSQL servers for tests: Debian's
// postgresql binaries (/usr/lib/postgresql/<version>/bin, installed with
// apt-get when missing and the test runs as root), a cluster made by initdb
// in a fresh temporary directory, run as an unprivileged user (postgres
// refuses root: as root the server runs as the postgres user through
// runuser), listening on 127.0.0.1 on a free port of its own with password
// authentication, and removed afterwards. It never uses a server that is
// already running. One server per test binary (Main in TestMain) with a
// database per test (CreateDB) keeps tests fast and apart; Stop and Start
// take the server away and bring it back on the same port for outage tests.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// User is the superuser of every test cluster; its password is random per
// server (Server.Password).
const User = "fleet"

// Server is one running test cluster.
type Server struct {
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Password is User's password.
	Password string

	bin  string // directory of the PostgreSQL programs
	dir  string // the temporary directory: data/ and the socket directory
	data string
	sock string
	log  string
	asPG bool // run the programs as the postgres user (the test runs as root)

	mu      sync.Mutex
	running bool
	dbs     atomic.Int64 // databases made, for their names
}

// Start makes a new cluster and starts it.
func Start() (*Server, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fleet-pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, data: filepath.Join(dir, "data"), sock: dir, log: filepath.Join(dir, "postgres.log")}
	fail := func(err error) (*Server, error) {
		s.Close()
		return nil, err
	}
	if os.Geteuid() == 0 {
		s.asPG = true
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("pgtest: running as root needs the postgres user (made by Debian's postgresql package): %w", err))
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return fail(err)
		}
	}
	pw := make([]byte, 16)
	rand.Read(pw)
	s.Password = hex.EncodeToString(pw)
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte(s.Password+"\n"), 0o600); err != nil {
		return fail(err)
	}
	if s.asPG {
		u, _ := user.Lookup("postgres")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		os.Chown(pwfile, uid, gid)
	}
	if out, err := s.run("initdb", "-D", s.data, "-U", User, "--pwfile", pwfile, "--auth-local=trust", "--auth-host=scram-sha-256",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return fail(fmt.Errorf("pgtest: initdb: %v\n%s", err, out))
	}
	os.Remove(pwfile)
	if s.Port, err = freePort(); err != nil {
		return fail(err)
	}
	if err := s.Start(); err != nil {
		return fail(err)
	}
	return s, nil
}

// Binaries returns the directory of Debian's PostgreSQL programs (the
// newest version installed), installing the postgresql package with
// apt-get when none is there and the process runs as root.
func Binaries() (string, error) {
	if dir := findBinaries(); dir != "" {
		return dir, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("pgtest: PostgreSQL is not installed (/usr/lib/postgresql/*/bin/postgres); install Debian's postgresql package, or run as root to let the tests install it")
	}
	if err := install(); err != nil {
		return "", err
	}
	if dir := findBinaries(); dir != "" {
		return dir, nil
	}
	return "", errors.New("pgtest: postgresql installed but no /usr/lib/postgresql/*/bin/postgres found")
}

func findBinaries() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				return d
			}
		}
	}
	return ""
}

// install runs apt-get install postgresql under a lock file, so that test
// binaries running in parallel install it once.
func install() error {
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "fleet-pgtest-install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if findBinaries() != "" {
		return nil
	}
	apt := func(args ...string) ([]byte, error) {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if _, err := apt("install", "-y", "--no-install-recommends", "postgresql"); err != nil {
		if out, err := apt("update"); err != nil {
			return fmt.Errorf("pgtest: apt-get update: %v\n%s", err, out)
		}
		if out, err := apt("install", "-y", "--no-install-recommends", "postgresql"); err != nil {
			return fmt.Errorf("pgtest: apt-get install postgresql: %v\n%s", err, out)
		}
	}
	return nil
}

// run runs one of the PostgreSQL programs, as the postgres user when the
// test runs as root.
func (s *Server) run(prog string, args ...string) ([]byte, error) {
	cmd := s.command(prog, args...)
	return cmd.CombinedOutput()
}

func (s *Server) command(prog string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, prog)
	if s.asPG {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// Start starts the server (again, after Stop) on its port and waits until
// it accepts connections.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	opts := strings.Join([]string{
		"-p " + strconv.Itoa(s.Port),
		"-h 127.0.0.1",
		"-k " + s.sock,
		"-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off",
		"-c max_connections=400",
		"-c shared_buffers=64MB",
		"-c log_min_messages=warning",
	}, " ")
	out, err := s.run("pg_ctl", "-D", s.data, "-l", s.log, "-o", opts, "-w", "-t", "60", "start")
	if err != nil {
		logText, _ := os.ReadFile(s.log)
		return fmt.Errorf("pgtest: start: %v\n%s\n%s", err, out, tail(logText, 2000))
	}
	s.running = true
	return nil
}

// Stop stops the server at once (fast shutdown: open connections are cut);
// its data stays for Start.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	out, err := s.run("pg_ctl", "-D", s.data, "-m", "fast", "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("pgtest: stop: %v\n%s", err, out)
	}
	s.running = false
	return nil
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	if s == nil {
		return
	}
	s.Stop()
	os.RemoveAll(s.dir)
}

// URL returns the connection URL of database db, with the password.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", User, s.Password, s.Port, db)
}

// Log returns the end of the server's log, for test failures.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.log)
	return tail(b, 4000)
}

// NewDatabase creates a database with a fresh name, a copy of template
// ("" for an empty one), and returns its URL; drop removes it.
func (s *Server) NewDatabase(ctx context.Context, template string) (url string, drop func() error, err error) {
	if template == "" {
		template = "template0"
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.dbs.Add(1))
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", nil, fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+pgx.Identifier{template}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("pgtest: create database: %w", err)
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return err
	}
	return s.URL(name), drop, nil
}

// CreateDB creates an empty database for tb and drops it when tb ends.
func (s *Server) CreateDB(tb testing.TB) string {
	tb.Helper()
	return s.CreateDBFrom(tb, "")
}

// CreateDBFrom creates a copy of database template for tb (a template
// prepared once, with a schema applied, makes each test's database in
// milliseconds) and drops it when tb ends.
func (s *Server) CreateDBFrom(tb testing.TB, template string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, drop, err := s.NewDatabase(ctx, template)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := drop(); err != nil {
			tb.Logf("pgtest: drop database: %v", err)
		}
	})
	return url
}

// Main runs a test binary's tests with one server, set in *srv before they
// run and removed after: call it from TestMain.
func Main(m *testing.M, srv **Server) {
	s, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*srv = s
	code := m.Run()
	s.Close()
	os.Exit(code)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Shared is a server for a test binary that starts it on first use only
// (tests that need no PostgreSQL do not wait for one): call Get in tests and
// Close from TestMain after m.Run.
type Shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Get returns the shared server, starting it on the first call.
func (sh *Shared) Get(tb testing.TB) *Server {
	tb.Helper()
	sh.once.Do(func() { sh.srv, sh.err = Start() })
	if sh.err != nil {
		tb.Fatal(sh.err)
	}
	return sh.srv
}

// Close stops and removes the server if it was started.
func (sh *Shared) Close() {
	sh.once.Do(func() {}) // no start after Close
	sh.srv.Close()
}

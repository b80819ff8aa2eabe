// Package pgtest starts a throwaway PostgreSQL server for tests: initdb
// and pg_ctl from the host's PostgreSQL installation (Debian's
// postgresql package puts them in /usr/lib/postgresql/VERSION/bin), a data
// directory in a temporary folder, listening on loopback only. Run as
// root (CI), the server runs as the postgres system user, since
// PostgreSQL refuses to run as root.
package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// Server is a running PostgreSQL server.
type Server struct {
	dir  string // temporary folder holding the data directory
	data string
	bin  string
	port int
	as   string // system user the server runs as; "" = this process's user
	n    atomic.Int64
}

// BinDir finds the directory holding initdb and pg_ctl: $PATH first, then
// the newest /usr/lib/postgresql/*/bin.
func BinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl) in $PATH or /usr/lib/postgresql/*/bin")
}

// Start initialises and starts a server.
func Start() (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "testbed-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, data: filepath.Join(dir, "data"), bin: bin}
	if err := s.start(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, nil
}

func (s *Server) start() error {
	if os.Geteuid() == 0 {
		if err := s.handOver(); err != nil {
			return err
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s.port = port
	if out, err := s.cmd("initdb", "-D", s.data, "-A", "trust", "-U", "testbed", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	opts := fmt.Sprintf("-h 127.0.0.1 -p %d -k %s -F", port, s.data)
	logf := filepath.Join(s.dir, "log")
	out, err := s.cmd("pg_ctl", "-D", s.data, "-o", opts, "-l", logf, "-w", "-t", "60", "start").CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(logf)
		return fmt.Errorf("pg_ctl start: %w: %s%s", err, out, log)
	}
	return nil
}

// handOver gives the folder to the postgres user, which the server will
// run as.
func (s *Server) handOver() error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root and no postgres user to run the server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chmod(s.dir, 0o755); err != nil {
		return err
	}
	if err := os.Chown(s.dir, uid, gid); err != nil {
		return err
	}
	s.as = "postgres"
	return nil
}

func (s *Server) cmd(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if s.as == "" {
		return exec.Command(path, args...)
	}
	return exec.Command("runuser", append([]string{"-u", s.as, "--", path}, args...)...)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// URL is the connection URL of database db.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://testbed@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// NewDatabase creates an empty database and returns its URL.
func (s *Server) NewDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.n.Add(1))
	db, err := sql.Open("pgx", s.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	return s.URL(name), nil
}

// Stop stops the server and removes its files.
func (s *Server) Stop() error {
	var errs []error
	if out, err := s.cmd("pg_ctl", "-D", s.data, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("pg_ctl stop: %w: %s", err, bytes.TrimSpace(out)))
	}
	return errors.Join(append(errs, os.RemoveAll(s.dir))...)
}

var (
	shared     *Server
	sharedErr  error
	sharedOnce sync.Once
)

// Database returns the URL of a fresh database on the package's shared
// server, started on first use; StopShared (from TestMain) stops it. When
// no server can be started the test is skipped with the reason, except
// in CI (CI=true), where that is a failure.
func Database(t testing.TB) string {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = Start() })
	if sharedErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but no PostgreSQL server could be started: %v", sharedErr)
		}
		t.Skipf("PostgreSQL test skipped (install postgresql, or set CI=true to make this a failure): %v", sharedErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, err := shared.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// StopShared stops the shared server, if one was started.
func StopShared() error {
	if shared == nil {
		return nil
	}
	return shared.Stop()
}

package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	// The two database/sql drivers: "pgx" and "sqlite".
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

// Store is an open results store.
type Store struct {
	db       *sql.DB
	postgres bool
	where    string // the location, without a password, for messages
}

// IsURL reports whether loc names a PostgreSQL server rather than a file.
func IsURL(loc string) bool {
	return strings.HasPrefix(loc, "postgres://") || strings.HasPrefix(loc, "postgresql://")
}

// Open opens the store at loc, a postgres:// URL or an SQLite file path
// (created with its directory when missing), and brings its schema up to
// date.
func Open(ctx context.Context, loc string) (*Store, error) {
	if strings.TrimSpace(loc) == "" {
		return nil, errors.New("store: empty location: want a file path or a postgres:// URL")
	}
	s := &Store{postgres: IsURL(loc), where: redact(loc)}
	var err error
	if s.postgres {
		s.db, err = sql.Open("pgx", loc)
	} else {
		s.db, err = openSQLite(loc)
	}
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", s.where, err)
	}
	if err := s.db.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("store %s: %w", s.where, err), s.db.Close())
	}
	if err := s.migrate(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("store %s: %w", s.where, err), s.db.Close())
	}
	return s, nil
}

// openSQLite opens an SQLite file in WAL mode: readers never block the
// one writer, and a killed writer leaves the file consistent. The busy
// timeout lets two testbed processes share one file.
func openSQLite(path string) (*sql.DB, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	// One connection: SQLite has one writer anyway, and pragmas are per
	// connection.
	db.SetMaxOpenConns(1)
	return db, nil
}

// redact drops the password from a URL for messages.
func redact(loc string) string {
	at := strings.LastIndex(loc, "@")
	scheme := strings.Index(loc, "://")
	if !IsURL(loc) || at < 0 || scheme < 0 {
		return loc
	}
	user := loc[scheme+3 : at]
	if i := strings.Index(user, ":"); i >= 0 {
		user = user[:i] + ":xxxxx"
	}
	return loc[:scheme+3] + user + loc[at:]
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

// String names the store for messages, without a password.
func (s *Store) String() string { return s.where }

// q rewrites a query written with ? placeholders for the backend:
// PostgreSQL numbers them ($1, $2, …). No query here has a ? inside a
// string literal.
func (s *Store) q(query string) string {
	if !s.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// DefaultLocation is the store used when none is given: history.db in
// the user's data directory ($XDG_DATA_HOME/testbed, else
// ~/.local/share/testbed on Unix, the user config directory elsewhere).
func DefaultLocation() (string, error) {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "testbed", "history.db"), nil
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" && home != "/" && filepath.Separator == '/' {
		return filepath.Join(home, ".local", "share", "testbed", "history.db"), nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no data directory for the results store (set TESTBED_STORE or use --no-store): %w", err)
	}
	return filepath.Join(d, "testbed", "history.db"), nil
}

func nowNS() int64 { return time.Now().UnixNano() }

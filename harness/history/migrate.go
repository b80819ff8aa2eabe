package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// migrations are the schema's versions in order: migrations[i] takes a
// database from version i to i+1. Never edit a released entry; append.
// The SQL is the common subset of SQLite and PostgreSQL: TEXT, BIGINT,
// INTEGER, DOUBLE PRECISION, times as Unix nanoseconds.
var migrations = [][]string{
	{ // 1: runs and their steps
		`CREATE TABLE runs (
			run_id TEXT PRIMARY KEY,
			kind TEXT NOT NULL,
			name TEXT NOT NULL,
			status TEXT NOT NULL,
			error TEXT NOT NULL,
			started_ns BIGINT NOT NULL,
			ended_ns BIGINT NOT NULL,
			stored_ns BIGINT NOT NULL,
			tool_version TEXT NOT NULL,
			fingerprint TEXT NOT NULL,
			fingerprint_json TEXT NOT NULL,
			plan_json TEXT NOT NULL,
			env_json TEXT NOT NULL,
			knees_json TEXT NOT NULL,
			source_dir TEXT NOT NULL,
			records BIGINT NOT NULL
		)`,
		`CREATE INDEX runs_started ON runs (started_ns)`,
		`CREATE INDEX runs_fingerprint ON runs (fingerprint, started_ns)`,
		`CREATE TABLE steps (
			run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
			step INTEGER NOT NULL,
			target TEXT NOT NULL,
			scenario TEXT NOT NULL,
			concurrency INTEGER NOT NULL,
			rate DOUBLE PRECISION NOT NULL,
			requests INTEGER NOT NULL,
			ok INTEGER NOT NULL,
			summary_json TEXT NOT NULL,
			histograms_json TEXT NOT NULL,
			PRIMARY KEY (run_id, step)
		)`,
		`CREATE INDEX steps_target ON steps (target, scenario)`,
	},
}

// SchemaVersion is the schema version this build writes.
var SchemaVersion = len(migrations)

// migrate applies the migrations the database lacks. Each runs in one
// transaction together with its row in schema_migrations, so a crash
// mid-way leaves the previous version intact. Two processes migrating at
// once: the loser's insert of the version row fails on the primary key
// and its transaction rolls back; it then finds the schema current.
func (s *Store) migrate(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY,
		applied_ns BIGINT NOT NULL)`)
	if err != nil {
		return fmt.Errorf("schema_migrations: %w", err)
	}
	for attempt := 0; ; attempt++ {
		v, err := s.version(ctx)
		if err != nil {
			return err
		}
		if v > len(migrations) {
			return fmt.Errorf(
				"schema version %d is newer than this testbed knows (%d): upgrade testbed",
				v,
				len(migrations),
			)
		}
		if v == len(migrations) {
			return nil
		}
		if err := s.apply(ctx, v+1); err != nil {
			if attempt < 3 {
				continue // maybe another process applied it meanwhile
			}
			return err
		}
	}
}

func (s *Store) version(ctx context.Context) (int, error) {
	var v sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("schema version: %w", err)
	}
	return int(v.Int64), nil
}

func (s *Store) apply(ctx context.Context, version int) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback())
		}
	}()
	for _, stmt := range migrations[version-1] {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migration %d: %w", version, err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO schema_migrations (version, applied_ns) VALUES (?, ?)`),
		version, nowNS()); err != nil {
		return fmt.Errorf("migration %d: %w", version, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %d: %w", version, err)
	}
	return nil
}

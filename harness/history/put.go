package history

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Put stores r in one transaction: either the run and all its steps are
// in the store afterwards, or nothing of it is. A run whose id is already
// stored is left as it is: stored is false and err nil.
func (s *Store) Put(ctx context.Context, r *Run) (stored bool, err error) {
	if r.ID == "" {
		return false, errors.New("store: run has no id")
	}
	row, err := runRow(r)
	if err != nil {
		return false, fmt.Errorf("store: run %s: %w", r.ID, err)
	}
	// Encode before the transaction, so it holds the write lock only to write.
	steps := make([][]any, len(r.Steps))
	for i := range r.Steps {
		if steps[i], err = stepRow(r.ID, &r.Steps[i]); err != nil {
			return false, fmt.Errorf("store: run %s: %w", r.ID, err)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("store: %w", err)
	}
	defer func() {
		if err != nil || !stored {
			err = errors.Join(err, tx.Rollback())
		}
	}()
	res, err := tx.ExecContext(ctx, s.q(`INSERT INTO runs (run_id, kind, name, status, error, started_ns, ended_ns,
		stored_ns, tool_version, fingerprint, fingerprint_json, plan_json, env_json, knees_json, source_dir, records)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING`), row...)
	if err != nil {
		return false, fmt.Errorf("store: run %s: %w", r.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return false, fmt.Errorf("store: run %s: %w", r.ID, err)
		}
		return false, s.sameRun(ctx, tx, r)
	}
	for i, row := range steps {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO steps (run_id, step, target, scenario, concurrency, rate,
			requests, ok, summary_json, histograms_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), row...); err != nil {
			return false, fmt.Errorf("store: run %s: step %d: %w", r.ID, r.Steps[i].Summary.Step, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("store: run %s: %w", r.ID, err)
	}
	return true, nil
}

// sameRun checks that the stored run with r's id is r, not another run
// whose short random id collided with it.
func (s *Store) sameRun(ctx context.Context, tx *sql.Tx, r *Run) error {
	var start int64
	err := tx.QueryRowContext(ctx, s.q(`SELECT started_ns FROM runs WHERE run_id = ?`), r.ID).Scan(&start)
	if err != nil {
		return fmt.Errorf("store: run %s: %w", r.ID, err)
	}
	if start != unixNS(r.Start) {
		return fmt.Errorf("store: run id %s is already taken by a run started at %s, not this one (started %s)",
			r.ID, fromNS(start).Format(time.RFC3339), r.Start.UTC().Format(time.RFC3339))
	}
	return nil
}

func runRow(r *Run) ([]any, error) {
	fp, err := json.Marshal(r.Fingerprint)
	if err != nil {
		return nil, err
	}
	knees, err := json.Marshal(r.Knees)
	if err != nil {
		return nil, err
	}
	plan := string(r.Plan)
	env := string(r.Env)
	return []any{r.ID, r.Kind, r.Name, r.Status, r.Error, unixNS(r.Start), unixNS(r.End), nowNS(), r.ToolVersion,
		r.Fingerprint.Hash, string(fp), orJSON(plan), orJSON(env), string(knees), r.SourceDir, r.Records}, nil
}

func orJSON(s string) string {
	if s == "" {
		return "null"
	}
	return s
}

func stepRow(runID string, st *Step) ([]any, error) {
	sum, err := json.Marshal(st.Summary)
	if err != nil {
		return nil, fmt.Errorf("step %d: %w", st.Summary.Step, err)
	}
	hist, err := json.Marshal(st.Histograms)
	if err != nil {
		return nil, fmt.Errorf("step %d: %w", st.Summary.Step, err)
	}
	ss := &st.Summary
	return []any{runID, ss.Step, ss.Target, ss.Scenario, ss.Concurrency, ss.Rate, ss.Requests, ss.OK,
		string(sum), string(hist)}, nil
}

func unixNS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNS(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

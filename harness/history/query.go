package history

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNotFound is returned for a run id the store does not hold.
var ErrNotFound = errors.New("no such run in the store")

// Filter selects runs for List; zero fields select everything.
type Filter struct {
	Target      string    // a step ran against this target
	Scenario    string    // a step ran this scenario
	Since       time.Time // started at or after
	Fingerprint string    // this fingerprint hash
	Status      string    // this status
	Limit       int       // at most this many, newest first; 0 = all
}

// Entry is one run in a listing: the run without its steps' data.
type Entry struct {
	ID          string
	Kind        string
	Name        string
	Status      string
	Start       time.Time
	End         time.Time
	Fingerprint string
	Targets     string // comma-separated
	Scenarios   string
	Steps       int
	Requests    int
}

// List returns the runs f selects, oldest first (the newest Limit when
// Limit is set).
func (s *Store) List(ctx context.Context, f Filter) ([]Entry, error) {
	var where []string
	var args []any
	if f.Target != "" {
		where = append(where, `EXISTS (SELECT 1 FROM steps x WHERE x.run_id = r.run_id AND x.target = ?)`)
		args = append(args, f.Target)
	}
	if f.Scenario != "" {
		where = append(where, `EXISTS (SELECT 1 FROM steps x WHERE x.run_id = r.run_id AND x.scenario = ?)`)
		args = append(args, f.Scenario)
	}
	if !f.Since.IsZero() {
		where = append(where, `r.started_ns >= ?`)
		args = append(args, f.Since.UnixNano())
	}
	if f.Fingerprint != "" {
		where = append(where, `r.fingerprint = ?`)
		args = append(args, f.Fingerprint)
	}
	if f.Status != "" {
		where = append(where, `r.status = ?`)
		args = append(args, f.Status)
	}
	q := `SELECT r.run_id, r.kind, r.name, r.status, r.started_ns, r.ended_ns, r.fingerprint,
		(SELECT COUNT(*) FROM steps x WHERE x.run_id = r.run_id),
		(SELECT COALESCE(SUM(x.requests), 0) FROM steps x WHERE x.run_id = r.run_id)
		FROM runs r`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY r.started_ns DESC, r.run_id DESC"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := s.db.QueryContext(ctx, s.q(q), args...)
	if err != nil {
		return nil, fmt.Errorf("store: list: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		var start, end, steps, reqs int64
		if err := rows.Scan(&e.ID, &e.Kind, &e.Name, &e.Status, &start, &end, &e.Fingerprint, &steps, &reqs); err != nil {
			return nil, fmt.Errorf("store: list: %w", err)
		}
		e.Start, e.End, e.Steps, e.Requests = fromNS(start), fromNS(end), int(steps), int(reqs)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list: %w", err)
	}
	reverse(out)
	return out, s.fillTargets(ctx, out)
}

func reverse(e []Entry) {
	for i, j := 0, len(e)-1; i < j; i, j = i+1, j-1 {
		e[i], e[j] = e[j], e[i]
	}
}

// fillTargets sets each entry's targets and scenarios from its steps.
func (s *Store) fillTargets(ctx context.Context, es []Entry) error {
	for i := range es {
		rows, err := s.db.QueryContext(
			ctx,
			s.q(`SELECT target, scenario FROM steps WHERE run_id = ? ORDER BY step`),
			es[i].ID,
		)
		if err != nil {
			return fmt.Errorf("store: list: %w", err)
		}
		var ts, ss []string
		for rows.Next() {
			var t, sc string
			if err := rows.Scan(&t, &sc); err != nil {
				rows.Close()
				return fmt.Errorf("store: list: %w", err)
			}
			ts, ss = appendNew(ts, t), appendNew(ss, sc)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("store: list: %w", err)
		}
		es[i].Targets, es[i].Scenarios = strings.Join(ts, ","), strings.Join(ss, ",")
	}
	return nil
}

func appendNew(v []string, s string) []string {
	for _, x := range v {
		if x == s {
			return v
		}
	}
	return append(v, s)
}

// Get reads one whole run. id may be a unique prefix of a run id.
func (s *Store) Get(ctx context.Context, id string) (*Run, error) {
	full, err := s.resolve(ctx, id)
	if err != nil {
		return nil, err
	}
	r := &Run{ID: full}
	var start, end, stored int64
	var fp, knees string
	var plan, env string
	err = s.db.QueryRowContext(ctx, s.q(`SELECT kind, name, status, error, started_ns, ended_ns, stored_ns,
		tool_version, fingerprint_json, plan_json, env_json, knees_json, source_dir, records
		FROM runs WHERE run_id = ?`), full).Scan(&r.Kind, &r.Name, &r.Status, &r.Error, &start, &end, &stored,
		&r.ToolVersion, &fp, &plan, &env, &knees, &r.SourceDir, &r.Records)
	if err != nil {
		return nil, fmt.Errorf("store: run %s: %w", full, err)
	}
	r.Start, r.End, r.StoredAt = fromNS(start), fromNS(end), fromNS(stored)
	r.Plan, r.Env = json.RawMessage(plan), json.RawMessage(env)
	if err := errors.Join(json.Unmarshal([]byte(fp), &r.Fingerprint), json.Unmarshal([]byte(knees), &r.Knees)); err != nil {
		return nil, fmt.Errorf("store: run %s: %w", full, err)
	}
	if r.Steps, err = s.steps(ctx, full); err != nil {
		return nil, fmt.Errorf("store: run %s: %w", full, err)
	}
	return r, nil
}

// resolve turns a run id or a unique prefix of one into the full id.
func (s *Store) resolve(ctx context.Context, id string) (string, error) {
	id = strings.TrimSpace(id)
	if id == "" {
		return "", fmt.Errorf("%w: empty run id", ErrNotFound)
	}
	like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(id) + "%"
	rows, err := s.db.QueryContext(
		ctx,
		s.q(`SELECT run_id FROM runs WHERE run_id LIKE ? ESCAPE '\' ORDER BY run_id LIMIT 3`),
		like,
	)
	if err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return "", fmt.Errorf("store: %w", err)
		}
		if v == id {
			return v, nil
		}
		ids = append(ids, v)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("%w: %q", ErrNotFound, id)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("run id %q is ambiguous: %s, …", id, strings.Join(ids, ", "))
}

func (s *Store) steps(ctx context.Context, runID string) ([]Step, error) {
	rows, err := s.db.QueryContext(
		ctx,
		s.q(`SELECT summary_json, histograms_json FROM steps WHERE run_id = ? ORDER BY step`),
		runID,
	)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Step
	for rows.Next() {
		var sum, hist string
		if err := rows.Scan(&sum, &hist); err != nil {
			return nil, err
		}
		var st Step
		if err := json.Unmarshal([]byte(sum), &st.Summary); err != nil {
			return nil, fmt.Errorf("step summary: %w", err)
		}
		if err := json.Unmarshal([]byte(hist), &st.Histograms); err != nil {
			return nil, fmt.Errorf("step %d histograms: %w", st.Summary.Step, err)
		}
		out = append(out, st)
	}
	return out, rows.Err()
}

// Last returns the newest complete run with the given fingerprint other
// than except, or ErrNotFound.
func (s *Store) Last(ctx context.Context, fingerprint, except string) (*Run, error) {
	var id string
	err := s.db.QueryRowContext(ctx, s.q(`SELECT run_id FROM runs WHERE fingerprint = ? AND status = ? AND run_id <> ?
		ORDER BY started_ns DESC LIMIT 1`), fingerprint, StatusComplete, except).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: no earlier complete run of this plan (fingerprint %s)", ErrNotFound, fingerprint)
	}
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return s.Get(ctx, id)
}

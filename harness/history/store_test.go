package history

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// TestStoreRoundTrip stores a real run, reads it back whole, stores it
// again (a no-op) and finds it through every filter, on each backend.
func TestStoreRoundTrip(t *testing.T) {
	t.Parallel()
	dir := mockRun(t, 5*time.Millisecond, time.Millisecond, 6)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := openStore(t, b.loc(t))
			r, err := FromDir(dir, "run", map[string]string{"image": "mock:dev"})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != StatusComplete || len(r.Steps) != 2 || len(r.Knees) == 0 {
				t.Fatalf("FromDir: status %q, %d steps, %d knees", r.Status, len(r.Steps), len(r.Knees))
			}
			if stored, err := s.Put(ctx, r); err != nil || !stored {
				t.Fatalf("Put = %v, %v; want stored", stored, err)
			}
			if stored, err := s.Put(ctx, r); err != nil || stored {
				t.Fatalf("second Put = %v, %v; want a no-op", stored, err)
			}
			got, err := s.Get(ctx, r.ID[:8])
			if err != nil {
				t.Fatal(err)
			}
			checkSame(t, r, got)
			for _, f := range []struct {
				name string
				f    Filter
				want int
			}{
				{"all", Filter{}, 1},                             // no filter
				{"target", Filter{Target: "mock"}, 1},            // a step ran against mock
				{"other target", Filter{Target: "vllm"}, 0},      // none against vllm
				{"scenario", Filter{Scenario: "concurrency"}, 1}, // the ladder's scenario
				{"since before", Filter{Since: r.Start.Add(-time.Hour)}, 1},
				{"since after", Filter{Since: r.Start.Add(time.Hour)}, 0},
				{"fingerprint", Filter{Fingerprint: r.Fingerprint.Hash}, 1},
			} {
				es, err := s.List(ctx, f.f)
				if err != nil {
					t.Fatal(err)
				}
				if len(es) != f.want {
					t.Errorf("List(%s) = %d runs, want %d", f.name, len(es), f.want)
				}
			}
		})
	}
}

// checkSame compares what was stored with what was read back: every
// summary field and every histogram, bucket for bucket.
func checkSame(t *testing.T, want, got *Run) {
	t.Helper()
	if got.ID != want.ID || got.Status != want.Status || got.Fingerprint.Hash != want.Fingerprint.Hash ||
		!got.Start.Equal(want.Start) || got.Records != want.Records || got.Fingerprint.Labels["image"] != "mock:dev" {
		t.Errorf("run read back differs:\n got %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(got.Knees, want.Knees) {
		t.Errorf("knees: got %+v, want %+v", got.Knees, want.Knees)
	}
	if len(got.Steps) != len(want.Steps) {
		t.Fatalf("%d steps read back, want %d", len(got.Steps), len(want.Steps))
	}
	for i := range want.Steps {
		if !reflect.DeepEqual(got.Steps[i].Summary, want.Steps[i].Summary) {
			t.Errorf("step %d summary differs", i)
		}
		for name, m := range want.Steps[i].Histograms.Metrics {
			g := got.Steps[i].Histograms.Metrics[name]
			if g == nil || g.Stats() != m.Stats() || g.Quantile(99.99) != m.Quantile(99.99) {
				t.Errorf("step %d %s histogram differs", i, name)
			}
		}
	}
}

// TestPutAllOrNothing: a run whose second step cannot be stored leaves
// nothing behind, not a run with one step.
func TestPutAllOrNothing(t *testing.T) {
	t.Parallel()
	dir := mockRun(t, 2*time.Millisecond, time.Millisecond, 3)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := openStore(t, b.loc(t))
			r, err := FromDir(dir, "run", nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Steps[1].Summary.Step = r.Steps[0].Summary.Step // the primary key refuses it
			if _, err := s.Put(ctx, r); err == nil {
				t.Fatal("Put of a run with two steps numbered alike succeeded")
			}
			if _, err := s.Get(ctx, r.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("after a failed Put, Get = %v, want ErrNotFound", err)
			}
		})
	}
}

// TestFromDirStatuses: an interrupted run and the directory of a killed
// one are read as such.
func TestFromDirStatuses(t *testing.T) {
	t.Parallel()
	dir := mockRun(t, 2*time.Millisecond, time.Millisecond, 3)
	for _, tt := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
		steps  int
	}{
		{"complete", func(*testing.T, string) {}, StatusComplete, 2}, // as written
		{"interrupted", func(t *testing.T, d string) { // Ctrl-C: run.json says so
			editInfo(t, d, func(i *results.RunInfo[harness.Plan]) { i.Interrupted = true })
		}, StatusInterrupted, 2},
		{"killed", func(t *testing.T, d string) { // SIGKILL: no end, no summary, one step's histograms
			editInfo(t, d, func(i *results.RunInfo[harness.Plan]) { i.End = time.Time{} })
			must(t, os.Remove(filepath.Join(d, results.SummaryFile)))
			keepFirstLine(t, filepath.Join(d, results.HistogramsFile))
		}, StatusIncomplete, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := copyDir(t, dir)
			tt.damage(t, d)
			r, err := FromDir(d, "import", nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tt.want || len(r.Steps) != tt.steps {
				t.Errorf("status %q with %d steps, want %q with %d", r.Status, len(r.Steps), tt.want, tt.steps)
			}
		})
	}
	if _, err := FromDir(t.TempDir(), "import", nil); err == nil || !strings.Contains(err.Error(), "not a results directory") {
		t.Errorf("FromDir(empty dir) = %v, want 'not a results directory'", err)
	}
}

// TestMigrations: reopening is a no-op, and a store from a newer testbed
// is refused rather than written with an older schema.
func TestMigrations(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			loc := b.loc(t)
			s := openStore(t, loc)
			if v, err := s.version(ctx); err != nil || v != SchemaVersion {
				t.Fatalf("version = %d, %v; want %d", v, err, SchemaVersion)
			}
			s2 := openStore(t, loc) // already current
			if _, err := s2.db.ExecContext(ctx, s2.q(`INSERT INTO schema_migrations (version, applied_ns) VALUES (?, ?)`),
				SchemaVersion+1, nowNS()); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(ctx, loc); err == nil || !strings.Contains(err.Error(), "newer") {
				t.Errorf("Open of a newer schema = %v, want a refusal", err)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(file, []byte(strings.Repeat("not a database\n", 100)), 0o644))
	for _, tt := range []struct {
		name, loc, want string
	}{
		{"empty", "", "empty location"},                                                   // nothing given
		{"under a file", filepath.Join(file, "h.db"), "not a directory"},                  // parent is a file
		{"not sqlite", file, "file is not a database"},                                    // some other file
		{"no server", "postgres://u:secret@127.0.0.1:1/db?connect_timeout=2", "u:xxxxx@"}, // password kept out
	} {
		_, err := Open(ctx, tt.loc)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: Open(%q) = %v, want an error with %q", tt.name, tt.loc, err, tt.want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func editInfo(t *testing.T, dir string, f func(*results.RunInfo[harness.Plan])) {
	t.Helper()
	var info results.RunInfo[harness.Plan]
	path := filepath.Join(dir, results.RunFile)
	must(t, results.ReadJSON(path, &info))
	f(&info)
	must(t, results.WriteJSON(path, info))
}

func keepFirstLine(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	first, _, _ := strings.Cut(string(b), "\n")
	must(t, os.WriteFile(path, []byte(first+"\n"+`{"step":1,"tar`), 0o644)) // and a torn line after
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	must(t, os.CopyFS(dst, os.DirFS(src)))
	return dst
}

package history

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/internal/pgtest"
	"github.com/llm-testbed/testbed/mockllm"
	"github.com/llm-testbed/testbed/mockllm/engine"
)

func TestMain(m *testing.M) {
	if os.Getenv(killHelperEnv) != "" {
		killHelper()
		return
	}
	code := m.Run()
	if err := pgtest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// backend is one kind of store the tests run against.
type backend struct {
	name string
	loc  func(t *testing.T) string
}

// backends are SQLite in a temporary file and a database on a PostgreSQL
// server the tests start.
var backends = []backend{
	{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "history.db") }},
	{"postgres", func(t *testing.T) string { return pgtest.Database(t) }},
}

func openStore(t *testing.T, loc string) *Store {
	t.Helper()
	s, err := Open(context.Background(), loc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// mockServer serves the mock in fixed mode: every request gets exactly
// ttft and itl, so a slower setting is a known regression.
func mockServer(t testing.TB, ttft, itl time.Duration) *httptest.Server {
	t.Helper()
	prof, err := engine.Preset("ideal")
	if err != nil {
		t.Fatal(err)
	}
	prof.TTFT, prof.ITL = ttft, itl
	m, err := mockllm.New(mockllm.WithProfile(prof), mockllm.WithModel("m"), mockllm.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	t.Cleanup(func() { srv.Close(); m.Close() })
	return srv
}

// testPlan is a short plan: closed-loop steps of a few requests.
func testPlan(url string, requests int, conc ...int) harness.Plan {
	if len(conc) == 0 {
		conc = []int{1, 2}
	}
	return harness.Plan{
		Name:      "history-test",
		Seed:      3,
		Targets:   []harness.Target{{Name: "mock", URL: url, Model: "m"}},
		Dataset:   harness.Dataset{InputTokens: harness.Dist{Kind: "fixed", A: 16}, OutputTokens: harness.Dist{Kind: "fixed", A: 8}},
		Load:      harness.Load{Concurrency: conc, Requests: requests, Warmup: 1},
		IgnoreEOS: true,
	}
}

// mockRun runs plan against a fixed-mode mock and returns its results
// directory.
func mockRun(t testing.TB, ttft, itl time.Duration, requests int, conc ...int) string {
	t.Helper()
	srv := mockServer(t, ttft, itl)
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := harness.Run(context.Background(), testPlan(srv.URL, requests, conc...), dir, harness.WithoutClientMonitor()); err != nil {
		t.Fatal(err)
	}
	return dir
}

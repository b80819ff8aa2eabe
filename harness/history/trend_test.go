package history

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestTrendMarksRegression: over four stored runs whose third is 10 %
// slower, the trend marks exactly that point, and its page draws the
// chart with the mark.
func TestTrendMarksRegression(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := openStore(t, b.loc(t))
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, mean := range []float64{100, 100, 110, 110} {
				r := synthRun(string(rune('a'+i))+"-run", uint64(i+1), 400, mean, 0.05)
				r.Start = t0.Add(time.Duration(i) * time.Hour)
				r.End = r.Start.Add(time.Minute)
				r.Kind = "run"
				if _, err := s.Put(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			tr, err := s.Trend(ctx, "ttft_p50", Filter{Target: "t"}, DefaultRules())
			if err != nil {
				t.Fatal(err)
			}
			var marked []string
			for _, p := range tr.Points {
				if p.Regressed {
					marked = append(marked, p.RunID)
				}
			}
			if len(tr.Points) != 4 || strings.Join(marked, ",") != "c-run" {
				var buf bytes.Buffer
				_ = tr.WriteTable(&buf)
				t.Fatalf("%d points, regressions at %q, want 4 points and c-run:\n%s", len(tr.Points), marked, buf.String())
			}
			var page bytes.Buffer
			if err := tr.WriteHTML(&page); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"<svg", "regression", `class="reg"`} {
				if !strings.Contains(page.String(), want) {
					t.Errorf("trend page lacks %q", want)
				}
			}
			if _, err := s.Trend(ctx, "bogus_p50", Filter{}, DefaultRules()); err == nil {
				t.Error("Trend of an unknown metric succeeded")
			}
		})
	}
}

package harness_test

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

var update = flag.Bool("update", false, "rewrite golden files")

func ExampleParseDist() {
	d, err := harness.ParseDist("uniform:64,256")
	if err != nil {
		panic(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	fmt.Println(d, d.Mean(), d.Sample(r) >= 64)
	// Output: uniform:64,256 160 true
}

func ExampleSummarize() {
	// Two streamed requests: TTFT 100 and 120 ms, then 3 tokens 10 ms apart.
	var recs []results.Record
	for i, ttft := range []int64{100e6, 120e6} {
		sent := int64(i) * 1e9
		recs = append(recs, results.Record{
			Target: "mock", Scenario: "concurrency", Concurrency: 1, Stream: true,
			IntendedNS: sent, SentNS: sent, FirstTokenNS: sent + ttft, LastTokenNS: sent + ttft + 20e6,
			DoneNS: sent + ttft + 20e6, ChunkGapsNS: []int64{10e6, 10e6}, NIn: 10, NOut: 3,
		})
	}
	s := harness.Summarize(recs).Steps[0]
	fmt.Printf(
		"ok %d, TTFT mean %.0f ms, ITL p50 %.0f ms, TPOT %.0f ms, %.2f req/s\n",
		s.OK,
		s.TTFT.Mean,
		s.ITL.P50,
		s.TPOT.Mean,
		s.RequestsPerS,
	)
	// Output: ok 2, TTFT mean 110 ms, ITL p50 10 ms, TPOT 10 ms, 1.75 req/s
}

// TestTableGolden pins the terminal table's layout; run with -update after
// an intended change.
func TestTableGolden(t *testing.T) {
	t.Parallel()
	var recs []results.Record
	for step, c := range []int{1, 8} {
		for i := range 20 {
			sent := int64(step)*100e9 + int64(i)*1e9
			ttft := int64(100e6 + c*int(1e6) + i*100e3)
			rec := results.Record{
				Target: "mock", Step: step, Scenario: "concurrency", Concurrency: c, Stream: true, Warmup: i == 0,
				IntendedNS: sent - 50e3, SentNS: sent, FirstTokenNS: sent + ttft, LastTokenNS: sent + ttft + 30e6,
				DoneNS: sent + ttft + 30e6, ChunkGapsNS: []int64{10e6, 10e6, 10e6}, NIn: 138, NOut: 4,
			}
			if step == 1 && i == 7 {
				rec = results.Record{Target: "mock", Step: step, Scenario: "concurrency", Concurrency: c, Stream: true,
					IntendedNS: sent, SentNS: sent, DoneNS: sent + 1e6, Status: 429, ErrorClass: results.ErrRateLimited}
			}
			recs = append(recs, rec)
		}
	}
	var buf bytes.Buffer
	if err := harness.WriteTable(&buf, harness.Summarize(recs)); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf(
			"table differs from %s (run with -update if intended):\ngot:\n%s\nwant:\n%s",
			golden,
			buf.Bytes(),
			want,
		)
	}
}

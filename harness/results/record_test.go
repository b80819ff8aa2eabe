package results

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// sampleRecords covers every kind of field: times, gaps, usage, an error.
func sampleRecords() []Record {
	return []Record{
		{
			ID: "r1-0-0", Target: "mock", Step: 0, Scenario: "concurrency", Concurrency: 4, API: "chat", Stream: true,
			IntendedNS: 1_000, SentNS: 2_000, WroteNS: 2_500, FirstByteNS: 90_000_000, FirstTokenNS: 100_002_000,
			LastTokenNS: 130_002_000, DoneNS: 130_100_000, ConnectNS: 40_000, ConnReused: true,
			ChunkGapsNS: []int64{10_000_000, 20_000_000}, ChunkTokens: []int32{1, 1, 2},
			FirstTokenKernelNS: 100_000_000, LastTokenKernelNS: 130_001_000,
			ChunkDelaysNS: []int64{2_000, 3_000, 1_000}, ChunksCoalesced: 1, CoalescedBoundNS: 19_000_000,
			NIn: 138, NOut: 4, NOutCounted: 4, UsageReported: true, NInPlanned: 128, MaxTokens: 4,
			Status: 200, FinishReason: "length",
		},
		{
			ID: "r1-0-1", Target: "mock", Step: 0, Scenario: "concurrency", Concurrency: 4, API: "chat", Stream: true, Warmup: true,
			IntendedNS: 5, DoneNS: 9, Status: 429, ErrorClass: ErrRateLimited, Error: "slow down \"please\"\n", RetryAfterMS: 644, Attempts: 2,
		},
		{
			ID:         "r1-1-0",
			Target:     "t",
			Step:       1,
			Scenario:   "rate",
			Rate:       12.5,
			API:        "tgi",
			IntendedNS: 1,
			DoneNS:     2,
			ErrorClass: ErrStreamCut,
			NOutDiff:   -3,
		},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := NewLineWriter[Record](&buf)
	in := sampleRecords()
	for i := range in {
		if err := w.Write(&in[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(in) {
		t.Fatalf("%d lines for %d records", n, len(in))
	}
	out, err := DecodeRecords(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed records:\n in  %+v\n out %+v", in, out)
	}
	if got := out[0].ChunkTimes(); !reflect.DeepEqual(got, []int64{100_002_000, 110_002_000, 130_002_000}) {
		t.Errorf("ChunkTimes = %v", got)
	}
	// Kernel times are the user-space ones less each chunk's delay, and the
	// metrics' accessors prefer them.
	r := &out[0]
	if got := r.KernelChunkTimes(); !reflect.DeepEqual(got, []int64{100_000_000, 109_999_000, 130_001_000}) {
		t.Errorf("KernelChunkTimes = %v", got)
	}
	if r.FirstToken() != 100_000_000 || r.LastToken() != 130_001_000 || r.KernelGap(0) != 9_999_000 {
		t.Errorf("FirstToken %d LastToken %d KernelGap(0) %d", r.FirstToken(), r.LastToken(), r.KernelGap(0))
	}
	// Without kernel stamps they fall back to the user-space times.
	u := &out[2]
	u.FirstTokenNS, u.LastTokenNS = 5, 7
	if u.KernelStamped() || u.FirstToken() != 5 || u.LastToken() != 7 || u.KernelChunkTimes() != nil {
		t.Errorf("unstamped record: %v %d %d", u.KernelStamped(), u.FirstToken(), u.LastToken())
	}
}

func TestDecodeRecordsTornLine(t *testing.T) {
	t.Parallel()
	in := "{\"id\":\"a\",\"step\":0}\n{\"id\":\"b\",\"st"
	out, err := DecodeRecords(strings.NewReader(in))
	if !errors.Is(err, ErrTornLine) || !strings.Contains(err.Error(), "line 2") || len(out) != 1 {
		t.Fatalf("got %d records, err %v; want 1 record and an error naming line 2", len(out), err)
	}
}

func BenchmarkRecordWrite(b *testing.B) {
	rec := sampleRecords()[0]
	rec.ChunkGapsNS = make([]int64, 128)
	for i := range rec.ChunkGapsNS {
		rec.ChunkGapsNS[i] = 10_000_000 + int64(i)
	}
	rec.ChunkTokens = nil
	var buf bytes.Buffer
	w := NewLineWriter[Record](&buf)
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		_ = w.Write(&rec)
		_ = w.Flush()
	}
}

// TestRecordShift: Shift moves every point in time and nothing else, so a
// time field added to Record without a line in Shift fails here (merged
// shards would mix clocks).
func TestRecordShift(t *testing.T) {
	t.Parallel()
	durations := map[string]bool{ // int64 ns fields that are lengths, not points in time
		"CapWaitNS": true, "DNSNS": true, "ConnectNS": true, "TLSNS": true, "CoalescedBoundNS": true, "RetryWaitNS": true,
	}
	var r Record
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Int64 {
			f.SetInt(100)
		}
	}
	r.Shift(7)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		f := v.Field(i)
		if f.Kind() != reflect.Int64 || !strings.HasSuffix(name, "NS") {
			continue
		}
		want := int64(107)
		if durations[name] {
			want = 100
		}
		if f.Int() != want {
			t.Errorf("%s = %d after Shift(7) from 100, want %d", name, f.Int(), want)
		}
	}
	var zero Record
	zero.Shift(7)
	if zero.SentNS != 0 || zero.DoneNS != 0 {
		t.Errorf("times that did not happen moved: %+v", zero)
	}
}

package engine

import (
	"context"
	"testing"
	"time"
)

// Driving the step loop one step at a time with a VirtualClock: after each
// step is formed, Stats shows the batch, the queue and the KV cache exactly.
func TestVirtualClockStepByStep(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a hang fails, never blocks CI
	defer cancel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	vc := NewVirtualClock(t0)
	p := testProfile()
	p.MaxNumSeqs = 2
	p.KVCacheBlocks = 8
	p.MaxModelLen = 128
	p.ColdStart = time.Second
	s, err := New(p, WithClock(vc))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// 20 prompt + 3 output − 1 = 22 tokens: 2 blocks each, from admission on.
	var sts []Stream
	for range 3 {
		st, err := s.Start(ctx, Request{PromptTokens: 20, OutputTokens: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		sts = append(sts, st)
	}
	prefill2, prefill1 := us(p.Beta0US+40*p.Beta1US), us(p.Beta0US+20*p.Beta1US)
	decode2, decode1 := us(p.Beta0US+2*p.Beta2US), us(p.Beta0US+p.Beta2US)
	rows := []struct {
		at               time.Duration // when the step is formed
		running, waiting int
		kv               float64
	}{
		{
			p.ColdStart,
			2,
			1,
			0.5,
		}, // two prefills; the third waits for a slot
		{p.ColdStart + prefill2, 2, 1, 0.5},                                   // decode
		{p.ColdStart + prefill2 + decode2, 2, 1, 0.5},                         // last decode of both
		{p.ColdStart + prefill2 + 2*decode2, 1, 0, 0.25},                      // the third admitted
		{p.ColdStart + prefill2 + 2*decode2 + prefill1, 1, 0, 0.25},           // its decode
		{p.ColdStart + prefill2 + 2*decode2 + prefill1 + decode1, 1, 0, 0.25}, // and its last
	}
	for i, r := range rows {
		now, err := vc.Step(ctx, 1)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if got := now.Sub(t0); got != r.at {
			t.Fatalf("row %d: clock stepped to %v, want %v", i, got, r.at)
		}
		if err := vc.WaitSleepers(ctx, 1); err != nil { // the loop formed the step and sleeps
			t.Fatalf("row %d: %v", i, err)
		}
		st := s.Stats()
		if st.Running != r.running || st.Waiting != r.waiting || st.KVCacheUsage != r.kv {
			t.Errorf("row %d at %v: %+v, want running %d waiting %d kv %.2f", i, r.at, st, r.running, r.waiting, r.kv)
		}
	}
	if got, want := sts[2].Dequeued().Sub(t0), rows[3].at; got != want {
		t.Errorf("third dequeued at %v, want %v", got, want)
	}
}

func TestVirtualClockSleep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var vc VirtualClock // the zero value works
	t0 := vc.Now()
	if err := vc.SleepUntil(ctx, t0); err != nil {
		t.Fatalf("SleepUntil(now) = %v, want immediate nil", err)
	}
	done := make(chan error, 1)
	go func() { done <- vc.SleepUntil(ctx, t0.Add(time.Second)) }()
	if err := vc.WaitSleepers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	vc.Advance(time.Second - 1)
	select {
	case <-done:
		t.Fatal("woke before its deadline")
	default:
	}
	if at, err := vc.Step(ctx, 1); err != nil || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("Step = %v, %v; want %v", at, err, t0.Add(time.Second))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A cancelled sleeper leaves and reports why.
	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- vc.SleepUntil(cctx, t0.Add(time.Hour)) }()
	if err := vc.WaitSleepers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("cancelled SleepUntil = %v", err)
	}
	if n := vc.Sleepers(); n != 0 {
		t.Fatalf("Sleepers = %d after cancel, want 0", n)
	}
}

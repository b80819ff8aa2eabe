package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/llm-testbed/testbed/mockllm/engine"
)

// A fixed-mode scheduler gives every request the profile's TTFT and ITL;
// the caller sleeps until each token's Due and writes it.
func Example() {
	p, _ := engine.Preset("ideal") // TTFT 100ms, ITL 20ms
	t0 := time.Unix(0, 0)
	vc := engine.NewVirtualClock(t0)
	s, err := engine.New(p, engine.WithClock(vc), engine.WithSeed(1))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()
	st, err := s.Start(ctx, engine.Request{ID: "req-1", PromptTokens: 12, OutputTokens: 3})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	for {
		tok, ok, err := st.Next(ctx)
		if err != nil || !ok {
			break
		}
		fmt.Println(tok.Index, tok.Due.Sub(t0))
	}
	// Output:
	// 0 100ms
	// 1 120ms
	// 2 140ms
}

// The step model on the H100 fit: a 1000-token prompt alone costs one step
// of β0 + 1000·β1 = 5753 + 17250 µs, then each decode step β0 + β2.
// A VirtualClock stepped whenever the engine sleeps runs it instantly.
func Example_engine() {
	p, _ := engine.Preset("llama3-8b-h100")
	t0 := time.Unix(0, 0)
	vc := engine.NewVirtualClock(t0)
	s, err := engine.New(p, engine.WithClock(vc))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the driver: jump to each step's end as soon as the loop sleeps
		for {
			if _, err := vc.Step(ctx, 1); err != nil {
				return
			}
		}
	}()
	st, err := s.Start(ctx, engine.Request{ID: "req-1", PromptTokens: 1000, OutputTokens: 3})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	for {
		tok, ok, err := st.Next(ctx)
		if err != nil || !ok {
			break
		}
		fmt.Println(tok.Index, tok.Due.Sub(t0))
	}
	fmt.Printf("dequeued after %v\n", st.Dequeued().Sub(t0))
	// Output:
	// 0 23.003ms
	// 1 28.762ms
	// 2 34.521ms
	// dequeued after 0s
}

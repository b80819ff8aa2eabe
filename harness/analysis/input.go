package analysis

import (
	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

// LadderOf returns the ladder a summary step belongs to and its load on
// it, or "" for steps outside the concurrency and rate ladders.
func LadderOf(s *results.StepSummary) (string, float64) {
	switch {
	case s.Scenario == harness.ScenarioConcurrency && s.Concurrency > 0:
		return LadderConcurrency, float64(s.Concurrency)
	case s.Scenario == harness.ScenarioRate && s.Rate > 0:
		return LadderRate, s.Rate
	}
	return "", 0
}

// LoadOf is the step's load whatever its scenario: the rate of an
// open-loop step, else its concurrency.
func LoadOf(s *results.StepSummary) float64 {
	if s.Rate > 0 {
		return s.Rate
	}
	return float64(s.Concurrency)
}

// Failed is the number of measured requests of s that failed.
func Failed(s *results.StepSummary) int {
	n := 0
	for _, c := range s.Errors {
		n += c
	}
	return n
}

// ErrorRate is failed / measured requests of s.
func ErrorRate(s *results.StepSummary) float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(Failed(s)) / float64(s.Requests)
}

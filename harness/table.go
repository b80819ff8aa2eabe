package harness

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/llm-testbed/testbed/harness/results"
)

// WriteTable writes a summary as an aligned table for the terminal: one
// row per step with the three layers side by side (TTFT, ITL/TPOT, E2E),
// then throughput, errors and schedule lag, and each step's warnings under
// the table.
func WriteTable(w io.Writer, s results.Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(
		tw,
		"step\ttarget\tload\tok/req\terrors\tTTFT p50\tp99\tITL p50\tp99\tTPOT p50\tE2E p50\tp99\tout "+
			"tok/s\treq/s\tgoodput\tlag p99\t",
	)
	for _, st := range s.Steps {
		load := results.LoadLabel(st.Concurrency, st.Rate)
		if st.Scenario != "concurrency" && st.Scenario != "rate" && st.Scenario != "" {
			load = st.Scenario + " " + load
		}
		bound := ""
		if st.ClientBound {
			bound = " !client-bound"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.2f\t%.2f\t%s\t%s\n",
			st.Step, st.Target, load, st.OK, st.Requests, errorCell(st.Errors),
			ms(st.TTFT, st.TTFT.P50), ms(st.TTFT, st.TTFT.P99), ms(st.ITL, st.ITL.P50), ms(st.ITL, st.ITL.P99),
			ms(st.TPOT, st.TPOT.P50), ms(st.E2E, st.E2E.P50), ms(st.E2E, st.E2E.P99),
			st.OutputTokensPerS, st.RequestsPerS, st.GoodputRequestsPerS, ms(st.ScheduleLag, st.ScheduleLag.P99), bound)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "times in ms; latencies from t_send over successful requests; lag = t_send - t_sched")
	for _, st := range s.Steps {
		for _, warn := range st.Warnings {
			fmt.Fprintf(w, "step %d (%s): %s\n", st.Step, st.Target, warn)
		}
		if st.ClientBound {
			fmt.Fprintf(w, "step %d (%s): CLIENT-BOUND: %s\n", st.Step, st.Target, st.ClientBoundReason)
		}
		if ws := st.WarmupSummary; ws != nil {
			fmt.Fprintf(
				w,
				"step %d (%s): warm-up %d/%d ok, errors %s, TTFT p50 %s ms (excluded above)\n",
				st.Step,
				st.Target,
				ws.OK,
				ws.Requests,
				errorCell(ws.Errors),
				ms(ws.TTFT, ws.TTFT.P50),
			)
		}
	}
	return nil
}

// ms formats a latency cell, "-" when the metric has no samples.
func ms(s results.Stats, v float64) string {
	if s.Count == 0 {
		return "-"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func errorCell(errs map[results.ErrorClass]int) string {
	var parts []string
	for _, c := range results.ErrorClasses {
		if n := errs[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", c, n))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ",")
}

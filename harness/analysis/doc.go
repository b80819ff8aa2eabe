// Package analysis turns a run's steps and records into the conclusions a
// practitioner would otherwise draw by hand: the knee of every load ladder
// (where throughput stops growing and where P99 takes off, and the best
// operating point before either), the bend of the long-context TTFT curve,
// the cold-start penalty, per-step error and timeout rates, streaming
// anomalies read from chunk gaps, and distribution-free confidence
// intervals for every reported percentile with the sample size each needs.
//
// The functions here are pure: they take plain numbers (LadderPoint,
// ContextPoint, StreamSample, samples in ms) so they are testable with
// known answers. The result is written as DIR/analysis.json, so scripts and
// later reports read the same conclusions the report prints.
//
// Methods, in one place:
//   - Throughput knee: the slope from no load to the first step is the
//     initial slope; the knee is the lowest load from which the marginal
//     gain per added load unit, to every higher step, stays below
//     KneeOptions.MinGain (0.2) of it.
//   - Latency knee: the first load from which, at every higher load, TTFT
//     P99 stays above its lowest-load value plus KneeOptions.QueueShare
//     (0.5) × the lowest-load E2E P99 (requests queue behind others), or
//     E2E P99 stays above KneeOptions.LatencyFactor (2) × its lowest-load
//     value. One noisy step is not a knee. The Kneedle
//     elbow (Satopää et al. 2011) of the E2E P99 curve is reported beside it.
//   - Best operating point: the highest load at or before the throughput
//     knee and before the latency knee whose step met every SLO with at most
//     KneeOptions.MaxErrorRate (1 %) errors.
//   - Long-context bend: the last bucket before the first one whose TTFT
//     lies more than 25 % above the least-squares line through the shorter
//     half of the buckets (linear prefill, extrapolated).
//   - Percentile intervals: order statistics X(l) ≤ ξp ≤ X(u) with binomial
//     coverage, each tail ≤ α/2; a percentile is adequately sampled when
//     both ranks exist (n ≥ ln(α/2)/ln(max(p, 1−p))).
package analysis

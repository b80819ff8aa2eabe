package live

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/llm-testbed/testbed/harness/results"
)

// otlpGauges are the per-step figures PushSteps sends, by OpenTelemetry
// name.
var otlpGauges = []struct {
	name, unit string
	value      func(*results.StepSummary) float64
}{
	{"testbed.step.ttft.p50", "ms", func(s *results.StepSummary) float64 { return s.TTFT.P50 }},
	{"testbed.step.ttft.p99", "ms", func(s *results.StepSummary) float64 { return s.TTFT.P99 }},
	{"testbed.step.itl.p50", "ms", func(s *results.StepSummary) float64 { return s.ITL.P50 }},
	{"testbed.step.tpot.p50", "ms", func(s *results.StepSummary) float64 { return s.TPOT.P50 }},
	{"testbed.step.e2e.p50", "ms", func(s *results.StepSummary) float64 { return s.E2E.P50 }},
	{"testbed.step.e2e.p99", "ms", func(s *results.StepSummary) float64 { return s.E2E.P99 }},
	{
		"testbed.step.output_tokens_per_s",
		"{token}/s",
		func(s *results.StepSummary) float64 { return s.OutputTokensPerS },
	},
	{"testbed.step.requests_per_s", "{request}/s", func(s *results.StepSummary) float64 { return s.RequestsPerS }},
	{"testbed.step.requests", "{request}", func(s *results.StepSummary) float64 { return float64(s.Requests) }},
	{"testbed.step.errors", "{request}", func(s *results.StepSummary) float64 { return float64(s.Requests - s.OK) }},
}

// PushSteps sends each step's results to an OTLP/HTTP metrics endpoint
// (e.g. http://collector:4318/v1/metrics) as gauges with the run id,
// target, scenario and load as attributes, and waits until they are sent.
func PushSteps(ctx context.Context, endpoint, runID string, steps []results.StepSummary) error {
	exp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(endpoint))
	if err != nil {
		return fmt.Errorf("otlp %s: %w", endpoint, err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "testbed"))
	// The reader's own period never fires here: Shutdown flushes once.
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))))
	m := mp.Meter("github.com/llm-testbed/testbed/harness/live")
	var errs []error
	for _, g := range otlpGauges {
		gauge, err := m.Float64Gauge(g.name, metric.WithUnit(g.unit))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i := range steps {
			s := &steps[i]
			gauge.Record(ctx, g.value(s), metric.WithAttributes(attribute.String("run_id", runID),
				attribute.String("target", s.Target), attribute.String("scenario", s.Scenario),
				attribute.String("load", results.LoadLabel(s.Concurrency, s.Rate)), attribute.Int("step", s.Step)))
		}
	}
	if err := mp.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("otlp %s: %w", endpoint, err))
	}
	return errors.Join(errs...)
}

package serverside_test

import (
	"fmt"
	"strings"

	"github.com/llm-testbed/testbed/harness/serverside"
)

func ExampleParseMetrics() {
	text := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="llama"} 7
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="llama",le="0.1"} 3
vllm:time_to_first_token_seconds_bucket{model_name="llama",le="+Inf"} 4
vllm:time_to_first_token_seconds_sum{model_name="llama"} 0.52
vllm:time_to_first_token_seconds_count{model_name="llama"} 4
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
`
	keep := func(family string) bool { return strings.HasPrefix(family, "vllm:") }
	m, err := serverside.ParseMetrics(strings.NewReader(text), keep, false)
	if err != nil {
		panic(err)
	}
	for _, k := range []string{
		`vllm:num_requests_running{model_name="llama"}`,
		`vllm:time_to_first_token_seconds_count{model_name="llama"}`,
		`vllm:time_to_first_token_seconds_sum{model_name="llama"}`,
	} {
		fmt.Println(k, m[k])
	}
	fmt.Println(len(m), "series kept")
	// Output:
	// vllm:num_requests_running{model_name="llama"} 7
	// vllm:time_to_first_token_seconds_count{model_name="llama"} 4
	// vllm:time_to_first_token_seconds_sum{model_name="llama"} 0.52
	// 3 series kept
}

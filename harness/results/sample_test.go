package results

import (
	"testing"
)

func TestSampleFamily(t *testing.T) {
	t.Parallel()
	s := Sample{Metrics: map[string]float64{
		`vllm:num_requests_running{model_name="a"}`: 3,
		`vllm:num_requests_running{model_name="b"}`: 4,
		`tgi_batch_current_size`:                    7,
		`tgi_queue_size`:                            2,
	}}
	cases := []struct {
		names []string
		want  float64
		found bool
	}{
		{
			[]string{"vllm:num_requests_running", "tgi_batch_current_size"},
			7,
			true,
		}, // vLLM preferred, summed over label sets
		{[]string{"vllm:num_requests_waiting", "tgi_queue_size"}, 2, true}, // TGI when vLLM's is absent
		{[]string{"DCGM_FI_DEV_GPU_UTIL"}, 0, false},                       // absent
		{[]string{"vllm:num_requests"}, 0, false},                          // a prefix is not the family
	}
	for _, c := range cases {
		if got, ok := s.Family(c.names...); got != c.want || ok != c.found {
			t.Errorf("family(%v) = %v, %v; want %v, %v", c.names, got, ok, c.want, c.found)
		}
	}
}

package report

import (
	"fmt"

	"github.com/llm-testbed/testbed/harness/results"
)

// serverCharts draws the server's own view beside the client's timeline:
// its queue (running and waiting requests) and its utilisation (KV cache,
// GPU), so a latency knee can be read against the state that caused it.
func (m *model) serverCharts(d *document, ri int, r *Run) {
	if len(r.Server) == 0 {
		return
	}
	queue := Chart{ID: fmt.Sprintf("chart-server-queue-%d", ri), Title: "Server queue over time, " + r.Name(),
		XLabel: "time since run start (s)", YLabel: "requests"}
	util := Chart{ID: fmt.Sprintf("chart-server-util-%d", ri), Title: "Server utilisation over time, " + r.Name(),
		XLabel: "time since run start (s)", YLabel: "%"}
	series := map[string]*Series{}
	var qOrder, uOrder []string
	add := func(c *[]string, name string, x, y float64) {
		s := series[name]
		if s == nil {
			s = &Series{Name: name}
			series[name] = s
			*c = append(*c, name)
		}
		s.X, s.Y = append(s.X, x), append(s.Y, y)
	}
	errs := 0
	for i := range r.Server {
		s := &r.Server[i]
		if s.Error != "" {
			errs++
			continue
		}
		x, src := float64(s.Offset)/1e9, results.SourceName(s.Source)
		if v, ok := s.Family("vllm:num_requests_running", "tgi_batch_current_size"); ok {
			add(&qOrder, "running "+src, x, v)
		}
		if v, ok := s.Family("vllm:num_requests_waiting", "tgi_queue_size"); ok {
			add(&qOrder, "waiting "+src, x, v)
		}
		if v, ok := s.Family("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"); ok {
			add(&uOrder, "KV cache "+src, x, v*100)
		}
		if v, ok := s.Family("DCGM_FI_DEV_GPU_UTIL"); ok {
			add(&uOrder, "GPU util "+src, x, v)
		}
		if v, ok := s.Family("DCGM_FI_PROF_SM_ACTIVE"); ok {
			add(&uOrder, "SM active "+src, x, v*100)
		}
		for _, g := range s.Devices {
			if g.UtilPercent != nil {
				add(&uOrder, fmt.Sprintf("GPU%d util", g.Index), x, *g.UtilPercent)
			}
			if g.SMUtilPercent != nil {
				add(&uOrder, fmt.Sprintf("GPU%d SM", g.Index), x, *g.SMUtilPercent)
			}
		}
	}
	for _, n := range qOrder {
		queue.Series = append(queue.Series, *series[n])
	}
	for _, n := range uOrder {
		util.Series = append(util.Series, *series[n])
	}
	if starts := stepStarts(r); len(starts) <= 12 {
		for _, st := range starts {
			queue.Markers = append(queue.Markers, Marker{X: st.at, Label: st.label})
			util.Markers = append(util.Markers, Marker{X: st.at, Label: st.label})
		}
	}
	d.chart(queue)
	d.chart(util)
	if errs > 0 {
		d.p("%d of %d server samples failed (their place on the timeline is empty).", errs, len(r.Server))
	}
}

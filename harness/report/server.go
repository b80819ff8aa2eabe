package report

import (
	"fmt"
	"sort"

	"github.com/llm-testbed/testbed/harness/analysis"
	"github.com/llm-testbed/testbed/harness/results"
)

// serverCharts draws the server's own view beside the client's timeline:
// its queue (running and waiting requests), its utilisation (KV cache,
// GPU), and the GPUs' memory and power, so a latency knee can be read
// against the state that caused it.
func (m *model) serverCharts(d *document, ri int, r *Run) {
	if len(r.Server) == 0 {
		return
	}
	c := newServerChartSet(ri, r.Name())
	errs := 0
	for i := range r.Server {
		s := &r.Server[i]
		if s.Error != "" {
			errs++
			continue
		}
		c.sample(s)
	}
	charts := c.charts()
	if starts := stepStarts(r); len(starts) <= 12 {
		for i := range charts {
			for _, st := range starts {
				charts[i].Markers = append(charts[i].Markers, Marker{X: st.at, Label: st.label})
			}
		}
	}
	for _, ch := range charts {
		d.chart(ch)
	}
	if errs > 0 {
		d.p("%d of %d server samples failed (their place on the timeline is empty).", errs, len(r.Server))
	}
}

// serverChartSet accumulates the timeline series of the four charts.
type serverChartSet struct {
	queue, util, mem, power Chart
	series                  map[*Chart]map[string]*Series
	order                   map[*Chart][]string
}

func newServerChartSet(ri int, name string) *serverChartSet {
	const x = "time since run start (s)"
	c := &serverChartSet{
		queue: Chart{ID: fmt.Sprintf("chart-server-queue-%d", ri), Title: "Server queue over time, " + name,
			XLabel: x, YLabel: "requests"},
		util: Chart{ID: fmt.Sprintf("chart-server-util-%d", ri), Title: "Server utilisation over time, " + name,
			XLabel: x, YLabel: "%"},
		mem: Chart{ID: fmt.Sprintf("chart-gpu-memory-%d", ri), Title: "GPU memory over time, " + name,
			XLabel: x, YLabel: "GiB"},
		power: Chart{ID: fmt.Sprintf("chart-gpu-power-%d", ri), Title: "GPU power over time, " + name,
			XLabel: x, YLabel: "W"},
		series: map[*Chart]map[string]*Series{},
		order:  map[*Chart][]string{},
	}
	return c
}

// add appends a point to the named series of chart ch; dash marks limits.
func (c *serverChartSet) add(ch *Chart, name, dash string, x, y float64) {
	m := c.series[ch]
	if m == nil {
		m = map[string]*Series{}
		c.series[ch] = m
	}
	s := m[name]
	if s == nil {
		s = &Series{Name: name, Dash: dash}
		m[name] = s
		c.order[ch] = append(c.order[ch], name)
	}
	s.X = append(s.X, x)
	s.Y = append(s.Y, y)
}

// sample adds one reading's figures: scraped series by family (DCGM per
// gpu label), NVML devices by index.
func (c *serverChartSet) sample(s *results.Sample) {
	x := float64(s.Offset) / 1e9
	src := results.SourceName(s.Source)
	if v, ok := s.Family("vllm:num_requests_running", "tgi_batch_current_size"); ok {
		c.add(&c.queue, "running "+src, "", x, v)
	}
	if v, ok := s.Family("vllm:num_requests_waiting", "tgi_queue_size"); ok {
		c.add(&c.queue, "waiting "+src, "", x, v)
	}
	if v, ok := s.Family("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"); ok {
		c.add(&c.util, "KV cache "+src, "", x, v*100)
	}
	c.dcgm(s, x, src)
	for _, g := range s.Devices {
		c.device(g, x)
	}
}

// dcgm adds a DCGM exporter's (or the mock's) per-GPU series.
func (c *serverChartSet) dcgm(s *results.Sample, x float64, src string) {
	free := map[string]float64{}
	used := map[string]float64{}
	keys := make([]string, 0, len(s.Metrics))
	for k := range s.Metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := s.Metrics[k]
		gpu := src
		if g, ok := analysis.LabelValue(k, "gpu"); ok {
			gpu = src + " GPU" + g
		}
		switch results.SeriesName(k) {
		case "DCGM_FI_DEV_GPU_UTIL":
			c.add(&c.util, "GPU util "+gpu, "", x, v)
		case "DCGM_FI_PROF_SM_ACTIVE":
			c.add(&c.util, "SM active "+gpu, "", x, v*100)
		case "DCGM_FI_DEV_FB_USED":
			used[gpu] = v
			c.add(&c.mem, "used "+gpu, "", x, v/1024)
		case "DCGM_FI_DEV_FB_FREE":
			free[gpu] = v
		case "DCGM_FI_DEV_POWER_USAGE":
			c.add(&c.power, "power "+gpu, "", x, v)
		case "DCGM_FI_DEV_POWER_MGMT_LIMIT":
			c.add(&c.power, "limit "+gpu, "6 4", x, v)
		}
	}
	gpus := make([]string, 0, len(used))
	for g := range used {
		gpus = append(gpus, g)
	}
	sort.Strings(gpus)
	for _, g := range gpus {
		if f, ok := free[g]; ok {
			c.add(&c.mem, "total "+g, "6 4", x, (used[g]+f)/1024)
		}
	}
}

// device adds one NVML device's figures.
func (c *serverChartSet) device(g results.Device, x float64) {
	const gib = 1 << 30
	name := fmt.Sprintf("GPU%d", g.Index)
	if g.UtilPercent != nil {
		c.add(&c.util, name+" util", "", x, *g.UtilPercent)
	}
	if g.SMUtilPercent != nil {
		c.add(&c.util, name+" SM", "", x, *g.SMUtilPercent)
	}
	if g.MemUsedBytes != nil {
		c.add(&c.mem, name+" used", "", x, float64(*g.MemUsedBytes)/gib)
	}
	if g.MemTotalBytes != nil {
		c.add(&c.mem, name+" total", "6 4", x, float64(*g.MemTotalBytes)/gib)
	}
	if g.PowerW != nil {
		c.add(&c.power, name+" power", "", x, *g.PowerW)
	}
	if g.PowerLimitW != nil {
		c.add(&c.power, name+" limit", "6 4", x, *g.PowerLimitW)
	}
}

// charts returns the four charts with their series in first-seen order.
func (c *serverChartSet) charts() []Chart {
	out := make([]Chart, 0, 4)
	for _, ch := range []*Chart{&c.queue, &c.util, &c.mem, &c.power} {
		for _, n := range c.order[ch] {
			ch.Series = append(ch.Series, *c.series[ch][n])
		}
		out = append(out, *ch)
	}
	return out
}

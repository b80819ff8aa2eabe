package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Files the run's samplers write beside the records (docs/server-side.md):
// the serving engine's Prometheus metrics and the GPUs, on the records' clock.
const (
	ServerMetricsFile = "server_metrics.jsonl"
	GPUFile           = "gpu.jsonl"
)

// ServerSample is one line of server_metrics.jsonl or gpu.jsonl: a scrape
// of one source at t_ns (ns since the run's start, the records' clock).
type ServerSample struct {
	TNS     int64              `json:"t_ns"`
	Source  string             `json:"source"`
	Error   string             `json:"error,omitempty"`
	Metrics map[string]float64 `json:"metrics,omitempty"`
	Devices []GPUDevice        `json:"devices,omitempty"`
}

// GPUDevice is one GPU's reading in gpu.jsonl; absent figures stay nil.
type GPUDevice struct {
	Index   int      `json:"index"`
	Util    *float64 `json:"util_percent"`
	SMUtil  *float64 `json:"sm_util_percent"`
	DRAMBW  *float64 `json:"dram_bw_util_percent"`
	PowerW  *float64 `json:"power_w"`
	MemUsed *float64 `json:"mem_used_bytes"`
}

// readServer reads both sampler files when present, in time order.
func readServer(dir string) ([]ServerSample, error) {
	var out []ServerSample
	for _, name := range []string{ServerMetricsFile, GPUFile} {
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for line := 1; sc.Scan(); line++ {
			if len(strings.TrimSpace(sc.Text())) == 0 {
				continue
			}
			var s ServerSample
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				f.Close()
				return out, fmt.Errorf("%s: line %d: %w", name, line, err)
			}
			out = append(out, s)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return out, fmt.Errorf("%s: %w", name, err)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TNS < out[j].TNS })
	return out, nil
}

// family sums a sample's series of the first metric family present among
// names (over its label sets), and says whether any was. Names are
// alternatives in order of preference: a server exposing both vLLM's and
// TGI's gauges for the same thing (as the mock does) counts it once.
func (s *ServerSample) family(names ...string) (float64, bool) {
	for _, n := range names {
		var sum float64
		found := false
		for k, v := range s.Metrics {
			name := k
			if i := strings.IndexByte(k, '{'); i >= 0 {
				name = k[:i]
			}
			if name == n {
				sum += v
				found = true
			}
		}
		if found {
			return sum, true
		}
	}
	return 0, false
}

// sourceName shortens a scrape URL to host:port for legends.
func sourceName(src string) string {
	if u, err := url.Parse(src); err == nil && u.Host != "" {
		return u.Host
	}
	return src
}

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
		x, src := float64(s.TNS)/1e9, sourceName(s.Source)
		if v, ok := s.family("vllm:num_requests_running", "tgi_batch_current_size"); ok {
			add(&qOrder, "running "+src, x, v)
		}
		if v, ok := s.family("vllm:num_requests_waiting", "tgi_queue_size"); ok {
			add(&qOrder, "waiting "+src, x, v)
		}
		if v, ok := s.family("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"); ok {
			add(&uOrder, "KV cache "+src, x, v*100)
		}
		if v, ok := s.family("DCGM_FI_DEV_GPU_UTIL"); ok {
			add(&uOrder, "GPU util "+src, x, v)
		}
		if v, ok := s.family("DCGM_FI_PROF_SM_ACTIVE"); ok {
			add(&uOrder, "SM active "+src, x, v*100)
		}
		for _, g := range s.Devices {
			if g.Util != nil {
				add(&uOrder, fmt.Sprintf("GPU%d util", g.Index), x, *g.Util)
			}
			if g.SMUtil != nil {
				add(&uOrder, fmt.Sprintf("GPU%d SM", g.Index), x, *g.SMUtil)
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

package report

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// environment writes, per run, the host, the tool, the time window and the
// fully resolved plan: everything needed to rerun it.
func (m *model) environment(d *document) {
	d.h(2, "environment", "Environment and parameters")
	for _, r := range m.runs {
		i := r.Info
		d.h(3, "", "Run %s", r.Name())
		h := i.Host
		rows := [][]string{
			{"results directory", "`" + r.Dir + "`"},
			{"run id", i.RunID},
			{"testbed version", i.Version},
			{"seed", fmt.Sprint(i.Seed)},
			{"start (UTC)", i.Start.UTC().Format(time.RFC3339)},
		}
		if !i.End.IsZero() {
			rows = append(rows, []string{"end (UTC)", i.End.UTC().Format(time.RFC3339)},
				[]string{"duration", i.End.Sub(i.Start).Round(time.Millisecond).String()})
		}
		rows = append(
			rows,
			[]string{"records", fmt.Sprint(len(r.Records))},
			[]string{"client host", h.Hostname},
			[]string{"OS / kernel", strings.TrimSpace(fmt.Sprintf("%s %s %s", h.OS, h.Platform, h.Kernel))},
			[]string{
				"CPU",
				fmt.Sprintf(
					"%s (%d cores, %d threads, %s %s)",
					h.CPUModel,
					h.CPUCores,
					h.CPUThreads,
					h.Arch,
					h.Virtualization,
				),
			},
			[]string{"memory", fmt.Sprintf("%.1f GiB", float64(h.MemoryBytes)/(1<<30))},
			[]string{"Go", fmt.Sprintf("%s, GOMAXPROCS %d", h.GoVersion, h.GOMAXPROCS)},
		)
		for _, t := range i.Plan.Redacted().Targets {
			rows = append(
				rows,
				[]string{"target " + t.Name, fmt.Sprintf("%s, api %s, model %s", t.URL, t.API, t.Model)},
			)
		}
		if len(h.Errors) > 0 {
			rows = append(rows, []string{"host facts not read", strings.Join(h.Errors, "; ")})
		}
		d.add(table{header: []string{"", ""}, rows: rows})
		plan, err := yaml.Marshal(i.Plan.Redacted()) // run.json from older versions kept credentials
		if err != nil {
			d.p("The plan could not be written back as YAML: %v.", err)
			continue
		}
		d.p(
			"The fully resolved plan (defaults filled in). To rerun: save it as `plan.yaml` and run `testbed run plan.yaml -o " +
				"DIR`; the seed makes the request set identical.",
		)
		d.add(code{text: string(plan)})
	}
}

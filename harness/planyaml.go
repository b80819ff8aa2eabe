package harness

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Reading a plan reports every problem at once, each with its line: a
// key that is not a plan key, a value of the wrong type, a bad duration or
// distribution, and every rule Validate checks. Fixing a plan should take
// one round, not one round per mistake.

// UnmarshalYAML reads a duration; a bad one is reported with its line and
// the rest of the plan is still read.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return yamlProblem(n, errors.New("want a duration like 30s or 250ms"))
	}
	if err := d.UnmarshalText([]byte(n.Value)); err != nil {
		return yamlProblem(n, err)
	}
	return nil
}

// UnmarshalYAML reads a length distribution ("fixed:128", or a bare 128);
// a bad one is reported with its line and the rest of the plan is still read.
func (d *Dist) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return yamlProblem(n, errors.New("want a distribution like 128, fixed:128 or uniform:64,256"))
	}
	if err := d.UnmarshalText([]byte(n.Value)); err != nil {
		return yamlProblem(n, err)
	}
	return nil
}

// yamlProblem is an error the YAML decoder collects (a *yaml.TypeError)
// instead of stopping at.
func yamlProblem(n *yaml.Node, err error) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
}

// goTypeName matches the decoder's "in type harness.Plan" and the like:
// Go names mean nothing to someone writing YAML.
var goTypeName = regexp.MustCompile(` (in|into) (type )?[a-z]+\.[A-Za-z]+`)

// lineRE reads the line number the decoder puts first.
var lineRE = regexp.MustCompile(`^line (\d+): `)

// ParsePlan parses and validates a YAML plan and fills in defaults.
// Unknown fields are errors, so a typo never silently changes a run. Every
// problem is reported at once, one per line of the error, each with its
// line in the file.
func ParsePlan(b []byte) (Plan, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return Plan{}, fmt.Errorf("plan: %w", err) // a syntax error: its line is in the message
	}
	if len(root.Content) == 0 || root.Content[0].Kind == yaml.ScalarNode && root.Content[0].Tag == "!!null" {
		return Plan{}, errors.New("plan: the file is empty; a plan needs at least targets, dataset and load " +
			"(see examples/)")
	}
	if root.Content[0].Kind != yaml.MappingNode {
		return Plan{}, fmt.Errorf("plan: line %d: a plan is a mapping of keys (targets, dataset, load, ...)",
			root.Content[0].Line)
	}
	var p Plan
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var problems []string
	seen := map[int]bool{} // lines with a decoding problem already
	if err := dec.Decode(&p); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return Plan{}, fmt.Errorf("plan: %w", err)
		}
		for _, e := range te.Errors {
			e = goTypeName.ReplaceAllString(strings.Replace(e, "not found", "is not a plan key", 1), "")
			if m := lineRE.FindStringSubmatch(e); m != nil {
				n, _ := strconv.Atoi(m[1])
				seen[n] = true
			}
			problems = append(problems, e)
		}
	}
	p.SetDefaults()
	for _, pr := range p.problems() {
		line := lineOf(root.Content[0], pr.field)
		if seen[line] {
			continue // the value did not decode: that is the problem to fix first
		}
		problems = append(problems, fmt.Sprintf("line %d: %s: %s", line, pr.field, pr.msg))
	}
	if len(problems) == 0 {
		return p, nil
	}
	errs := make([]error, len(problems))
	for i, pr := range problems {
		errs[i] = errors.New("plan: " + pr)
	}
	return Plan{}, errors.Join(errs...)
}

// lineOf finds the line of a field path like "targets[1].url" or
// "load.concurrency" under a plan's mapping node: the deepest node of the
// path that exists, so a missing key points at its parent.
func lineOf(n *yaml.Node, path string) int {
	line := n.Line
	for _, seg := range strings.Split(path, ".") {
		name, idx, _ := strings.Cut(seg, "[")
		next := mapValue(n, name)
		if next == nil {
			return line
		}
		n = next
		line = n.Line
		if idx == "" {
			continue
		}
		i, err := strconv.Atoi(strings.TrimSuffix(idx, "]"))
		if err != nil || n.Kind != yaml.SequenceNode || i < 0 || i >= len(n.Content) {
			return line
		}
		n = n.Content[i]
		line = n.Line
	}
	return line
}

// mapValue is the value of key in a mapping node, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

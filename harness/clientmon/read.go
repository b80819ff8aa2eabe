package clientmon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// ReadFile reads a client.jsonl written by a Monitor: its samples and its
// step verdicts, in file order. `testbed report` can restore each step's
// client_bound flag from the verdicts (their StepIndex is summary.json's
// step), since requests.jsonl does not carry it. A line that does not
// parse is an error naming it.
func ReadFile(path string) ([]Sample, []Verdict, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("client samples: %w", err)
	}
	defer f.Close()
	var samples []Sample
	var verdicts []Verdict
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for line := 1; sc.Scan(); line++ {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(sc.Bytes(), &head); err != nil {
			return samples, verdicts, fmt.Errorf("%s: line %d: %w", path, line, err)
		}
		switch head.Kind {
		case "sample":
			var s Sample
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				return samples, verdicts, fmt.Errorf("%s: line %d: %w", path, line, err)
			}
			samples = append(samples, s)
		case "step":
			var v Verdict
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				return samples, verdicts, fmt.Errorf("%s: line %d: %w", path, line, err)
			}
			verdicts = append(verdicts, v)
		default:
			return samples, verdicts, fmt.Errorf("%s: line %d: unknown kind %q", path, line, head.Kind)
		}
	}
	if err := sc.Err(); err != nil {
		return samples, verdicts, fmt.Errorf("%s: %w", path, err)
	}
	return samples, verdicts, nil
}

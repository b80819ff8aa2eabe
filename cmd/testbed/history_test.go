package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "7d", want: now.AddDate(0, 0, -7)},                                         // days back
		{in: "36h", want: now.Add(-36 * time.Hour)},                                     // a duration back
		{in: "2026-03-01T00:00:00Z", want: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}, // RFC 3339
		{in: "yesterday", bad: true},                                                    // words are not understood
		{in: "-3h", bad: true},                                                          // the future
		{in: "7.5d", bad: true},                                                         // days are whole
	} {
		got, err := parseSince(tt.in, now)
		if (err != nil) != tt.bad || (!tt.bad && !got.Equal(tt.want)) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if d, err := parseSince("2026-03-01", now); err != nil || d.Day() != 1 {
		t.Errorf("parseSince(date) = %v, %v", d, err)
	}
}

func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"7d", "36h", "2026-01-31", "2026-01-31T10:00:00Z", "d", "-1d", "99999999999d"} {
		f.Add(s)
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseSince(s, now)
		if err == nil && got.IsZero() && !strings.HasPrefix(strings.TrimSpace(s), "0001") {
			t.Errorf("parseSince(%q) = zero time, no error", s)
		}
	})
}

func TestLabelFlag(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in  string
		bad bool
	}{
		{in: "image=vllm/vllm-openai:v0.6.3"}, // the usual
		{in: "args=--max-num-seqs=256"},       // the value may hold '='
		{in: "image", bad: true},              // no value
		{in: "=x", bad: true},                 // no key
	} {
		var l labelList
		if err := l.Set(tt.in); (err != nil) != tt.bad {
			t.Errorf("Set(%q) = %v", tt.in, err)
		}
	}
}

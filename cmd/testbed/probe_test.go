package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestProbe(t *testing.T) {
	t.Parallel()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ok.Close()
	starting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer starting.Close()
	// ready after two 503s: what --wait is for
	var calls atomic.Int32
	late := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer late.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	tests := []struct {
		name    string
		args    []string
		wantErr string // "" = success
		usage   bool   // the error is a usage error
	}{
		// a healthy server passes on the first attempt
		{"healthy", []string{ok.URL}, "", false},
		// 503 (the mock during its startup delay) is not healthy
		{"unavailable", []string{starting.URL}, "503", false},
		// --wait retries until the server turns healthy
		{"wait until ready", []string{"--wait", "5s", late.URL}, "", false},
		// nothing listening: a connection error, not a hang
		{"refused", []string{closed.URL}, "connect", false},
		// the URL must be absolute http(s)
		{"bad url", []string{"localhost:8000/health"}, "not an http(s) URL", true},
		// exactly one URL
		{"no url", nil, "exactly one URL", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), append([]string{"probe"}, tt.args...), &out, &errOut)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("probe %v: %v", tt.args, err)
				}
				if !strings.HasPrefix(out.String(), "ok ") {
					t.Errorf("probe %v printed %q, want ok URL", tt.args, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("probe %v = %v, want an error containing %q", tt.args, err, tt.wantErr)
			}
			if got := errors.Is(err, errUsage); got != tt.usage {
				t.Errorf("probe %v: usage error = %v, want %v", tt.args, got, tt.usage)
			}
		})
	}
}

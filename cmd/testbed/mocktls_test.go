package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/llm-testbed/testbed/harness"
	"github.com/llm-testbed/testbed/harness/results"
)

func TestSelfSignedTLS(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, certPEM, err := selfSignedTLS("10.1.2.3", now)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	cases := []struct {
		name string
		ok   bool
	}{
		{"127.0.0.1", true},    // loopback, always
		{"::1", true},          // IPv6 loopback
		{"localhost", true},    // loopback name
		{"10.1.2.3", true},     // the listen address
		{"example.com", false}, // anything else
	}
	for _, c := range cases {
		_, err := cert.Verify(x509.VerifyOptions{DNSName: c.name, Roots: roots, CurrentTime: now.Add(time.Hour)})
		if (err == nil) != c.ok {
			t.Errorf("%s: verify error %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

var listenTLSRE = regexp.MustCompile(`on (https://127\.0\.0\.1:\d+)`)

// TestMockTLS serves the mock over TLS and measures connection reuse
// against a new connection per request: only new connections pay the
// handshake, which the records time.
func TestMockTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := filepath.Join(dir, "mock.pem")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"mock", "--addr", "127.0.0.1:0", "--tls", "--tls-cert-out", ca, "--ttft", "5ms", "--itl", "1ms"}, &out, &errOut)
	}()
	t.Cleanup(func() { cancel(); <-done })
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m := listenTLSRE.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		t.Fatalf("mock did not report an https address; stdout %q stderr %q", out.String(), errOut.String())
	}

	in, _ := harness.ParseDist("fixed:16")
	outTok, _ := harness.ParseDist("fixed:4")
	plan := func(tls harness.TLS) harness.Plan {
		return harness.Plan{Seed: 1, IgnoreEOS: true, TLS: tls,
			Targets:   []harness.Target{{Name: "mock", URL: url, Model: "testbed-mock"}},
			Dataset:   harness.Dataset{InputTokens: in, OutputTokens: outTok},
			Scenarios: &harness.Scenarios{Connection: &harness.PairScenario{Concurrency: 2, Requests: 8}}}
	}
	// Without the CA the client must refuse the certificate before any load.
	if _, err := harness.Run(context.Background(), plan(harness.TLS{}), filepath.Join(dir, "untrusted")); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted certificate: error %v", err)
	}
	for _, c := range []struct {
		name string
		tls  harness.TLS
	}{
		{"ca-file", harness.TLS{CAFile: ca}},                // trust the mock's certificate
		{"insecure", harness.TLS{InsecureSkipVerify: true}}, // or skip verification, explicitly
	} {
		res, err := harness.Run(context.Background(), plan(c.tls), filepath.Join(dir, c.name))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		recs, err := results.ReadRecords(filepath.Join(dir, c.name, results.RecordsFile))
		if err != nil {
			t.Fatal(err)
		}
		handshakes := map[string]int{}
		for _, r := range recs {
			if !r.OK() {
				t.Fatalf("%s: request failed: %s %s", c.name, r.ErrorClass, r.Error)
			}
			if r.TLSNS > 0 && !r.Warmup {
				handshakes[r.Scenario]++
			}
		}
		// Every request of conn_new shakes hands; keep-alive reuses the
		// workers' connections: about one handshake per worker, and at most
		// half the requests, since Go's transport returns a connection to
		// its pool just after the body's end, so on a loaded machine a
		// worker's next request can now and then dial anew.
		if handshakes[harness.ScenarioConnNew] != 8 || handshakes[harness.ScenarioConnReuse] > 4 {
			t.Errorf("%s: handshakes %v, want 8 for conn_new, ≤ 4 for conn_reuse", c.name, handshakes)
		}
		if len(res.Summary.Steps) != 2 {
			t.Errorf("%s: %d steps", c.name, len(res.Summary.Steps))
		}
	}
	if b, err := os.ReadFile(ca); err != nil || !strings.Contains(string(b), "BEGIN CERTIFICATE") {
		t.Errorf("--tls-cert-out: %v %q", err, b)
	}
}

package netem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/llm-testbed/testbed/netem"
)

func ExampleParseRate() {
	for _, s := range []string{"10mbit", "500kbit", "2mbps"} {
		v, _ := netem.ParseRate(s)
		fmt.Printf("%s = %.0f bytes/s\n", s, v)
	}
	// Output:
	// 10mbit = 1250000 bytes/s
	// 500kbit = 62500 bytes/s
	// 2mbps = 2000000 bytes/s
}

// A proxy with 20 ms each way in front of an HTTP server: a request and
// its response each pay the latency once.
func ExampleProxy() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "pong")
	}))
	defer srv.Close()
	p, err := netem.New(
		strings.TrimPrefix(srv.URL, "http://"),
		netem.Symmetric(netem.Direction{Latency: 20 * time.Millisecond}),
	)
	if err != nil {
		panic(err)
	}
	if err := p.Listen("127.0.0.1:0"); err != nil {
		panic(err)
	}
	defer p.Close()
	start := time.Now()
	resp, err := http.Get("http://" + p.Addr() + "/ping")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body), time.Since(start) >= 40*time.Millisecond)
	// Output: pong true
}

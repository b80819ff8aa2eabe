package clientmon

import (
	"io"
	"testing"
	"time"
)

// BenchmarkSample is the cost of one sample, paid once per interval (1 s
// by default) on the client's CPU: with and without the socket count,
// which walks every descriptor and /proc/net table.
func BenchmarkSample(b *testing.B) {
	for _, bc := range []struct {
		name    string
		sockets bool
	}{{"with sockets", true}, {"without sockets", false}} {
		b.Run(bc.name, func(b *testing.B) {
			m, err := New(WithInterval(time.Hour), WithOutput(io.Discard), WithSockets(bc.sockets))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Stop()
			b.ResetTimer()
			for b.Loop() {
				m.Sample()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/sample")
		})
	}
}

package ignition

import (
	"os"
	"testing"
)

// BenchmarkRenderEmbedded renders with an embedded binary (this test
// binary stands in for the agent) and reports the config's size relative
// to the binary: what --binary costs in time and in customData.
func BenchmarkRenderEmbedded(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		b.Fatal(err)
	}
	c, data, file := example(b, "acl-bootstrap-token.json")
	b.SetBytes(int64(len(bin)))
	var size int
	for b.Loop() {
		r, err := Render(Options{Config: c, ConfigData: data, ConfigFile: file, Binary: bin})
		if err != nil {
			b.Fatal(err)
		}
		size = len(r.JSON)
	}
	b.ReportMetric(float64(size)/float64(len(bin)), "config/binary")
	b.ReportMetric(float64(len(bin)), "binary-bytes")
}

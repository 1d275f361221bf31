package artifact

import (
	"context"
	"os"
	"testing"
)

// BenchmarkInstall times InstallVerified of a real bundle into an empty
// machine root, the install-node-components step of a warm join (the
// layer cache makes the rootfs; the bundle's files are all copied).
// AKS_FLEX_NODE_BENCH_BUNDLE names the bundle directory; without it the
// benchmark is skipped, as it needs a bundle of real size to mean anything.
func BenchmarkInstall(b *testing.B) {
	dir := os.Getenv("AKS_FLEX_NODE_BENCH_BUNDLE")
	if dir == "" {
		b.Skip("AKS_FLEX_NODE_BENCH_BUNDLE names no bundle")
	}
	m, err := LoadManifest(dir)
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, f := range m.Files {
		size += f.Size
	}
	b.SetBytes(size)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		root := b.TempDir()
		if _, err := InstallVerified(ctx, dir, m, root, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(root)
		b.StartTimer()
	}
}

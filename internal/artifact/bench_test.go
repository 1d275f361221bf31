package artifact

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// Throughput of build and verify on a bundle of realistic size, next to
// sha256sum on the same files, and the peak RSS of a verifying process.
// Run with: make bench-artifacts (or go test -run '^$' -bench Bundle
// ./internal/artifact/). AKS_FLEX_NODE_BENCH_MB sets the size (default 400).

var benchSizes = map[string]float64{ // share of the bundle, by component
	Kubelet: 0.28, Kubectl: 0.15, Containerd: 0.14, Runc: 0.04, CNI: 0.12, Crictl: 0.05, "images/pause.tar": 0.02, "images/busybox.tar": 0.20,
}

func benchSource(b *testing.B, dir string, total int64) (*Spec, int64) {
	b.Helper()
	spec := &Spec{SchemaVersion: 1, Arch: runtime.GOARCH, Components: testComponents,
		Images: []Image{{Path: "images/busybox.tar", Ref: "docker.io/library/busybox:1.36"}, {Path: "images/pause.tar", Ref: "registry.k8s.io/pause:3.10"}}}
	paths := BundlePaths(testComponents, runtime.GOARCH)
	var sum int64
	for key, share := range benchSizes {
		rel, ok := paths[key]
		if !ok {
			rel = key
		}
		n := int64(float64(total) * share)
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		if strings.HasPrefix(rel, "images/") {
			tw := tar.NewWriter(f)
			tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
			tw.Write([]byte("[]"))
			tw.WriteHeader(&tar.Header{Name: "blobs/layer", Mode: 0o644, Size: n, Typeflag: tar.TypeReg})
			io.CopyN(tw, rand.Reader, n)
			tw.Close()
		} else {
			io.CopyN(f, rand.Reader, n)
		}
		fi, _ := f.Stat()
		sum += fi.Size()
		f.Close()
	}
	return spec, sum
}

func BenchmarkBundle(b *testing.B) {
	mb := int64(400)
	if v := os.Getenv("AKS_FLEX_NODE_BENCH_MB"); v != "" {
		fmt.Sscan(v, &mb)
	}
	src := b.TempDir()
	spec, size := benchSource(b, src, mb<<20)
	ctx := context.Background()
	bundle := filepath.Join(b.TempDir(), "bundle")
	if _, err := Build(ctx, BuildOptions{Spec: spec, FromDir: src, OutputDir: bundle}); err != nil {
		b.Fatal(err)
	}
	var files []string
	m, _ := LoadManifest(bundle)
	for _, f := range m.Files {
		files = append(files, filepath.Join(bundle, f.Path))
	}
	b.Run("build", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			out := filepath.Join(b.TempDir(), "b")
			if _, err := Build(ctx, BuildOptions{Spec: spec, FromDir: src, OutputDir: out}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			os.RemoveAll(out)
			b.StartTimer()
		}
	})
	b.Run("verify", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			if ps := Verify(ctx, bundle, Components{}); len(ps) > 0 {
				b.Fatal(Problems(ps))
			}
		}
	})
	b.Run("sha256sum", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			if out, err := exec.Command("sha256sum", files...).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
	// Peak RSS of a process that only verifies: this test binary again,
	// running TestHelperVerify, measured by the kernel (ru_maxrss).
	b.Run("verify-peak-rss", func(b *testing.B) {
		var peak int64
		for i := 0; i < b.N; i++ {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperVerify$", "-test.bench=^$")
			cmd.Env = append(os.Environ(), "AKS_FLEX_NODE_VERIFY_DIR="+bundle)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > peak {
				peak = ru.Maxrss
			}
		}
		b.ReportMetric(float64(peak)/1024, "peak-RSS-MiB")
		b.ReportMetric(float64(size)/1e6, "bundle-MB")
	})
}

// TestHelperVerify is not a test: BenchmarkBundle runs it in a child
// process to measure the peak RSS of verification alone.
func TestHelperVerify(t *testing.T) {
	dir := os.Getenv("AKS_FLEX_NODE_VERIFY_DIR")
	if dir == "" {
		t.Skip("helper process for BenchmarkBundle")
	}
	if ps := Verify(context.Background(), dir, Components{}); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
}

package artifact

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

// workerLayout writes an OCI layout holding one random image for arch,
// tagged, with a lock file next to it (as image build writes).
func workerLayout(t *testing.T, arch, tag string) (string, v1.Hash) {
	t.Helper()
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{annotationRefName: tag})); err != nil {
		t.Fatal(err)
	}
	put(t, dir, "worker.lock.json", []byte("{}\n"))
	d, _ := img.Digest()
	return dir, d
}

func TestBuildWorkerImage(t *testing.T) {
	src, digest := workerLayout(t, runtime.GOARCH, "bookworm")
	out := filepath.Join(t.TempDir(), "b")
	m, _, err := build(t, BuildOptions{FromDir: srcTree(t), OutputDir: out, WorkerImage: src})
	if err != nil {
		t.Fatal(err)
	}
	if m.WorkerImage == nil || m.WorkerImage.Digest != digest.String() || m.WorkerImage.Tag != "bookworm" {
		t.Fatalf("workerImage = %+v, want %s", m.WorkerImage, digest)
	}
	if got, want := m.WorkerImageRef("/b"), "oci-layout:///b/images/worker@"+digest.String(); got != want {
		t.Errorf("ref %s, want %s", got, want)
	}
	if m.File(WorkerImageDir+"/worker.lock.json") == nil {
		t.Error("the image build's lock file was not carried")
	}
	if ps := Verify(context.Background(), out, testComponents); len(ps) > 0 {
		t.Fatal(Problems(ps))
	}
	// The carried layout reads back as the image it came from.
	lp, err := layout.FromPath(filepath.Join(out, WorkerImageDir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lp.Image(digest); err != nil {
		t.Errorf("image %s not in the carried layout: %v", digest, err)
	}

	// A blob changed by one byte is refused naming it; so is one whose
	// manifest entry and sidecar were changed to match (what an attacker
	// who rewrote the bundle would do): it is no longer named by its
	// content.
	var layer string
	for _, f := range m.Files {
		if f.Component == WorkerImageFile && strings.Contains(f.Path, "/blobs/") && f.Size > 1000 {
			layer = f.Path
		}
	}
	p := filepath.Join(out, filepath.FromSlash(layer))
	b, _ := os.ReadFile(p)
	b[100] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ps := Verify(context.Background(), out, testComponents)
	if len(ps) == 0 || !strings.Contains(Problems(ps).Error(), p+": sha256 ") {
		t.Errorf("tampered blob: %v", Problems(ps))
	}
	m.File(layer).SHA256 = sumHex(b)
	if _, err := WriteManifest(out, m); err != nil {
		t.Fatal(err)
	}
	if err := writeSidecar(p, sumHex(b)); err != nil {
		t.Fatal(err)
	}
	ps = Verify(context.Background(), out, testComponents)
	if len(ps) == 0 || !strings.Contains(Problems(ps).Error(), p+": blob is named ") {
		t.Errorf("tampered blob with a matching manifest: %v", Problems(ps))
	}
}

func TestBuildWorkerImageRefusals(t *testing.T) {
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	src, _ := workerLayout(t, other, "w")
	if _, _, err := build(t, BuildOptions{FromDir: srcTree(t), WorkerImage: src}); err == nil || !strings.Contains(err.Error(), "the bundle for linux/"+runtime.GOARCH) {
		t.Errorf("wrong arch: %v", err)
	}
	if _, _, err := build(t, BuildOptions{FromDir: srcTree(t), WorkerImage: "oci-layout://" + src + ":nosuch"}); err == nil || !strings.Contains(err.Error(), `no image "nosuch"`) {
		t.Errorf("missing tag: %v", err)
	}
	if _, _, err := build(t, BuildOptions{FromDir: srcTree(t), WorkerImage: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "not an OCI image layout") {
		t.Errorf("not a layout: %v", err)
	}
}

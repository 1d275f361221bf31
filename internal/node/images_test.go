package node

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/node/nodedirs"
)

func writeTar(t *testing.T, file string, members map[string]string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	// A blob first, so the reader must look past it.
	members["blobs/sha256/00"] = "layer"
	for _, name := range []string{"blobs/sha256/00", "manifest.json", "index.json", "oci-layout"} {
		body, ok := members[name]
		if !ok {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// fakeCtr is containerd's image store as ctr shows it.
type fakeCtr struct {
	images  map[string]bool
	imports []string
	calls   [][]string
	// named maps an archive to the names its import creates.
	named map[string][]string
}

func (f *fakeCtr) exec(_ context.Context, args ...string) ([]byte, error) {
	f.calls = append(f.calls, args)
	if len(args) < 4 || args[0] != CtrBinary || args[1] != "-n" || args[2] != "k8s.io" || args[3] != "images" {
		return []byte("bad usage"), errors.New("exit status 1")
	}
	switch strings.Join(args[4:len(args)-1], " ") {
	case "ls":
		if args[len(args)-1] != "-q" {
			break
		}
		var out strings.Builder
		for name := range f.images {
			out.WriteString(name + "\n")
		}
		return []byte(out.String()), nil
	case "import":
		a := args[len(args)-1]
		f.imports = append(f.imports, a)
		for _, n := range f.named[a] {
			f.images[n] = true
		}
		return []byte("unpacking ...done\n"), nil
	}
	return []byte("bad usage"), errors.New("exit status 1")
}

func TestImportImagesIdempotent(t *testing.T) {
	root := t.TempDir()
	docker := path.Join(nodedirs.ImageArchives, "pause.tar")
	oci := path.Join(nodedirs.ImageArchives, "busybox.tar")
	tagOnly := path.Join(nodedirs.ImageArchives, "tagonly.tar")
	writeTar(t, filepath.Join(root, docker), map[string]string{
		"manifest.json": `[{"Config":"c.json","RepoTags":["registry.local/pause:3.10"],"Layers":["l.tar"]}]`,
	})
	writeTar(t, filepath.Join(root, oci), map[string]string{
		"oci-layout": `{"imageLayoutVersion":"1.0.0"}`,
		"index.json": `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:00","size":1,"annotations":{"io.containerd.image.name":"docker.io/library/busybox:1.36","org.opencontainers.image.ref.name":"1.36"}}]}`,
	})
	writeTar(t, filepath.Join(root, tagOnly), map[string]string{
		"index.json": `{"schemaVersion":2,"manifests":[{"digest":"sha256:00","size":1,"annotations":{"org.opencontainers.image.ref.name":"latest"}}]}`,
	})
	if err := os.WriteFile(filepath.Join(root, nodedirs.ImageArchives, "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	archives, err := ImageArchives(root)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(archives, " ") != strings.Join([]string{oci, docker, tagOnly}, " ") {
		t.Fatalf("ImageArchives = %v", archives)
	}

	ctr := &fakeCtr{images: map[string]bool{"sha256:abc": true}, named: map[string][]string{
		docker: {"registry.local/pause:3.10"},
		oci:    {"docker.io/library/busybox:1.36"},
	}}
	ctx := context.Background()
	if err := ImportImages(ctx, root, ctr.exec, archives); err != nil {
		t.Fatal(err)
	}
	if strings.Join(ctr.imports, " ") != strings.Join(archives, " ") {
		t.Errorf("first run imported %v, want all", ctr.imports)
	}
	ctr.imports = nil
	if err := ImportImages(ctx, root, ctr.exec, archives); err != nil {
		t.Fatal(err)
	}
	// The tag-only archive cannot be matched to a name; it is re-imported.
	if strings.Join(ctr.imports, " ") != tagOnly {
		t.Errorf("second run imported %v, want only %s", ctr.imports, tagOnly)
	}
	// Re-importing the same images is no change, and with every archive
	// present ctr runs once: the list the skip decisions are made from.
	ctr.calls = nil
	if changed, err := ImportImagesChanged(ctx, root, ctr.exec, archives); err != nil || changed {
		t.Errorf("re-import of the same images: changed=%v %v", changed, err)
	}
	ctr.calls = nil
	if changed, err := ImportImagesChanged(ctx, root, ctr.exec, archives[:2]); err != nil || changed || len(ctr.calls) != 1 {
		t.Errorf("all present: changed=%v %v, ctr calls %q, want one", changed, err, ctr.calls)
	}
	delete(ctr.images, "registry.local/pause:3.10")
	if changed, err := ImportImagesChanged(ctx, root, ctr.exec, archives); err != nil || !changed {
		t.Errorf("a missing image imported: changed=%v %v", changed, err)
	}

	if err := ImportImages(ctx, root, ctr.exec, nil); err != nil {
		t.Fatal(err)
	}
	if err := ImportImages(ctx, root, ctr.exec, []string{path.Join(nodedirs.ImageArchives, "missing.tar")}); err == nil || !strings.Contains(err.Error(), "missing.tar") {
		t.Errorf("missing archive: err = %v", err)
	}
	failing := func(context.Context, ...string) ([]byte, error) {
		return []byte("ctr: containerd not running\n"), errors.New("exit status 1")
	}
	if err := ImportImages(ctx, root, failing, archives); err == nil || !strings.Contains(err.Error(), "containerd not running") {
		t.Errorf("failing ctr: err = %v", err)
	}
}

func TestImageArchivesMissingDir(t *testing.T) {
	a, err := ImageArchives(t.TempDir())
	if err != nil || a != nil {
		t.Errorf("ImageArchives = %v, %v", a, err)
	}
}

func TestNormalizeRef(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                              "docker.io/library/busybox:latest",
		"busybox:1.36":                         "docker.io/library/busybox:1.36",
		"library/busybox:1.36":                 "docker.io/library/busybox:1.36",
		"user/app":                             "docker.io/user/app:latest",
		"index.docker.io/user/app:1":           "docker.io/user/app:1",
		"localhost/app:1":                      "localhost/app:1",
		"localhost:5000/app":                   "localhost:5000/app:latest",
		"mcr.microsoft.com/oss/k8s/pause:3.10": "mcr.microsoft.com/oss/k8s/pause:3.10",
		"registry.local:5000/a/b:c":            "registry.local:5000/a/b:c",
		"registry.local/a@sha256:abc":          "registry.local/a@sha256:abc",
		"registry.local/a:tag@sha256:abc":      "registry.local/a@sha256:abc",
	} {
		if got, ok := normalizeRef(in); !ok || got != want {
			t.Errorf("normalizeRef(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", ":tag", "a b"} {
		if got, ok := normalizeRef(bad); ok {
			t.Errorf("normalizeRef(%q) = %q, want rejection", bad, got)
		}
	}
}

// A running machine controls its rootfs: an archive dir linked to a host
// dir lists nothing of the host's, and an archive that is a link to a host
// file or a named pipe is refused without reading the host or hanging.
func TestImportImagesHostileRootfs(t *testing.T) {
	base := t.TempDir()
	root, host := filepath.Join(base, "rootfs"), filepath.Join(base, "host")
	writeTar(t, filepath.Join(host, "host.tar"), map[string]string{"manifest.json": `[{"RepoTags":["host/secret:1"]}]`})
	dir := filepath.Join(root, nodedirs.ImageArchives)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, dir); err != nil {
		t.Fatal(err)
	}
	if a, err := ImageArchives(root); err != nil || len(a) != 0 {
		t.Errorf("archive dir linked to the host: %v %v, want none", a, err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(host, "host.tar"), filepath.Join(dir, "link.tar")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.tar"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctr := &fakeCtr{images: map[string]bool{}}
	for _, a := range []string{"link.tar", "fifo.tar"} {
		a = path.Join(nodedirs.ImageArchives, a)
		done := make(chan error, 1)
		go func() { done <- ImportImages(context.Background(), root, ctr.exec, []string{a}) }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), a) {
				t.Errorf("%s: err = %v, want a refusal naming it", a, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ImportImages(%s) blocked", a)
		}
	}
	if len(ctr.imports) != 0 {
		t.Errorf("imported %v", ctr.imports)
	}
}

// Into a new machine's empty store: every archive is imported, that is a
// change, and the store is not listed a second time.
func TestImportImagesIntoEmptyStore(t *testing.T) {
	root := t.TempDir()
	pause := path.Join(nodedirs.ImageArchives, "pause.tar")
	writeTar(t, filepath.Join(root, pause), map[string]string{
		"manifest.json": `[{"Config":"c.json","RepoTags":["registry.local/pause:3.10"],"Layers":["l.tar"]}]`,
	})
	ctr := &fakeCtr{images: map[string]bool{}, named: map[string][]string{pause: {"registry.local/pause:3.10"}}}
	changed, err := ImportImagesChanged(context.Background(), root, ctr.exec, []string{pause})
	if err != nil || !changed {
		t.Fatalf("import into an empty store: %v %v", changed, err)
	}
	if len(ctr.calls) != 2 || strings.Join(ctr.imports, " ") != pause {
		t.Errorf("ran %v, want one listing and one import", ctr.calls)
	}
}

package machine

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	aflayout "github.com/Azure/aks-flex-node/internal/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// file is a tar entry: a dir (name ends in /), a symlink to link, a hard
// link to hard, or a regular file holding body.
type file struct{ name, body, link, hard string }

func tarBytes(t *testing.T, files ...file) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: 0o644, ModTime: time.Unix(1700000000, 0)}
		switch {
		case strings.HasSuffix(f.name, "/"):
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		case f.hard != "":
			h.Typeflag, h.Linkname = tar.TypeLink, f.hard
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(f.body))
	}
	tw.Close()
	return buf.Bytes()
}

func layerOf(t *testing.T, files ...file) v1.Layer {
	t.Helper()
	b := tarBytes(t, files...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func imageOf(t *testing.T, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// baseImage has two layers; the second deletes a file and makes a
// directory opaque.
func baseImage(t *testing.T) v1.Image {
	return imageOf(t,
		layerOf(t,
			file{name: "etc/"}, file{name: "etc/os-release", body: "ID=debian\n"},
			file{name: "etc/gone", body: "x"},
			file{name: "usr/bin/", body: ""}, file{name: "usr/bin/systemd", body: "elf"},
			file{name: "bin", link: "usr/bin"},
			file{name: "var/cache/", body: ""}, file{name: "var/cache/old", body: "o"},
		),
		layerOf(t,
			file{name: "etc/.wh.gone"},
			file{name: "var/cache/.wh..wh..opq"},
			file{name: "var/cache/new", body: "n"},
			file{name: "usr/bin/containerd", body: "elf2"},
		),
	)
}

func writeLayout(t *testing.T, root, dir, tag string, img v1.Image) string {
	t.Helper()
	p := filepath.Join(root, dir)
	lp, err := layout.Write(p, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{annotationRefName: tag})); err != nil {
		t.Fatal(err)
	}
	return "oci-layout://" + dir + ":" + tag
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestProvisionFromOCILayout(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	img := baseImage(t)
	ref := writeLayout(t, root, "/srv/images/node", "v1", img)
	want, _ := img.Digest()

	res, err := Provision(ctx, at(root), "kube1", ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || !strings.Contains(res.Detail, want.String()) {
		t.Fatalf("result %+v, want changed with digest %s", res, want)
	}
	dir := Dir(at(root), "kube1")
	if dir != filepath.Join(root, "var/lib/machines/kube1") {
		t.Fatalf("Dir = %s", dir)
	}
	for p, ok := range map[string]bool{
		"etc/os-release": true, "etc/gone": false, "etc/.wh.gone": false,
		"var/cache/old": false, "var/cache/new": true, "bin/containerd": true,
		"var/cache/.wh..wh..opq": false,
	} {
		if exists(filepath.Join(dir, p)) != ok {
			t.Errorf("%s: exists=%v, want %v", p, !ok, ok)
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
		t.Errorf("rootfs mode %v", fi.Mode())
	}
	if got := readFile(t, filepath.Join(root, "var/lib/aks-flex-node/machines/kube1.image")); got != want.String()+"\n" {
		t.Errorf("record = %q", got)
	}

	res, err = Provision(ctx, at(root), "kube1", ref, nil)
	if err != nil || res.Changed {
		t.Fatalf("second provision: %+v %v", res, err)
	}

	// A different image replaces the rootfs completely.
	img2 := imageOf(t, layerOf(t, file{name: "etc/os-release", body: "ID=acl\n"}))
	ref2 := writeLayout(t, root, "/srv/images/node2", "v2", img2)
	res, err = Provision(ctx, at(root), "kube1", ref2, nil)
	if err != nil || !res.Changed {
		t.Fatalf("replace: %+v %v", res, err)
	}
	if got := readFile(t, filepath.Join(dir, "etc/os-release")); got != "ID=acl\n" {
		t.Errorf("os-release = %q", got)
	}
	if exists(filepath.Join(dir, "usr/bin/systemd")) {
		t.Error("old rootfs content survived the swap")
	}
	d2, _ := img2.Digest()
	if got, _ := ImageDigest(at(root), "kube1"); got != d2.String() {
		t.Errorf("record %q, want %s", got, d2)
	}
	for _, e := range machinesDirEntries(t, root) {
		if e != "kube1" && (!strings.HasPrefix(e, "cache/") || len(e) != len("cache/")+64) {
			t.Errorf("leftover in machines dir: %s", e)
		}
	}

	// By digest works too.
	ref3 := "oci-layout:///srv/images/node@" + want.String()
	if res, err := Provision(ctx, at(root), "kube1", ref3, nil); err != nil || !res.Changed {
		t.Fatalf("by digest: %+v %v", res, err)
	}
	if !exists(filepath.Join(dir, "usr/bin/systemd")) {
		t.Error("by-digest provision did not unpack")
	}
	// Missing rootfs with a matching record is re-unpacked.
	os.RemoveAll(dir)
	if res, err := Provision(ctx, at(root), "kube1", ref3, nil); err != nil || !res.Changed {
		t.Fatalf("after rootfs removal: %+v %v", res, err)
	}
}

func TestProvisionRejectsTamperedLayer(t *testing.T) {
	root := t.TempDir()
	img := imageOf(t, layerOf(t, file{name: "etc/os-release", body: "ID=debian\n"}))
	ref := writeLayout(t, root, "/srv/img", "v1", img)
	l, _ := img.Layers()
	d, _ := l[0].Digest()
	// Swap the blob for another valid gzip tar: the layout reader does
	// not notice, the diff ID check must.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(tarBytes(t, file{name: "etc/evil", body: "x"}))
	zw.Close()
	if err := os.WriteFile(filepath.Join(root, "srv/img/blobs/sha256", d.Hex), gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Provision(context.Background(), at(root), "kube1", ref, nil)
	if err == nil || !strings.Contains(err.Error(), "config says") {
		t.Fatalf("err = %v", err)
	}
	if exists(Dir(at(root), "kube1")) {
		t.Error("tampered image was swapped in")
	}
	if got := machinesDirEntries(t, root); len(got) != 0 {
		t.Errorf("temp dir left behind: %v", got)
	}
}

func TestProvisionFromRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("test registry not on loopback: %s", srv.URL)
	}
	img := baseImage(t)
	ref := host + "/aks/node:v1"
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	res, err := Provision(context.Background(), at(root), "kube1", ref, nil)
	if err != nil || !res.Changed {
		t.Fatalf("%+v %v", res, err)
	}
	want, _ := img.Digest()
	if !strings.Contains(res.Detail, want.String()) {
		t.Errorf("detail %q lacks %s", res.Detail, want)
	}
	if got := readFile(t, filepath.Join(Dir(at(root), "kube1"), "var/cache/new")); got != "n" {
		t.Errorf("var/cache/new = %q", got)
	}
	if res, err := Provision(context.Background(), at(root), "kube1", ref, nil); err != nil || res.Changed {
		t.Fatalf("second: %+v %v", res, err)
	}
}

func TestProvisionRejectsBadNames(t *testing.T) {
	for _, n := range []string{"", "../x", "a/b", "-x", ".kube1", "kube 1"} {
		if _, err := Provision(context.Background(), at(t.TempDir()), n, "oci-layout:///x:y", nil); err == nil {
			t.Errorf("name %q accepted", n)
		}
	}
}

// at is the default layout on a test root.
func at(root string) aflayout.Layout {
	l, err := aflayout.New(root, "", "")
	if err != nil {
		panic(err)
	}
	return l
}

// machinesDirEntries lists the machines dir, and the layer cache's
// entries in it as cache/<name>: a failed provision leaves neither a temp
// tree nor a cache entry behind.
func machinesDirEntries(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	dir := at(root).OnRoot(at(root).MachinesDir())
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if de.Name() != aflayout.LayerCacheName {
			out = append(out, de.Name())
			continue
		}
		cs, _ := os.ReadDir(filepath.Join(dir, de.Name()))
		for _, c := range cs {
			out = append(out, "cache/"+c.Name())
		}
	}
	return out
}

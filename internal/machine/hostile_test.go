package machine

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// rawLayer is a layer of exactly these tar headers (regular files get
// Size bytes of "x").
func rawLayer(t *testing.T, hdrs ...*tar.Header) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// hostileLayer is what made a host file -rwsrwsrwx through Provision: a
// directory entry whose metadata is applied at the end, then a symlink
// to a host path replacing it.
func hostileLayer(t *testing.T, hostFile string) v1.Layer {
	return rawLayer(t,
		&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o6777, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX,
			PAXRecords: map[string]string{"SCHILY.xattr.user.evil": "1"}},
		&tar.Header{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: hostFile, Mode: 0o777},
		&tar.Header{Name: "usr/bin/true", Typeflag: tar.TypeReg, Mode: 0o755, Size: 3},
	)
}

// hostFile is a file outside the test root, with a known mode and time.
func hostFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(p, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, time.Unix(1600000000, 0), time.Unix(1600000000, 0)); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkHostFile(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o644 || !fi.ModTime().Equal(time.Unix(1600000000, 0)) {
		t.Errorf("host file %s changed: %v, mtime %v", p, fi.Mode(), fi.ModTime())
	}
	if _, err := syscall.Getxattr(p, "user.evil", make([]byte, 8)); err == nil {
		t.Errorf("host file %s got the layer's xattr", p)
	}
}

// Issue 13, defect 1 through Provision: a valid image whose layer
// replaces a directory by a link to a host file unpacks (the link is
// legitimate inside the machine), and the host file is untouched.
func TestProvisionHostileLayerLeavesHostAlone(t *testing.T) {
	root, host := t.TempDir(), hostFile(t)
	ref := writeLayout(t, root, "/srv/img", "v1", imageOf(t, hostileLayer(t, host)))
	if _, err := Provision(context.Background(), at(root), "kube1", ref, nil); err != nil {
		t.Fatal(err)
	}
	checkHostFile(t, host)
	if l, err := os.Readlink(filepath.Join(Dir(at(root), "kube1"), "etc")); err != nil || l != host {
		t.Errorf("etc in the rootfs: %q %v", l, err)
	}
}

// The same layer in an image whose config names another diff ID: the
// layer is not the one the digest chain vouches for, so nothing of it
// may be given effect (it was: the metadata pass ran before the digest
// check), and nothing is swapped in.
func TestProvisionUnverifiedLayerActsOnNothing(t *testing.T) {
	root, host := t.TempDir(), hostFile(t)
	img := imageOf(t, hostileLayer(t, host))
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.RootFS.DiffIDs[0] = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	ref := writeLayout(t, root, "/srv/img", "v1", img)
	_, err = Provision(context.Background(), at(root), "kube1", ref, nil)
	if err == nil || !strings.Contains(err.Error(), "config says") {
		t.Fatalf("err = %v, want the diff ID mismatch", err)
	}
	checkHostFile(t, host)
	if exists(Dir(at(root), "kube1")) {
		t.Error("unverified image swapped in")
	}
	if got := machinesDirEntries(t, root); len(got) != 0 {
		t.Errorf("temp tree left behind: %v", got)
	}
}

// extractLayer checks the digest before the directory metadata pass: a
// mismatching layer leaves its directories as extraction made them
// (0700), not with the archive's modes.
func TestExtractLayerDigestBeforeDirMetadata(t *testing.T) {
	dir := t.TempDir()
	l := rawLayer(t,
		&tar.Header{Name: "ro/", Typeflag: tar.TypeDir, Mode: 0o555},
		&tar.Header{Name: "ro/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
	)
	err := extractLayer(l, v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("cd", 32)}, dir)
	if err == nil || !strings.Contains(err.Error(), "config says") {
		t.Fatalf("err = %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ro")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("ro: %v %v; want 0700, the archive's metadata not applied before the digest check", fi.Mode(), err)
	}
	good, _ := l.DiffID()
	if err := extractLayer(l, good, t.TempDir()); err != nil {
		t.Errorf("matching diff ID: %v", err)
	}
}

package machine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

func nlink(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(fi.Sys().(*syscall.Stat_t).Nlink)
}

// TestProvisionFromLayerCache: the second machine, and a machine whose
// rootfs was removed, are made from the cache without extracting
// anything; shared files are hard links (on a file system without
// reflinks), the rest copies.
func TestProvisionFromLayerCache(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ref := writeLayout(t, root, "/srv/images/node", "v1", baseImage(t))
	p := &Provisioner{linkMode: modeHardlink}
	res, err := p.Provision(ctx, at(root), "kube1", ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Detail, "2 layers (2 extracted") {
		t.Errorf("cold: %s", res.Detail)
	}
	res, err = p.Provision(ctx, at(root), "kube2", ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Detail, "(0 extracted") || !strings.Contains(res.Detail, "by hardlink") {
		t.Errorf("warm: %s", res.Detail)
	}
	k1, k2 := Dir(at(root), "kube1"), Dir(at(root), "kube2")
	if n := nlink(t, filepath.Join(k2, "usr/bin/systemd")); n != 3 {
		t.Errorf("usr/bin/systemd has %d links, want 3 (the cache and two machines)", n)
	}
	if n := nlink(t, filepath.Join(k2, "etc/os-release")); n != 1 {
		t.Errorf("etc/os-release has %d links: files outside /usr must be copies", n)
	}
	for _, d := range []string{k1, k2} {
		if exists(filepath.Join(d, "etc/gone")) || exists(filepath.Join(d, "var/cache/old")) || !exists(filepath.Join(d, "var/cache/new")) {
			t.Errorf("%s: whiteouts not applied", d)
		}
	}

	// A shared file written in place is found before it is linked again:
	// the entry is extracted again and the new machine gets the image's
	// content, not the changed one. The machine is removed as reset and
	// a repave remove one (Remove), which re-stamps the links it drops.
	if err := os.WriteFile(filepath.Join(k1, "usr/bin/systemd"), []byte("changed!"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Remove(at(root), "kube2"); err != nil {
		t.Fatal(err)
	}
	res, err = p.Provision(ctx, at(root), "kube2", ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(k2, "usr/bin/systemd")); got != "elf" {
		t.Errorf("kube2 usr/bin/systemd = %q after a machine changed the cached file", got)
	}
	if !strings.Contains(res.Detail, "(1 extracted") {
		t.Errorf("after a change: %s", res.Detail)
	}

	// Copy mode shares nothing.
	os.RemoveAll(k2)
	if _, err := (&Provisioner{linkMode: modeCopy}).Provision(ctx, at(root), "kube2", ref, nil); err != nil {
		t.Fatal(err)
	}
	if n := nlink(t, filepath.Join(k2, "usr/bin/containerd")); n != 1 {
		t.Errorf("copy mode: %d links", n)
	}
}

// TestLayerCacheGC: entries no machine uses are removed past the size
// bound, oldest first; the ones in use stay whatever the bound.
func TestLayerCacheGC(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	l := at(root)
	ref1 := writeLayout(t, root, "/srv/a", "v1", imageOf(t, layerOf(t, file{name: "a", body: "aaaa"})))
	ref2 := writeLayout(t, root, "/srv/b", "v1", imageOf(t, layerOf(t, file{name: "b", body: "bbbb"})))
	if _, err := Provision(ctx, l, "kube1", ref1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Provision(ctx, l, "kube1", ref2, nil); err != nil {
		t.Fatal(err)
	}
	c := newLayerCache(l, nil)
	if n := len(cacheEntries(t, c)); n != 2 {
		t.Fatalf("%d entries before gc, want 2 (under the bound)", n)
	}
	os.MkdirAll(filepath.Join(c.dir, ".tmp-crashed"), 0o700)
	if err := c.gc(l, 0); err != nil {
		t.Fatal(err)
	}
	got := cacheEntries(t, c)
	if len(got) != 1 {
		t.Fatalf("after gc: %v, want only the layer kube1 uses", got)
	}
	if !exists(filepath.Join(c.dir, got[0], cacheTree, "b")) {
		t.Errorf("gc removed the layer in use")
	}
}

func cacheEntries(t *testing.T, c *layerCache) []string {
	t.Helper()
	des, _ := os.ReadDir(c.dir)
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// onPlatform is img with its config's platform set.
func onPlatform(t *testing.T, img v1.Image, arch string) v1.Image {
	t.Helper()
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	img, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestInspect: preflight's probe reads the layers (streamed, nothing
// written) before the image is cached and the cache's indexes after, and
// both see the same contract findings; an image for another arch is
// reported as such.
func TestInspect(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ref := writeLayout(t, root, "/srv/images/node", "v1", onPlatform(t, baseImage(t), runtime.GOARCH))
	p := &Provisioner{}
	before, err := p.Inspect(ctx, at(root), ref)
	if err != nil {
		t.Fatal(err)
	}
	if before.Cached || !before.PlatformOK() || len(before.Findings) == 0 {
		t.Fatalf("before provisioning: %+v", before)
	}
	if got := machinesDirEntries(t, root); len(got) != 0 {
		t.Errorf("inspect wrote %v", got)
	}
	misses := map[string]bool{}
	for _, f := range before.Findings {
		misses[f.Item] = !f.OK
	}
	if !misses["iptables"] || !misses["systemd"] || misses["os-release"] {
		t.Errorf("findings %+v", before.Findings)
	}
	if _, err := p.Provision(ctx, at(root), "kube1", ref, nil); err != nil {
		t.Fatal(err)
	}
	after, err := (&Provisioner{}).Inspect(ctx, at(root), ref)
	if err != nil || !after.Cached || fmt.Sprint(after.Findings) != fmt.Sprint(before.Findings) {
		t.Errorf("from the cache: %+v %v, want the same findings as %+v", after, err, before.Findings)
	}

	other := writeLayout(t, root, "/srv/images/other", "v1", onPlatform(t, baseImage(t), "s390x"))
	in, err := (&Provisioner{}).Inspect(ctx, at(root), other)
	if err != nil || in.PlatformOK() || in.Platform != "linux/s390x" {
		t.Errorf("wrong arch: %+v %v", in, err)
	}
}

// TestMaterializeReplacedDirs: an upper layer that removes a lower
// layer's directory (a whiteout) and makes it again, or puts a file where
// a directory was, gets its entries into the new directory, not into the
// removed one whose descriptor the rootfs maker had open.
func TestMaterializeReplacedDirs(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	img := imageOf(t,
		layerOf(t,
			file{name: "opt/"}, file{name: "opt/d/"}, file{name: "opt/d/a", body: "a"},
			file{name: "opt/f/"}, file{name: "opt/f/x", body: "x"},
		),
		layerOf(t,
			file{name: "opt/.wh.d"}, file{name: "opt/d/"}, file{name: "opt/d/c", body: "c"},
			file{name: "opt/f", body: "now a file"},
		),
	)
	ref := writeLayout(t, root, "/srv/images/node", "v1", img)
	for _, name := range []string{"kube1", "kube2"} { // cold, then from the cache
		if _, err := (&Provisioner{linkMode: modeHardlink}).Provision(ctx, at(root), name, ref, nil); err != nil {
			t.Fatal(err)
		}
		d := Dir(at(root), name)
		if exists(filepath.Join(d, "opt/d/a")) || readFile(t, filepath.Join(d, "opt/d/c")) != "c" {
			t.Errorf("%s: opt/d is not the upper layer's", name)
		}
		if readFile(t, filepath.Join(d, "opt/f")) != "now a file" {
			t.Errorf("%s: opt/f is not the upper layer's file", name)
		}
	}
}

// Issue 26 item 13c: a cached file changed in place with its size and
// mtime put back is caught (the index records each file's stamp as the
// bundle's verification record does: device, inode, size, mtime, ctime)
// before it is linked or copied again, in each mode; the link counts the
// machines' own rootfs add and remove (a repave's swap, a machine's
// removal) are not taken for a change.
func TestLayerCacheCatchesAChangeWithSizeAndMtimeKept(t *testing.T) {
	for _, mode := range []linkMode{modeHardlink, modeCopy} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			root := t.TempDir()
			ref := writeLayout(t, root, "/srv/images/node", "v1", baseImage(t))
			p := &Provisioner{linkMode: mode}
			for _, m := range []string{"kube1", "kube2", "kube1"} { // two repaves: swaps of a rootfs
				if _, err := p.Provision(ctx, at(root), m, ref, nil); err != nil {
					t.Fatal(err)
				}
				os.Remove(recordPath(at(root), m)) // provision again next time
			}
			if _, err := Remove(at(root), "kube2"); err != nil {
				t.Fatal(err)
			}
			res, err := p.Provision(ctx, at(root), "kube2", ref, nil)
			if err != nil || !strings.Contains(res.Detail, "(0 extracted") {
				t.Fatalf("after repaves and a removal: %v %s", err, res.Detail)
			}
			// The cached file itself (in copy mode the machines hold copies).
			cached := filepath.Join(at(root).OnRoot(at(root).LayerCacheDir()), "*", "tree", "usr/bin/systemd")
			files, _ := filepath.Glob(cached)
			if len(files) != 1 {
				t.Fatalf("cached systemd: %v", files)
			}
			fi, err := os.Stat(files[0])
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(files[0], os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("ELF"), 0); err != nil || f.Close() != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(files[0], fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
			os.RemoveAll(Dir(at(root), "kube2"))
			os.Remove(recordPath(at(root), "kube2"))
			res, err = p.Provision(ctx, at(root), "kube2", ref, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := readFile(t, filepath.Join(Dir(at(root), "kube2"), "usr/bin/systemd")); got != "elf" {
				t.Errorf("kube2 usr/bin/systemd = %q after the cached file changed with its size and mtime kept (%s)", got, res.Detail)
			}
		})
	}
}

// Issue 26 item 13c: a layer's own hard links (usr/bin/perl and
// usr/bin/perl5.36.0 in Debian) are one cached inode; linking the first
// moves its ctime, which does not make the second a change.
func TestLayerCacheLinksALayersOwnHardLinks(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	img := imageOf(t, layerOf(t, file{name: "usr/"}, file{name: "usr/bin/"}, file{name: "usr/bin/perl5.36.0", body: "perl"},
		file{name: "usr/bin/perl", hard: "usr/bin/perl5.36.0"}))
	ref := writeLayout(t, root, "/srv/images/node", "v1", img)
	p := &Provisioner{linkMode: modeHardlink}
	for _, m := range []string{"kube1", "kube2"} {
		res, err := p.Provision(ctx, at(root), m, ref, nil)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		if m == "kube2" && !strings.Contains(res.Detail, "(0 extracted") {
			t.Errorf("kube2 extracted again: %s", res.Detail)
		}
	}
	if got := readFile(t, filepath.Join(Dir(at(root), "kube2"), "usr/bin/perl")); got != "perl" {
		t.Errorf("usr/bin/perl = %q", got)
	}
}

// Package machine owns the systemd-nspawn machines the Kubernetes worker
// runs in: their rootfs under /var/lib/machines (unpacked from an OCI
// image, verified layer by layer), the record of which image digest a
// rootfs came from, the .nspawn settings file and the
// systemd-nspawn@<name>.service drop-in, and starting, stopping and
// entering a machine through machinectl, systemctl and nsenter.
package machine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/image"
	aflayout "github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/task"
)

// OCILayoutScheme prefixes an image reference that names an OCI image
// layout directory on the host rather than a registry.
const OCILayoutScheme = "oci-layout://"

// Dir is the rootfs directory of machine name, as this process opens it.
func Dir(l aflayout.Layout, name string) string {
	return l.OnRoot(l.MachineDir(name))
}

// recordPath is where the digest of the image a machine's rootfs was
// unpacked from is kept.
func recordPath(l aflayout.Layout, name string) string {
	return l.OnRoot(l.MachineStateDir() + "/" + name + ".image")
}

// ValidateName accepts machine names that are safe as a path component,
// a unit instance name and a hostname: [A-Za-z0-9-], not starting with
// '-', at most 64 characters.
func ValidateName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("machine name %q: must be 1 to 64 characters", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' && i > 0:
		default:
			return fmt.Errorf("machine name %q: character %q at offset %d is not allowed (use [A-Za-z0-9-], not starting with '-')", name, c, i)
		}
	}
	return nil
}

// Provision makes Dir(l, name) the rootfs of imageRef with the zero
// Provisioner. See (*Provisioner).Provision.
func Provision(ctx context.Context, l aflayout.Layout, name, imageRef string, log *slog.Logger) (task.Result, error) {
	return (&Provisioner{}).Provision(ctx, l, name, imageRef, log)
}

// Provision makes Dir(l, name) the rootfs of imageRef, which is either
// oci-layout:///dir:tag (or oci-layout:///dir@sha256:...; dir is a host
// path, opened under root) or a registry reference. The image digest is
// resolved first: when the state record says the rootfs was unpacked from
// that digest and the directory exists, nothing is touched. Otherwise the
// image is unpacked next to the target, every layer checked against the
// diff ID of the digest-verified config, and swapped in with renames, so a
// crash leaves the old rootfs or the new one, never a mix. The machine
// must not be running while its rootfs is replaced; that is the caller's
// business.
func (p *Provisioner) Provision(ctx context.Context, l aflayout.Layout, name, imageRef string, log *slog.Logger) (task.Result, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := ValidateName(name); err != nil {
		return task.Result{}, err
	}
	img, digest, err := p.resolve(ctx, l.Root(), imageRef)
	if err != nil {
		return task.Result{}, fmt.Errorf("resolve image %s: %w", imageRef, explainAuth(imageRef, err))
	}
	target := Dir(l, name)
	rec := recordPath(l, name)
	if have, err := os.ReadFile(rec); err == nil && strings.TrimSpace(string(have)) == digest.String() {
		if fi, err := os.Stat(target); err == nil && fi.IsDir() {
			return task.Result{Detail: fmt.Sprintf("%s already holds %s (%s)", target, imageRef, digest)}, nil
		}
	}

	machines := l.OnRoot(l.MachinesDir())
	if err := fsutil.MkdirAll(machines, 0o700); err != nil {
		return task.Result{}, err
	}
	if err := removeLeftovers(l, name); err != nil {
		return task.Result{}, err
	}
	cache := newLayerCache(l, log)
	// The old rootfs's links to the cache go with it (moving the cached
	// files' ctime): what changed before is dropped first, and what is
	// left re-stamped after (layercache.go).
	oldIDs := layerIDs(l, name)
	if err := cache.dropChanged(oldIDs); err != nil {
		return task.Result{}, err
	}
	var made string
	dropped := map[string]bool{}
	for {
		made, err = p.makeRootfs(ctx, cache, machines, name, target, img, digest)
		var changed *errCacheChanged
		if err == nil || !errors.As(err, &changed) || dropped[changed.entry.DiffID] {
			break
		}
		dropped[changed.entry.DiffID] = true
		// A shared file was written in place since it was cached: the
		// entry is not the layer any more. Extract it again.
		log.Warn("cached layer changed since it was extracted; extracting it again", "diffID", changed.entry.DiffID, "path", changed.path)
		if err := os.RemoveAll(changed.entry.dir); err != nil {
			return task.Result{}, err
		}
	}
	if err != nil {
		return task.Result{}, fmt.Errorf("make %s from %s (%s): %w", target, imageRef, digest, err)
	}
	if _, err := fsutil.WriteFile(rec, []byte(digest.String()+"\n"), 0o644); err != nil {
		return task.Result{}, fmt.Errorf("record image digest: %w", err)
	}
	if err := cache.restamp(append(oldIDs, layerIDs(l, name)...)); err != nil {
		return task.Result{}, fmt.Errorf("layer cache: %w", err)
	}
	if err := cache.gc(l, MaxLayerCacheBytes); err != nil {
		log.Warn("layer cache cleanup failed", "dir", cache.dir, "err", err)
	}
	return task.Result{Changed: true, Detail: fmt.Sprintf("made %s from %s (%s): %s", target, imageRef, digest, made)}, nil
}

// makeRootfs makes target the rootfs of img from the layer cache,
// extracting the layers it lacks, and records the layers it was made
// from. The tree is made next to target and swapped in with renames.
func (p *Provisioner) makeRootfs(ctx context.Context, cache *layerCache, machines, name, target string, img v1.Image, digest v1.Hash) (string, error) {
	start := time.Now()
	entries, extracted, err := cachedLayers(ctx, cache, img, digest)
	if err != nil {
		return "", err
	}
	extractTook := time.Since(start)
	tmp, err := os.MkdirTemp(machines, "."+name+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed into place
	// A rootfs "/" must be traversable by every user in the machine;
	// MkdirTemp makes it 0700.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	t1 := time.Now()
	mode, n, err := materialize(machines, tmp, entries, p.linkMode)
	if err != nil {
		return "", err
	}
	if err := swapIn(machines, name, tmp, target); err != nil {
		return "", err
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.DiffID)
	}
	l := cache.layout
	if _, err := fsutil.WriteFile(layersRecord(l, name), []byte(strings.Join(ids, "\n")+"\n"), 0o644); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d layers (%d extracted in %s, %d cached), %d entries by %s in %s",
		len(entries), extracted, extractTook.Round(time.Millisecond), len(entries)-extracted, n, mode, time.Since(t1).Round(time.Millisecond)), nil
}

// ImageDigest returns the digest Dir(l, name) was last unpacked from,
// or "" when there is no record.
func ImageDigest(l aflayout.Layout, name string) (string, error) {
	b, err := os.ReadFile(recordPath(l, name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}

const (
	annotationRefName    = "org.opencontainers.image.ref.name"
	annotationImageName  = "io.containerd.image.name"
	mediaTypeOCIIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeDockerIndex = "application/vnd.docker.distribution.manifest.list.v2+json"
)

func (p *Provisioner) fromLayout(root, s string) (v1.Image, v1.Hash, error) {
	dir, want, err := config.ParseOCILayoutRef(s)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	dir = filepath.Join(root, dir)
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	byDigest := strings.HasPrefix(want, "sha256:")
	var found *v1.Descriptor
	for i := range im.Manifests {
		d := &im.Manifests[i]
		if byDigest && d.Digest.String() == want ||
			!byDigest && (d.Annotations[annotationRefName] == want || strings.HasSuffix(d.Annotations[annotationImageName], ":"+want)) {
			found = d
			break
		}
	}
	if found == nil {
		return nil, v1.Hash{}, fmt.Errorf("%s: no manifest for %q in index.json", dir, want)
	}
	switch string(found.MediaType) {
	case mediaTypeOCIIndex, mediaTypeDockerIndex:
		child, err := idx.ImageIndex(found.Digest)
		if err != nil {
			return nil, v1.Hash{}, err
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return nil, v1.Hash{}, err
		}
		plat := p.platform()
		for _, d := range cm.Manifests {
			if d.Platform != nil && d.Platform.Satisfies(plat) {
				img, err := child.Image(d.Digest)
				return img, d.Digest, err
			}
		}
		return nil, v1.Hash{}, fmt.Errorf("%s: %q has no manifest for %s", dir, want, plat)
	}
	img, err := idx.Image(found.Digest)
	return img, found.Digest, err
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// cachedLayers returns img's layers from the cache, extracting the ones
// it lacks, after checking the chain of digests: manifest bytes against
// digest, config bytes against the manifest; each layer's uncompressed
// stream is checked against the config's diff ID as it is extracted
// (extractLayer). It returns the entries, bottom layer first, and how
// many were extracted.
func cachedLayers(ctx context.Context, cache *layerCache, img v1.Image, digest v1.Hash) ([]*cacheEntry, int, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return nil, 0, err
	}
	if got := sha256Hash(raw); got != digest {
		return nil, 0, fmt.Errorf("manifest hashes to %s, want %s", got, digest)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, 0, err
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return nil, 0, err
	}
	if got := sha256Hash(rawCfg); got != m.Config.Digest {
		return nil, 0, fmt.Errorf("config hashes to %s, manifest says %s", got, m.Config.Digest)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, 0, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, 0, err
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return nil, 0, fmt.Errorf("manifest has %d layers, config lists %d diff IDs", len(layers), len(cfg.RootFS.DiffIDs))
	}
	var out []*cacheEntry
	extracted := 0
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		diffID := cfg.RootFS.DiffIDs[i]
		if diffID.Algorithm != "sha256" {
			return nil, 0, fmt.Errorf("layer %d: unsupported diff ID algorithm %q", i, diffID.Algorithm)
		}
		e, err := cache.get(diffID)
		if err != nil {
			return nil, 0, err
		}
		if e == nil {
			ld, _ := l.Digest()
			if e, err = cache.fill(l, diffID); err != nil {
				return nil, 0, fmt.Errorf("layer %d (%s): %w", i, ld, err)
			}
			cache.log.Debug("layer extracted into the cache", "layer", i, "digest", ld.String(), "diffID", diffID.String())
			extracted++
		}
		e.touch()
		out = append(out, e)
	}
	return out, extracted, nil
}

// extractLayer extracts layer l into dir, hashing its uncompressed stream
// on the way, and checks the hash against diffID once the archive has
// been read to its end, before the extraction applies any directory
// metadata: a layer that is not the one the verified config names has
// nothing of it given effect but files in dir, the caller's temp tree,
// which is thrown away. Hashing while extracting, rather than staging the
// layer first, reads it once and needs no second copy of it on disk;
// extraction is confined to dir (fsutil.ExtractTar), so what an
// unverified stream can do is limited to that tree.
func extractLayer(l v1.Layer, diffID v1.Hash, dir string) error {
	return extractLayerTo(l, diffID, dir, true)
}

// extractLayerTo is extractLayer; without whiteouts, .wh. entries are
// kept as files (a cached layer, whose whiteouts apply when a rootfs is
// made from it).
func extractLayerTo(l v1.Layer, diffID v1.Hash, dir string, whiteouts bool) error {
	ls, err := image.OpenLayer(l, diffID)
	if err != nil {
		return err
	}
	defer ls.Close()
	return fsutil.ExtractTar(ls, dir, fsutil.ExtractOptions{Whiteouts: whiteouts, Devices: true, Verify: ls.Verify})
}

// swapIn replaces target with the fully unpacked tmp: the old tree is
// renamed away first, then tmp renamed in, then the old tree removed.
func swapIn(machines, name, tmp, target string) error {
	old := ""
	if _, err := os.Lstat(target); err == nil {
		// rename(2) replaces an empty directory, so reserve a unique name
		// with MkdirTemp and move the old rootfs onto it (os.Rename
		// refuses a directory target; the syscall does not).
		o, err := os.MkdirTemp(machines, "."+name+".old-")
		if err != nil {
			return err
		}
		if err := syscall.Rename(target, o); err != nil {
			os.Remove(o)
			return fmt.Errorf("move old rootfs aside: %w", err)
		}
		old = o
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(tmp, target); err != nil {
		if old != "" {
			_ = os.Rename(old, target)
		}
		return fmt.Errorf("move new rootfs into place: %w", err)
	}
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("remove old rootfs %s: %w", old, err)
		}
	}
	return nil
}

// removeLeftovers deletes temp and old trees a crashed Provision left.
func removeLeftovers(l aflayout.Layout, name string) error {
	machines := l.OnRoot(l.MachinesDir())
	for _, pat := range []string{"." + name + ".tmp-*", "." + name + ".old-*"} {
		matches, err := filepath.Glob(filepath.Join(machines, pat))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// trimOutput is the last non-empty line of a command's output.
func trimOutput(b []byte) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return strings.TrimSpace(string(lines[len(lines)-1]))
}

package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/transport"
)

// BuildOptions are the inputs of Build.
type BuildOptions struct {
	Spec *Spec
	// Arch overrides Spec.Arch ("" means Spec.Arch); they must agree when
	// both are set.
	Arch      string
	OutputDir string
	// FromDir is a local source tree laid out like the bundle (a mirror of
	// the upstream download paths, image archives under images/). Empty
	// means the upstream release sites, with image archives pulled by
	// PullImage.
	FromDir string
	// LegalDir, when set, must hold a LICENSE; notice files are included
	// when present. Empty includes no legal files.
	LegalDir string
	// Upstream and Transport are for the online mode: the download sites
	// (tests point them at a local server) and the transport policy (the
	// zero value is the product's; tests shorten its limits).
	Upstream  Upstream
	Transport transport.Policy
	// PullImage writes the image ref for linux/arch as an image archive
	// at dst (online mode only); Registry.PullImageArchive is the real one.
	PullImage func(ctx context.Context, ref, arch, dst string) error
	// Note receives one-line notes (a missing NOTICE, say); nil drops them.
	Note func(string)
	// WorkerImage is the worker image to carry under images/worker/: an
	// OCI layout dir holding one image (an image build output), or
	// oci-layout:///dir:tag; "" carries none.
	WorkerImage string
	// Layout is LayoutNative ("" too) or LayoutUpstream: upstream's file
	// list (with kube-proxy) and manifest.json (upstream.go), which has no
	// place for a worker image or legal files.
	Layout string
}

// BuildMtime is the modification time of every file and directory Build
// writes, so that an archive of the output dir (tar, rsync -t) is the same
// for the same inputs too.
var BuildMtime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Build writes a bundle into o.OutputDir, which must be absent or empty.
// The same inputs give byte-identical output: files are copied verbatim,
// lists are sorted, sidecars and the manifest have one fixed rendering,
// and files and directories get fixed modes and mtimes (BuildMtime). The bundle is assembled in a
// temp dir next to OutputDir, verified, and renamed into place, so a
// failed build leaves nothing that looks like a bundle.
func Build(ctx context.Context, o BuildOptions) (*Manifest, error) {
	arch, err := buildArch(o)
	if err != nil {
		return nil, err
	}
	if o.Layout == "" {
		o.Layout = LayoutNative
	}
	if err := buildLayoutCheck(o); err != nil {
		return nil, err
	}
	out := filepath.Clean(o.OutputDir)
	tmp, err := newBuildDir(out)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	b := &builder{ctx: ctx, o: o, arch: arch, dir: tmp, m: &Manifest{
		SchemaVersion: SchemaVersion, Arch: arch, Components: o.Spec.Components,
		Files: []File{}, Images: []Image{}, Legal: []LegalFile{}, Layout: o.Layout,
	}}
	// Upstream's layout always carries kube-proxy.
	b.m.Components.KubeProxy = b.m.Components.KubeProxy || o.Layout == LayoutUpstream
	if err := b.components(); err != nil {
		return nil, err
	}
	if err := b.images(); err != nil {
		return nil, err
	}
	if err := b.workerImage(); err != nil {
		return nil, err
	}
	if err := b.legal(); err != nil {
		return nil, err
	}
	if err := b.seal(); err != nil {
		return nil, err
	}
	if err := os.Remove(out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("output dir %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return nil, err
	}
	return b.m, os.Chtimes(out, BuildMtime, BuildMtime)
}

// buildArch is the arch to build for: --arch or the spec's, which must
// agree when both are set.
func buildArch(o BuildOptions) (string, error) {
	arch := o.Spec.Arch
	switch {
	case o.Arch != "" && o.Spec.Arch != "" && o.Arch != o.Spec.Arch:
		return "", fmt.Errorf("--arch %s disagrees with the spec's arch %s", o.Arch, o.Spec.Arch)
	case o.Arch != "":
		arch = o.Arch
	}
	if !archRE().MatchString(arch) {
		return "", fmt.Errorf("arch %q is not amd64 or arm64 (set --arch or the spec's arch)", arch)
	}
	return arch, nil
}

// newBuildDir checks that out is absent or empty and makes the temp dir
// next to it that the bundle is assembled in (mode 0755 whatever the
// umask, as the renamed output will have).
func newBuildDir(out string) (string, error) {
	if des, err := os.ReadDir(out); err == nil && len(des) > 0 {
		return "", fmt.Errorf("output dir %s is not empty: give a new or empty directory", out)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("output dir %s: %w", out, err)
	}
	if err := fsutil.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".build-*")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return tmp, nil
}

// builder assembles one bundle in dir, recording what it adds in m.
type builder struct {
	ctx  context.Context
	o    BuildOptions
	arch string
	dir  string
	m    *Manifest
}

// components adds the component files, from --from-dir (the bundle's
// paths, or a mirror of the upstream ones) or downloaded upstream.
func (b *builder) components() error {
	s := b.o.Spec
	comps := b.paths()
	downloads := b.o.Upstream.urls(s.Components, b.arch, comps)
	names := make([]string, 0, len(comps))
	for c := range comps {
		names = append(names, c)
	}
	sort.Strings(names)
	if b.o.FromDir == "" {
		if err := Fetch(b.ctx, b.o.Transport, downloads, b.dir); err != nil {
			return err
		}
		for _, c := range names {
			p := filepath.Join(b.dir, comps[c])
			sum, n, err := hashFile(b.ctx, p)
			if err != nil {
				return err
			}
			if err := os.Chmod(p, 0o644); err != nil {
				return err
			}
			b.m.Files = append(b.m.Files, File{Path: comps[c], SHA256: sum, Size: n, Component: c})
		}
		return nil
	}
	mirror := map[string]Download{}
	for _, d := range downloads {
		mirror[d.Component] = d
	}
	other := UpstreamPaths(s.Components, b.arch)
	if b.o.Layout == LayoutUpstream {
		other = BundlePaths(s.Components, b.arch)
	}
	for _, c := range names {
		f, err := copyIn(b.ctx, b.o.FromDir, b.dir, comps[c])
		// A bundle in the other layout serves as --from-dir too.
		if alt, ok := other[c]; ok && errors.Is(err, fs.ErrNotExist) {
			f, err = copyInAs(b.ctx, b.o.FromDir, alt, b.dir, comps[c])
		}
		if d, ok := mirror[c]; ok && errors.Is(err, fs.ErrNotExist) {
			f, err = copyMirrored(b.ctx, b.o.FromDir, b.dir, d)
		}
		if err != nil {
			return err
		}
		f.Component = c
		b.m.Files = append(b.m.Files, f)
	}
	return nil
}

// images adds the image archives, copied from --from-dir or pulled.
func (b *builder) images() error {
	for _, im := range b.o.Spec.Images {
		var f File
		var err error
		src := im.Path
		if b.o.Layout == LayoutUpstream {
			im.Path = UpstreamImagePath(b.arch, im.Ref)
		}
		if b.o.FromDir != "" {
			f, err = copyInAs(b.ctx, b.o.FromDir, src, b.dir, im.Path)
			if alt := UpstreamImagePath(b.arch, im.Ref); errors.Is(err, fs.ErrNotExist) && alt != src {
				f, err = copyInAs(b.ctx, b.o.FromDir, alt, b.dir, im.Path)
			}
		} else {
			f, err = b.pullImage(im)
		}
		if err != nil {
			return err
		}
		f.Component = ImageFile
		b.m.Files = append(b.m.Files, f)
		b.m.Images = append(b.m.Images, im)
	}
	return nil
}

// pullImage writes image im as an archive at its bundle path, with its
// sidecar.
func (b *builder) pullImage(im Image) (File, error) {
	if !strings.Contains(im.Ref, "@sha256:") && b.o.Note != nil {
		b.o.Note(fmt.Sprintf("note: image %s is pulled by tag only: a later build may get different content; pin it as %s@sha256:<digest> for a reproducible bundle", im.Ref, im.Ref))
	}
	if b.o.PullImage == nil {
		return File{}, fmt.Errorf("image %s: no --from-dir and no image puller", im.Ref)
	}
	dst := filepath.Join(b.dir, filepath.FromSlash(im.Path))
	if err := fsutil.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return File{}, err
	}
	if err := b.o.PullImage(b.ctx, im.Ref, b.arch, dst); err != nil {
		return File{}, fmt.Errorf("image %s: %w", im.Ref, err)
	}
	if err := os.Chmod(dst, 0o644); err != nil {
		return File{}, err
	}
	sum, n, err := hashFile(b.ctx, dst)
	if err != nil {
		return File{}, err
	}
	return File{Path: im.Path, SHA256: sum, Size: n}, writeSidecar(dst, sum)
}

// legal adds the license and notice files of --legal-files-dir.
func (b *builder) legal() error {
	if b.o.LegalDir == "" {
		return nil
	}
	legal, notes, err := collectLegal(b.o.LegalDir)
	if err != nil {
		return err
	}
	for _, n := range notes {
		if b.o.Note != nil {
			b.o.Note(n)
		}
	}
	for _, name := range legal {
		rel := "legal/" + name
		f, err := copyFile(b.ctx, filepath.Join(b.o.LegalDir, name), b.dir, rel)
		if err != nil {
			return err
		}
		b.m.Legal = append(b.m.Legal, LegalFile{Path: rel, SHA256: f.SHA256, Size: f.Size})
	}
	return nil
}

// seal sorts the lists, writes manifest.json, verifies the bundle as a
// consumer would and gives everything BuildMtime.
func (b *builder) seal() error {
	m := b.m
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	sort.Slice(m.Images, func(i, j int) bool { return m.Images[i].Path < m.Images[j].Path })
	sort.Slice(m.Legal, func(i, j int) bool { return m.Legal[i].Path < m.Legal[j].Path })
	if m.Layout == LayoutUpstream {
		if err := writeUpstreamManifest(b.dir, m); err != nil {
			return err
		}
	} else if _, err := WriteManifest(b.dir, m); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(b.dir, ManifestName), 0o644); err != nil {
		return err
	}
	if _, ps := VerifyIntegrity(b.ctx, b.dir); len(ps) > 0 {
		return fmt.Errorf("self-check of the built bundle: %w", Problems(ps))
	}
	return fixMtimes(b.dir)
}

// fixMtimes sets BuildMtime on everything under dir. Setting a time
// changes no directory's mtime, so the order does not matter.
func fixMtimes(dir string) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, BuildMtime, BuildMtime)
	})
}

// copyIn copies src/rel into the bundle at rel. A <rel>.sha256 next to
// the source (what a mirror of the release site has for most files) must
// agree with the content.
func copyIn(ctx context.Context, src, bundle, rel string) (File, error) {
	return copyInAs(ctx, src, rel, bundle, rel)
}

// copyInAs is copyIn from src/srcRel: an image archive is at the spec's
// path in --from-dir whatever the layout being built.
func copyInAs(ctx context.Context, src, srcRel, bundle, rel string) (File, error) {
	if err := validRel(srcRel); err != nil {
		return File{}, err
	}
	from := filepath.Join(src, filepath.FromSlash(srcRel))
	f, err := copyFile(ctx, from, bundle, rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return f, fmt.Errorf("--from-dir %s has no %s (the tree uses the bundle's paths, or for components the upstream mirror paths; see docs/offline-bundle.md): %w", src, rel, err)
		}
		return f, err
	}
	if side, err := readSidecar(from + ".sha256"); err == nil && side != f.SHA256 {
		return f, fmt.Errorf("%s: sha256 %s != %s.sha256 %s", from, f.SHA256, filepath.Base(from), side)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return f, fmt.Errorf("%s.sha256: %w", from, err)
	}
	return f, nil
}

// copyMirrored copies a component from its place in a `wget -x` mirror of
// the upstream release URLs, checked against the mirrored upstream
// checksum file, which must be there: it is the only thing that vouches
// for the content.
func copyMirrored(ctx context.Context, src, bundle string, d Download) (File, error) {
	from := filepath.Join(src, filepath.FromSlash(MirrorPath(d.URL)))
	sumPath := filepath.Join(src, filepath.FromSlash(MirrorPath(d.SHA256URL)))
	if _, err := os.Stat(from); err != nil {
		return File{}, fmt.Errorf("--from-dir %s has neither %s nor the mirrored %s (see docs/offline-bundle.md): %w", src, d.Path, MirrorPath(d.URL), err)
	}
	cf, err := fsutil.OpenRegular(sumPath)
	if err != nil {
		return File{}, fmt.Errorf("--from-dir %s: %s needs its mirrored checksum file: %w", src, MirrorPath(d.URL), err)
	}
	want, err := parseChecksum(cf, path.Base(d.URL))
	cf.Close()
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", sumPath, err)
	}
	f, err := copyFile(ctx, from, bundle, d.Path)
	if err != nil {
		return f, err
	}
	if f.SHA256 != want {
		return f, fmt.Errorf("%s: sha256 %s != %s from %s", from, f.SHA256, want, sumPath)
	}
	return f, nil
}

// copyFile streams from into bundle/rel (mode 0644, parents 0755) and
// writes its sidecar.
func copyFile(ctx context.Context, from, bundle, rel string) (File, error) {
	if err := validRel(rel); err != nil {
		return File{}, err
	}
	in, err := fsutil.OpenRegular(from)
	if err != nil {
		return File{}, err
	}
	defer in.Close()
	dst := filepath.Join(bundle, filepath.FromSlash(rel))
	if err := mkdirs(bundle, path.Dir(rel)); err != nil {
		return File{}, err
	}
	cr := &countReader{r: in}
	sum, _, err := writeStream(ctx, dst, cr, 0o644, "", false)
	if err != nil {
		return File{}, fmt.Errorf("copy %s: %w", from, err)
	}
	return File{Path: rel, SHA256: sum, Size: cr.n}, writeSidecar(dst, sum)
}

// mkdirs creates rel's directories under root with mode 0755 regardless
// of the umask, so two builds have the same modes.
func mkdirs(root, rel string) error {
	if rel == "." || rel == "" {
		return nil
	}
	d := root
	for _, c := range strings.Split(rel, "/") {
		d = filepath.Join(d, c)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func writeSidecar(p, sum string) error {
	_, err := fsutil.WriteFile(p+".sha256", []byte(sum+"  "+filepath.Base(p)+"\n"), 0o644)
	if err != nil {
		return err
	}
	return os.Chmod(p+".sha256", 0o644)
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Package image owns the worker image: assembling it from a Debian or
// Ubuntu archive's signed binary packages without root, chroot or
// maintainer scripts (build.go, unpack.go, configure.go), packing a tree
// into a reproducible OCI image layout with its lock file and SPDX SBOM
// (pack.go, oci.go, lock.go, sbom.go), packing an existing rootfs the same
// way (rootfs.go), the contract a worker image must meet and checking an
// image against it (contract.go, check.go), and choosing the default image
// when the config names none (default.go).
package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/Azure/aks-flex-node/internal/image/deb"
)

// Options are the inputs of Build.
type Options struct {
	Spec *Spec
	// Arch overrides the spec's arch; "" is the spec's, else this host's.
	Arch string
	// Mirror overrides the spec's mirror.
	Mirror string
	// Lock, when set, is built exactly: no index is read, each package
	// file is fetched by its path and checked against the lock's SHA-256.
	Lock *Lock
	// OutputDir must be absent or empty.
	OutputDir string
	// CacheDir keeps fetched indexes and packages by SHA-256 across
	// builds; "" uses a temp dir removed afterwards.
	CacheDir string
	Get      deb.Getter
	// Tool names the builder in the image history and the SBOM.
	Tool string
	// Log receives one line per step; nil drops them.
	Log func(string)
	Now func() time.Time
	// NotBefore refuses a signed Release dated before it when the build
	// resolves: the SourceDate of the lock this build replaces, so that a
	// mirror cannot roll the package set back. Zero checks nothing.
	NotBefore time.Time
}

// Result is what Build made.
type Result struct {
	Dir      string
	Digest   string // the image manifest digest
	Tag      string
	Layer    layerInfo
	Lock     *Lock
	Packages int
}

// Ref is the oci-layout:// reference of the built image.
func (r *Result) Ref() string { return "oci-layout://" + r.Dir + ":" + r.Tag }

// builder is one build in progress.
type builder struct {
	o     Options
	spec  *Spec
	arch  string
	tree  *Tree
	debs  []*unpacked
	notes []string
	mu    sync.Mutex
}

func (b *builder) log(format string, a ...any) {
	if b.o.Log != nil {
		b.o.Log(fmt.Sprintf(format, a...))
	}
}

func (b *builder) note(s string) {
	b.mu.Lock()
	b.notes = append(b.notes, s)
	b.mu.Unlock()
	b.log("  %s", s)
}

// Build assembles the image the spec describes (or exactly the lock's
// packages) and writes the OCI layout, worker.lock.json and the SBOM into
// o.OutputDir. The output is assembled next to it and renamed into place.
func Build(ctx context.Context, o Options) (*Result, error) {
	b := &builder{o: o, spec: o.Spec, tree: NewTree()}
	b.arch = o.Arch
	switch {
	case b.arch == "" && o.Spec.Arch != "":
		b.arch = o.Spec.Arch
	case b.arch == "":
		b.arch = runtime.GOARCH
	case o.Spec.Arch != "" && o.Spec.Arch != b.arch:
		return nil, fmt.Errorf("--arch %s disagrees with the spec's arch %s", b.arch, o.Spec.Arch)
	}
	if !archRE().MatchString(b.arch) {
		return nil, fmt.Errorf("arch %q is not amd64 or arm64", b.arch)
	}
	mirror := o.Mirror
	if mirror == "" {
		mirror = o.Spec.Mirror
	}
	if mirror == "" {
		return nil, errors.New("no mirror: the spec names none; give --mirror URL (the archive root holding dists/ and pool/)")
	}
	if o.Get == nil {
		return nil, errors.New("no fetcher")
	}
	cache := o.CacheDir
	if cache == "" {
		tmp, err := os.MkdirTemp("", "aks-flex-node-image-cache-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		cache = tmp
	}
	m := &deb.Mirror{URL: strings.TrimRight(mirror, "/"), Get: o.Get, CacheDir: cache, Now: o.Now,
		NotBefore: o.NotBefore, MaxAge: time.Duration(o.Spec.MaxReleaseAgeDays) * 24 * time.Hour}
	lock := o.Lock
	if lock == nil {
		var err error
		if lock, err = b.resolve(ctx, m); err != nil {
			return nil, err
		}
	} else if err := b.checkLock(lock); err != nil {
		return nil, err
	}
	files, err := b.fetch(ctx, m, lock)
	if err != nil {
		return nil, err
	}
	return b.assemble(ctx, lock, files)
}

// checkLock refuses a lock made for another build, or one that lacks a
// package the spec asks for.
func (b *builder) checkLock(l *Lock) error {
	if err := l.check(b.spec, b.arch); err != nil {
		return fmt.Errorf("--lock: %w", err)
	}
	have := map[string]string{}
	for _, p := range l.Packages {
		have[p.Name] = p.Version
	}
	for _, req := range b.spec.Packages {
		name, ver, _ := strings.Cut(req, "=")
		if v, ok := have[name]; !ok || (ver != "" && v != ver) {
			return fmt.Errorf("--lock: the spec asks for %s, which the lock does not hold: build without --lock to resolve the set again", req)
		}
	}
	return nil
}

// resolve reads the signed indexes and resolves the spec's packages to a
// lock.
func (b *builder) resolve(ctx context.Context, m *deb.Mirror) (*Lock, error) {
	start := time.Now()
	keyring, err := deb.LoadKeyring(b.spec.keyring())
	if err != nil {
		return nil, err
	}
	rel, relSum, err := m.Release(ctx, b.spec.Suite, keyring)
	if err != nil {
		return nil, err
	}
	b.log("InRelease of %s %s (%s) verified: signed by %s", b.spec.Distribution, b.spec.Suite, rel.Date.Format(time.RFC3339), rel.Signer)
	var all []*deb.Package
	for _, c := range b.spec.Components {
		pkgs, err := m.Index(ctx, b.spec.Suite, rel, c, b.arch)
		if err != nil {
			return nil, err
		}
		all = append(all, pkgs...)
	}
	set, err := deb.NewUniverse(all).Resolve(b.spec.Packages, true)
	if err != nil {
		return nil, err
	}
	l := &Lock{SchemaVersion: LockSchemaVersion, Distribution: b.spec.Distribution, Suite: b.spec.Suite, Arch: b.arch,
		SourceDate: rel.Date, InReleaseSHA256: relSum}
	for _, p := range set {
		l.Packages = append(l.Packages, &LockedPackage{Name: p.Name, Version: p.Version, Architecture: p.Architecture,
			Source: p.Source, Component: p.Component, Filename: p.Filename, SHA256: p.SHA256, Size: p.Size})
	}
	l.sort()
	b.log("resolved %d packages from %d in the indexes in %s", len(l.Packages), len(all), time.Since(start).Round(time.Millisecond))
	return l, nil
}

// fetchers bounds parallel downloads from the mirror.
const fetchers = 4

// fetch returns the verified local path of every package file of the
// lock (from the cache, or downloaded into it).
func (b *builder) fetch(ctx context.Context, m *deb.Mirror, l *Lock) ([]string, error) {
	start := time.Now()
	files := make([]string, len(l.Packages))
	errs := make([]error, len(l.Packages))
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < fetchers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := l.Packages[i]
				files[i], errs[i] = m.Fetch(ctx, p.Filename, deb.FileSum{SHA256: p.SHA256, Size: p.Size})
			}
		}()
	}
	for i := range l.Packages {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var total int64
	for _, p := range l.Packages {
		total += p.Size
	}
	b.log("%d package files (%.1f MB) verified in %s", len(files), float64(total)/1e6, time.Since(start).Round(time.Millisecond))
	return files, nil
}

// assemble unpacks, configures and packs the image, then writes the
// output dir.
func (b *builder) assemble(ctx context.Context, l *Lock, files []string) (*Result, error) {
	out := filepath.Clean(b.o.OutputDir)
	tmp, err := newOutputDir(out)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	sp, err := newSpool(tmp)
	if err != nil {
		return nil, err
	}
	defer sp.Close()
	start := time.Now()
	if b.debs, err = readDebs(ctx, sp, l.Packages, files); err != nil {
		return nil, err
	}
	for _, u := range b.debs {
		for _, n := range b.apply(u) {
			b.note(n)
		}
	}
	b.log("unpacked %d packages into %d entries in %s", len(b.debs), b.tree.Len(), time.Since(start).Round(time.Millisecond))
	if err := b.configure(); err != nil {
		return nil, err
	}
	res, err := b.write(tmp, l)
	if err != nil {
		return nil, err
	}
	if err := finish(tmp, out, l.SourceDate); err != nil {
		return nil, err
	}
	res.Dir = out
	return res, nil
}

// write packs the tree and writes the layout, the lock and the SBOM into
// dir.
func (b *builder) write(dir string, l *Lock) (*Result, error) {
	start := time.Now()
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	layer, err := writeLayer(b.tree, l.SourceDate, blobs)
	if err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	b.log("packed %d entries: %.1f MB, %.1f MB gzipped (%s) in %s", layer.Entries, float64(layer.Uncompressed)/1e6, float64(layer.Size)/1e6, layer.Digest, time.Since(start).Round(time.Millisecond))
	version := fmt.Sprintf("%s-%s", b.spec.Suite, l.SourceDate.UTC().Format("20060102"))
	digest, err := writeLayout(dir, layer, imageMeta{
		Title: b.spec.Name, Description: b.spec.Description, Version: version, Arch: b.arch,
		Created: l.SourceDate, Tag: b.spec.tag(),
		CreatedBy: fmt.Sprintf("%s image build (%d %s %s packages)", b.tool(), len(l.Packages), b.spec.Distribution, b.spec.Suite),
	})
	if err != nil {
		return nil, err
	}
	lockData, err := l.Marshal()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, LockFileName), lockData, 0o644); err != nil {
		return nil, err
	}
	var pkgs []sbomPackage
	for _, u := range b.debs {
		pkgs = append(pkgs, sbomPackage{Name: u.pkg.Name, Version: u.pkg.Version, Arch: u.pkg.Architecture, Source: u.pkg.Source,
			SHA256: u.pkg.SHA256, Maintainer: u.control.Paragraph.Get("Maintainer")})
	}
	sbom, err := makeSBOM(b.spec.Name, digest, layer.Digest, l.SourceDate, b.tool(), b.spec.Distribution, b.spec.Distribution+"-"+b.spec.Suite, pkgs)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, SBOMFileName), sbom, 0o644); err != nil {
		return nil, err
	}
	return &Result{Digest: digest, Tag: b.spec.tag(), Layer: layer, Lock: l, Packages: len(l.Packages)}, nil
}

func (b *builder) tool() string {
	if b.o.Tool != "" {
		return b.o.Tool
	}
	return "aks-flex-node"
}

// newOutputDir checks that out is absent or empty and makes the temp dir
// next to it that the output is assembled in.
func newOutputDir(out string) (string, error) {
	if des, err := os.ReadDir(out); err == nil && len(des) > 0 {
		return "", fmt.Errorf("output dir %s is not empty: give a new or empty directory", out)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("output dir %s: %w", out, err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-")
}

// finish gives every file and directory of tmp a fixed mode and mtime,
// so a copy or archive of the output is the same for the same build too,
// and renames tmp to out.
func finish(tmp, out string, mtime time.Time) error {
	err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		return err
	}
	if err := os.Remove(out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("output dir %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	return filepath.WalkDir(out, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, mtime, mtime)
	})
}

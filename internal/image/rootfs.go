package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/Azure/aks-flex-node/internal/image/deb"
)

// RootfsOptions are the inputs of PackRootfs.
type RootfsOptions struct {
	// Dir is the tree to pack, as the build machine sees it.
	Dir       string
	OutputDir string
	// Name, Description and Tag describe the image (Tag default "worker").
	Name, Description, Tag string
	Arch                   string // "" is this host's
	// Created is every entry's mtime and the image's creation time.
	Created time.Time
	Tool    string
	Log     func(string)
}

// PackRootfs packs an existing root file system (one a user built with
// their own tools) the same deterministic way Build packs its tree:
// sorted entries, one mtime, numeric owners and modes as they are on
// disk, hard links kept. The SBOM lists the packages the tree's dpkg
// status database holds, if it has one. No lock is written: nothing was
// resolved.
func PackRootfs(ctx context.Context, o RootfsOptions) (*Result, error) {
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if !archRE().MatchString(o.Arch) {
		return nil, fmt.Errorf("arch %q is not amd64 or arm64", o.Arch)
	}
	if o.Tag == "" {
		o.Tag = "worker"
	}
	if o.Name == "" {
		o.Name = "worker image from " + filepath.Base(o.Dir)
	}
	start := time.Now()
	t, err := treeFromDir(ctx, o.Dir)
	if err != nil {
		return nil, err
	}
	log := func(format string, a ...any) {
		if o.Log != nil {
			o.Log(fmt.Sprintf(format, a...))
		}
	}
	log("read %d entries from %s in %s", t.Len(), o.Dir, time.Since(start).Round(time.Millisecond))
	out := filepath.Clean(o.OutputDir)
	tmp, err := newOutputDir(out)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	blobs := filepath.Join(tmp, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	layer, err := writeLayer(t, o.Created, blobs)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", o.Dir, err)
	}
	log("packed %d entries: %.1f MB, %.1f MB gzipped (%s)", layer.Entries, float64(layer.Uncompressed)/1e6, float64(layer.Size)/1e6, layer.Digest)
	tool := o.Tool
	if tool == "" {
		tool = "aks-flex-node"
	}
	digest, err := writeLayout(tmp, layer, imageMeta{Title: o.Name, Description: o.Description, Version: o.Created.UTC().Format("20060102"),
		Arch: o.Arch, Created: o.Created, Tag: o.Tag, CreatedBy: tool + " image build --from-rootfs"})
	if err != nil {
		return nil, err
	}
	pkgs, err := dpkgStatus(o.Dir)
	if err != nil {
		return nil, err
	}
	sbom, err := makeSBOM(o.Name, digest, layer.Digest, o.Created, tool, "", "", pkgs)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, SBOMFileName), sbom, 0o644); err != nil {
		return nil, err
	}
	if err := finish(tmp, out, o.Created); err != nil {
		return nil, err
	}
	return &Result{Dir: out, Digest: digest, Tag: o.Tag, Layer: layer, Packages: len(pkgs)}, nil
}

// treeFromDir reads the tree below dir (not following links) into a
// Tree whose file contents are read from dir when packed.
func treeFromDir(ctx context.Context, dir string) (*Tree, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	t := NewTree()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		t.Put("/", &Node{Type: tar.TypeDir, Mode: int64(fi.Mode().Perm()), UID: int(st.Uid), GID: int(st.Gid)})
	}
	inodes := map[[2]uint64]int{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n, err := nodeFromInfo(p, fi, inodes, t)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if n != nil {
			t.Put("/"+filepath.ToSlash(rel), n)
		}
		return nil
	})
	return t, err
}

func nodeFromInfo(p string, fi fs.FileInfo, inodes map[[2]uint64]int, t *Tree) (*Node, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("no stat")
	}
	m := fi.Mode()
	n := &Node{Mode: int64(m.Perm()), UID: int(st.Uid), GID: int(st.Gid)}
	if m&fs.ModeSetuid != 0 {
		n.Mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n.Mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n.Mode |= 0o1000
	}
	switch {
	case m.IsDir():
		n.Type = tar.TypeDir
	case m.IsRegular():
		n.Type, n.Size, n.Content = tar.TypeReg, fi.Size(), HostFile(p)
		if st.Nlink > 1 {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if inodes[key] == 0 {
				inodes[key] = t.linkGroup()
			}
			n.LinkID = inodes[key]
		}
	case m&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return nil, err
		}
		n.Type, n.Link = tar.TypeSymlink, target
	case m&fs.ModeNamedPipe != 0:
		n.Type = tar.TypeFifo
	case m&fs.ModeDevice != 0:
		n.Type = tar.TypeBlock
		if m&fs.ModeCharDevice != 0 {
			n.Type = tar.TypeChar
		}
		n.Major, n.Minor = int64(unix.Major(uint64(st.Rdev))), int64(unix.Minor(uint64(st.Rdev)))
	default:
		return nil, nil // sockets: made by whoever listens, at run time
	}
	return n, nil
}

// dpkgStatus lists the installed packages of the tree's dpkg database,
// if it has one.
func dpkgStatus(dir string) ([]sbomPackage, error) {
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(path.Join(dpkgDir, "status"))))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []sbomPackage
	err = deb.ParseParagraphs("status", bytes.NewReader(data), func(p *deb.Paragraph) error {
		if f := p.Get("Status"); len(f) < len("installed") || f[len(f)-len("installed"):] != "installed" {
			return nil
		}
		src := p.Get("Source")
		if i := bytes.IndexByte([]byte(src), ' '); i >= 0 {
			src = src[:i]
		}
		out = append(out, sbomPackage{Name: p.Get("Package"), Version: p.Get("Version"), Arch: p.Get("Architecture"), Source: src, Maintainer: p.Get("Maintainer")})
		return nil
	})
	return out, err
}

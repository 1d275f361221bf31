package artifact

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sync/errgroup"

	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/node/nodedirs"
	"github.com/Azure/aks-flex-node/internal/task"
)

const (
	binMode   fs.FileMode = 0o755
	imageMode fs.FileMode = 0o644
)

type installer struct {
	ctx         context.Context
	dir         string
	machineRoot string
	log         *slog.Logger
	files       atomic.Int64 // files are installed concurrently
	changed     atomic.Int64
}

// Install verifies the bundle in dir (integrity only: compare versions
// with the config through Verify first) and then installs it into the
// machine rootfs machineRoot, where the node package says they go:
// kubelet, kubectl, kube-proxy, containerd's bin/* and crictl into nodedirs.Bin, runc
// into nodedirs.Sbin, the CNI plugins into nodedirs.CNIBin, and image
// archives into nodedirs.ImageArchives. Nothing is
// written unless the whole bundle verifies. Writes are atomic, and a file
// that already has the wanted content and mode is left alone, so a re-run
// reports Changed=false. Directories are resolved inside machineRoot and
// written through an os.Root there, so links in the rootfs (even ones a
// running machine swaps in while we work) cannot redirect a write to the
// host.
func Install(ctx context.Context, dir, machineRoot string, log *slog.Logger) (task.Result, error) {
	m, ps := verify(ctx, dir, Components{}, runtime.GOARCH)
	if len(ps) > 0 {
		return task.Result{}, fmt.Errorf("verify bundle %s: %w", dir, Problems(ps))
	}
	return InstallVerified(ctx, dir, m, machineRoot, log)
}

// InstallVerified is Install for a bundle this process has just verified
// (m is the manifest Verify read from dir), so a start hashes the bundle
// once before installing instead of again here. It still hashes every
// byte it installs, and content that does not match m replaces nothing:
// a file changed since it was verified is refused naming it.
func InstallVerified(ctx context.Context, dir string, m *Manifest, machineRoot string, log *slog.Logger) (task.Result, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if fi, err := os.Stat(machineRoot); err != nil || !fi.IsDir() {
		return task.Result{}, fmt.Errorf("machine rootfs %s does not exist: provision the machine first", machineRoot)
	}
	if err := removeStaleTemps(machineRoot); err != nil {
		return task.Result{}, err
	}
	in := &installer{dir: dir, machineRoot: machineRoot, log: log}
	// Made once, before the files are installed side by side, so no two
	// of them race to create the same directory.
	for _, d := range installDirs {
		r, err := in.target(d)
		if err != nil {
			return task.Result{}, err
		}
		r.Close()
	}
	// Installing is CPU-bound (gunzip and SHA-256 of every byte), so the
	// files go side by side, one per processor: on 2 cores this halves the
	// warm join's install-node-components. The first error cancels the rest;
	// each file is renamed into place only whole, so a cancelled one leaves
	// its old content (and a temp file the next install removes).
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.NumCPU())
	in.ctx = gctx
	for _, f := range m.Files {
		g.Go(func() error {
			if err := in.install(f); err != nil {
				return fmt.Errorf("install %s: %w", f.Path, err)
			}
			return nil
		})
	}
	err := g.Wait()
	res := task.Result{Changed: in.changed.Load() > 0}
	if err != nil {
		return res, err
	}
	res.Detail = fmt.Sprintf("%d files from %s in %s, %d changed", in.files.Load(), dir, machineRoot, in.changed.Load())
	return res, nil
}

// install puts one bundle file where the node package says it goes.
func (in *installer) install(f File) error {
	switch f.Component {
	case Kubelet, Kubectl, KubeProxy:
		return in.file(f, nodedirs.Bin, path.Base(f.Path), binMode)
	case Runc:
		return in.file(f, nodedirs.Sbin, "runc", binMode)
	case Containerd:
		return in.tarball(f, nodedirs.Bin, func(name string) (string, bool) {
			rest, ok := strings.CutPrefix(name, "bin/")
			return rest, ok && rest != "" && !strings.Contains(rest, "/")
		})
	case CNI, Crictl:
		dst := nodedirs.CNIBin
		if f.Component == Crictl {
			dst = nodedirs.Bin
		}
		return in.tarball(f, dst, func(name string) (string, bool) {
			return name, !strings.Contains(name, "/")
		})
	case ImageFile:
		return in.file(f, nodedirs.ImageArchives, path.Base(f.Path), imageMode)
	}
	return nil
}

// installDirs are the machine directories Install writes into.
var installDirs = []string{nodedirs.Bin, nodedirs.Sbin, nodedirs.CNIBin, nodedirs.ImageArchives}

// removeStaleTemps removes the temp files an install killed half-way left
// next to their targets (writeTemp's ".<name>.tmp-*"): a re-run renames
// new ones into place and would leave those behind for good. Installs run
// under the node lock (start holds it), so no other install is writing
// one of them now. Each directory is opened confined to the rootfs, so a
// link in the machine cannot point the removal at the host.
func removeStaleTemps(machineRoot string) error {
	for _, dir := range installDirs {
		d, err := fsroot.OpenDir(machineRoot, dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		err = removeTempsIn(d)
		d.Close()
		if err != nil {
			return fmt.Errorf("remove a killed install's temp files in %s: %w", dir, err)
		}
	}
	return nil
}

func removeTempsIn(d *os.Root) error {
	f, err := d.Open(".")
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if ok, _ := filepath.Match(".*.tmp-*", n); !ok {
			continue
		}
		if err := d.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// target resolves machine directory dir inside the rootfs, creating it,
// and opens it confined to the rootfs. The caller closes it.
func (in *installer) target(dir string) (*os.Root, error) {
	return fsroot.MkdirOpen(in.machineRoot, dir, 0o755)
}

func (in *installer) file(f File, dir, name string, mode fs.FileMode) error {
	d, err := in.target(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	open := func() (io.ReadCloser, error) {
		return fsutil.OpenRegular(filepath.Join(in.dir, filepath.FromSlash(f.Path)))
	}
	return in.place(d, name, open, mode, f.SHA256)
}

// tarball installs the executable regular members pick accepts. A tarball
// that yields none is an error: the bundle is not what it says. Members
// are unpacked to temp files next to their targets and renamed into place
// only after the whole tarball hashed to the manifest's checksum, so a
// tarball changed since it was verified installs nothing.
func (in *installer) tarball(f File, dir string, pick func(name string) (string, bool)) error {
	src := filepath.Join(in.dir, filepath.FromSlash(f.Path))
	fh, err := fsutil.OpenRegular(src)
	if err != nil {
		return err
	}
	defer fh.Close()
	d, err := in.target(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	type member struct{ tmp, name, sum string }
	var staged []member
	defer func() {
		for _, s := range staged {
			d.Remove(s.tmp) // a no-op once renamed
		}
	}()
	// Hash while reading: what is unpacked must be what was verified.
	hr := newHashReader(fh)
	zr, err := gzip.NewReader(hr)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Mode&0o111 == 0 {
			continue // LICENSE, README.md, directories
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		base, ok := pick(name)
		if !ok || base == "." || base == ".." || strings.HasPrefix(name, "/") || strings.HasPrefix(name, "../") {
			continue
		}
		tmp, sum, err := writeTemp(in.ctx, d, base, tr, binMode)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		staged = append(staged, member{tmp, base, sum})
	}
	// Drain through the hash: bytes after the tar end count too.
	if _, err := io.Copy(io.Discard, hr); err != nil {
		return err
	}
	if got := hr.Sum(); got != f.SHA256 {
		return fmt.Errorf("changed after verification: sha256 %s != manifest %s; nothing from it was installed", got, f.SHA256)
	}
	if len(staged) == 0 {
		return fmt.Errorf("no executables found in the tarball")
	}
	for _, s := range staged {
		in.files.Add(1)
		if same, err := sameFileIn(in.ctx, d, s.name, binMode, s.sum); err != nil {
			return err
		} else if same {
			continue
		}
		if err := d.Rename(s.tmp, s.name); err != nil {
			return err
		}
		in.changed.Add(1)
		in.log.Debug("installed", "path", filepath.Join(d.Name(), s.name), "sha256", s.sum)
	}
	return nil
}

// place makes name in d hold the content open yields with mode. When
// wantHex is known, a file that already matches is skipped without
// reading the source, and content that does not hash to it is refused.
// The new content goes to a temp file beside name and is renamed over it
// (a symlink at name is replaced, not followed).
func (in *installer) place(d *os.Root, name string, open func() (io.ReadCloser, error), mode fs.FileMode, wantHex string) error {
	in.files.Add(1)
	if wantHex != "" {
		if same, err := sameFileIn(in.ctx, d, name, mode, wantHex); err != nil {
			return err
		} else if same {
			return nil
		}
	}
	r, err := open()
	if err != nil {
		return err
	}
	defer r.Close()
	got, changed, err := writeStreamIn(in.ctx, d, name, r, mode, wantHex, wantHex == "")
	if err != nil {
		var me *MismatchError
		if errors.As(err, &me) {
			return fmt.Errorf("changed after verification: sha256 %s != manifest %s", me.Got, me.Want)
		}
		return err
	}
	if changed {
		in.changed.Add(1)
		in.log.Debug("installed", "path", filepath.Join(d.Name(), name), "sha256", got)
	}
	return nil
}

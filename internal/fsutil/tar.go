package fsutil

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsroot"
)

// ExtractOptions select what ExtractTar does beyond plain files, dirs and
// links.
type ExtractOptions struct {
	// Whiteouts applies OCI layer semantics: ".wh.<name>" deletes <name>
	// from lower layers and ".wh..wh..opq" empties its directory of
	// everything lower layers put there. Without it such entries are
	// ordinary files.
	Whiteouts bool
	// Devices creates character and block devices and fifos (a machine
	// rootfs). Without it those entries are skipped: an artifact tarball
	// has no business shipping them.
	Devices bool
	// NoChown keeps the extracting user as owner. Otherwise, when running
	// as root, entries get the archive's uid/gid.
	NoChown bool
	// Verify, when set, is called once the archive's end-of-archive
	// marker has been read, before any directory metadata is applied. An
	// error stops the extraction there. It is where a caller that hashes
	// the stream while it is extracted (an image layer) checks the digest:
	// until then the archive's content exists only as files and
	// directories inside dest, which the caller throws away on error.
	Verify func() error
}

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// ExtractTar unpacks the tar stream r into the directory dest, which must
// exist.
//
// Nothing is ever written outside dest:
//   - entry names that are absolute or contain a ".." component are
//     rejected;
//   - parent directories are resolved and created by fsroot: a symlink met
//     on the way is resolved as it would be inside a chroot at dest
//     (absolute targets from dest, ".." clamped at dest), never by the
//     kernel, so "a -> /etc" followed by "a/passwd" writes dest/etc/passwd;
//   - the entry itself is created with O_NOFOLLOW after removing whatever
//     was there, so an existing symlink is replaced, not written through;
//   - a symlink whose target, read relative to the directory the link
//     really is in (its parent resolved as above, not its archive name),
//     climbs above dest is rejected, as is a hardlink to anything outside
//     dest;
//   - directory metadata (mode, owner, times, xattrs), applied once every
//     entry is in place, goes through file descriptors opened component
//     by component with O_NOFOLLOW from dest: a directory that a later
//     entry replaced (by a symlink, say) is skipped, never followed.
//
// Absolute symlink targets are kept verbatim: inside a machine rootfs they
// resolve inside the machine.
func ExtractTar(r io.Reader, dest string, opts ExtractOptions) error {
	fi, err := os.Stat(dest)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("extract: %s is not a directory", dest)
	}
	x := &extractor{
		root:     filepath.Clean(dest),
		opts:     opts,
		chown:    !opts.NoChown && os.Geteuid() == 0,
		written:  map[string]bool{},
		dirIndex: map[string]int{},
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("extract into %s: read tar: %w", dest, err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return fmt.Errorf("extract into %s: %s: %w", dest, hdr.Name, err)
		}
	}
	if opts.Verify != nil {
		if err := opts.Verify(); err != nil {
			return fmt.Errorf("extract into %s: %w", dest, err)
		}
	}
	return x.finish()
}

// dirMeta is a directory's deferred metadata. rel is where the directory
// was created, relative to the root with every link resolved ("" for the
// root itself), so finish can reach it again without following a link.
type dirMeta struct {
	rel string
	hdr *tar.Header
}

type extractor struct {
	root  string
	opts  ExtractOptions
	chown bool
	// written holds every archive path (cleaned, relative) this extraction
	// created, plus their parents, so whiteouts only remove what lower
	// layers put there (OCI image-spec, "Whiteouts").
	written map[string]bool
	dirs    []dirMeta
	// dirIndex finds a queued directory by rel: a second entry for the
	// same directory replaces the first's metadata, as it would on disk.
	dirIndex map[string]int
}

// cleanName turns an archive name into a clean relative path, "" for the
// root itself.
func cleanName(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	if strings.HasPrefix(name, "/") {
		return "", errors.New("absolute path in archive")
	}
	if strings.ContainsRune(name, 0) {
		return "", errors.New("NUL in name")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", errors.New("'..' in archive path")
		}
	}
	p := path.Clean(name)
	if p == "." {
		return "", nil
	}
	return p, nil
}

func (x *extractor) markWritten(rel string) {
	for p := rel; p != "." && p != "" && p != "/"; p = path.Dir(p) {
		x.written[p] = true
	}
}

// splitRel splits a clean relative name into its directory ("" for the
// root) and base.
func splitRel(rel string) (dirRel, base string) {
	dirRel, base = path.Dir(rel), path.Base(rel)
	if dirRel == "." {
		dirRel = ""
	}
	return dirRel, base
}

// entry creates one archive member. Directory metadata waits for finish;
// everything else gets its metadata here.
func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if rel == "" {
		if hdr.Typeflag == tar.TypeDir {
			x.queueDir("", hdr)
		}
		return nil
	}
	dirRel, base := splitRel(rel)
	if x.opts.Whiteouts && strings.HasPrefix(base, whiteoutPrefix) {
		return x.whiteout(dirRel, base)
	}
	parent, err := fsroot.MkdirAll(x.root, dirRel, 0o755)
	if err != nil {
		return err
	}
	target := filepath.Join(parent, base)

	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.dir(rel, target, hdr)
	case tar.TypeLink:
		return x.hardlink(rel, target, hdr.Linkname)
	case tar.TypeReg, tar.TypeGNUSparse:
		err = regular(target, r)
	case tar.TypeSymlink:
		err = x.symlink(parent, target, hdr.Linkname)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if !x.opts.Devices {
			return nil
		}
		err = device(target, hdr)
	case tar.TypeXHeader, tar.TypeXGlobalHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return nil // consumed by archive/tar; never returned in practice
	default:
		return fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
	if err != nil {
		return err
	}
	x.markWritten(rel)
	return x.meta(target, hdr)
}

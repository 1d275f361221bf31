package machine

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/image"
	aflayout "github.com/Azure/aks-flex-node/internal/layout"
)

// The layer cache: every layer a machine was provisioned from, unpacked
// once, keyed by its diff ID, under the layout's LayerCacheDir:
//
//	<diff ID hex>/tree/         the layer's files, as extracted (whiteouts
//	                            kept as .wh. files, applied when a rootfs
//	                            is made)
//	<diff ID hex>/index.json    every entry of tree with its type, mode,
//	                            owner, size and mtime, and each regular
//	                            file's stamp (artifact.FileStamp: device,
//	                            inode, size, mtime, ctime); written last,
//	                            so an entry without it is incomplete
//
// A layer is extracted into the cache while its uncompressed stream is
// hashed, and the entry is renamed into place only when the hash is the
// diff ID the digest-verified config names. A rootfs is then made from
// the cache (materialize.go) without decompressing anything. The index is
// also what preflight checks the image contract on when the layers are
// cached, and what every cached file is checked against before it is
// linked or copied again (materialize.go).
//
// The stamp's ctime catches a file written in place even with its size
// and mtime put back (ctime cannot be set from user space). Linking a
// file, or removing a link to it, moves its ctime too: the machines'
// rootfs made by hard links do that on every provision and removal. So
// those two re-stamp the entries they linked or unlinked afterwards
// (restamp), after first dropping any entry that no longer matches
// (dropChanged), so that a change made before is not blessed by it.

// MaxLayerCacheBytes bounds the unpacked size of the layers no machine
// uses any more: past it the least recently used of them are removed.
// The layers of the machines' current images are always kept.
const MaxLayerCacheBytes int64 = 2 << 30

const (
	cacheTree  = "tree"
	cacheIndex = "index.json"
)

// indexEntry is one entry of a cached layer.
type indexEntry struct {
	Path  string `json:"p"` // relative to the tree, slash-separated
	Type  byte   `json:"t"` // a tar type flag
	Mode  uint32 `json:"m"` // permission bits with setuid, setgid, sticky
	UID   int    `json:"u"`
	GID   int    `json:"g"`
	Size  int64  `json:"s,omitempty"`
	Mtime int64  `json:"mt"` // nanoseconds
	Link  string `json:"l,omitempty"`
	Rdev  uint64 `json:"d,omitempty"`
	// Stamp is a regular file's stat as it was last made or stamped by
	// this package (its Path is empty); nil in an index from before
	// stamps, which then counts as changed.
	Stamp *artifact.FileStamp `json:"st,omitempty"`
}

// unchanged says a cached regular file whose stamp is now cur and whose
// permission bits are mode is what x recorded.
func (x *indexEntry) unchanged(cur artifact.FileStamp, mode uint32) bool {
	return x.Type == tar.TypeReg && x.Stamp != nil && cur == *x.Stamp && mode == x.Mode
}

// cacheEntry is one complete cached layer.
type cacheEntry struct {
	DiffID  string       `json:"diffID"`
	Size    int64        `json:"size"`
	Entries []indexEntry `json:"entries"`
	dir     string
}

func (e *cacheEntry) tree() string { return filepath.Join(e.dir, cacheTree) }

// layerCache is the cache of one layout.
type layerCache struct {
	layout aflayout.Layout
	dir    string // as this process opens it
	log    *slog.Logger
}

func newLayerCache(l aflayout.Layout, log *slog.Logger) *layerCache {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &layerCache{layout: l, dir: l.OnRoot(l.LayerCacheDir()), log: log}
}

func (c *layerCache) entryDir(diffID v1.Hash) string { return filepath.Join(c.dir, diffID.Hex) }

// get returns the cached entry for diffID, or nil when there is none.
func (c *layerCache) get(diffID v1.Hash) (*cacheEntry, error) {
	dir := c.entryDir(diffID)
	b, err := os.ReadFile(filepath.Join(dir, cacheIndex))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e := &cacheEntry{dir: dir}
	if err := json.Unmarshal(b, e); err != nil || e.DiffID != diffID.String() {
		// Not ours to trust: drop it, it is filled again.
		c.log.Warn("layer cache entry unreadable; removing it", "dir", dir, "err", err)
		return nil, os.RemoveAll(dir)
	}
	return e, nil
}

// fill extracts layer l into the cache, checking its uncompressed stream
// against diffID (extractLayer), and returns the entry.
func (c *layerCache) fill(l v1.Layer, diffID v1.Hash) (e *cacheEntry, err error) {
	if _, serr := os.Lstat(c.dir); errors.Is(serr, fs.ErrNotExist) {
		// A failed first fill leaves no empty cache behind.
		defer func() {
			if err != nil {
				_ = os.Remove(c.dir)
			}
		}()
	}
	if err := fsutil.MkdirAll(c.dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(c.dir, ".tmp-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	tree := filepath.Join(tmp, cacheTree)
	if err := os.Mkdir(tree, 0o755); err != nil {
		return nil, err
	}
	if err := extractLayerTo(l, diffID, tree, false); err != nil {
		return nil, err
	}
	e = &cacheEntry{DiffID: diffID.String()}
	if e.Entries, e.Size, err = indexTree(tree); err != nil {
		return nil, fmt.Errorf("index %s: %w", tree, err)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if _, err := fsutil.WriteFile(filepath.Join(tmp, cacheIndex), b, 0o600); err != nil {
		return nil, err
	}
	dir := c.entryDir(diffID)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	e.dir = dir
	return e, nil
}

// indexTree lists every entry below root (not root itself) in walk
// order, which puts a directory before what it holds, and sums the sizes
// of the regular files.
func indexTree(root string) ([]indexEntry, int64, error) {
	var out []indexEntry
	var size int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat", p)
		}
		rel, _ := filepath.Rel(root, p)
		e := indexEntry{Path: filepath.ToSlash(rel), Mode: uint32(modeBits(fi.Mode())), UID: int(st.Uid), GID: int(st.Gid), Mtime: fi.ModTime().UnixNano()}
		m := fi.Mode()
		switch {
		case m.IsDir():
			e.Type = tar.TypeDir
		case m.IsRegular():
			e.Type, e.Size = tar.TypeReg, fi.Size()
			size += fi.Size()
			if st, ok := artifact.StampOf("", fi); ok {
				e.Stamp = &st
			}
		case m&fs.ModeSymlink != 0:
			e.Type = tar.TypeSymlink
			if e.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case m&fs.ModeNamedPipe != 0:
			e.Type = tar.TypeFifo
		case m&fs.ModeCharDevice != 0:
			e.Type, e.Rdev = tar.TypeChar, uint64(st.Rdev)
		case m&fs.ModeDevice != 0:
			e.Type, e.Rdev = tar.TypeBlock, uint64(st.Rdev)
		default:
			return nil // a socket: nothing an image carries
		}
		out = append(out, e)
		return nil
	})
	return out, size, err
}

// modeBits is the permission bits of m with setuid, setgid and sticky
// in their Unix places.
func modeBits(m fs.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		b |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		b |= syscall.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		b |= syscall.S_ISVTX
	}
	return b
}

// addToTree adds the entry's files to a contract tree, whiteouts applied.
func (e *cacheEntry) addToTree(t *image.Tree) error {
	for _, x := range e.Entries {
		h := &tar.Header{Name: x.Path, Typeflag: x.Type, Mode: int64(x.Mode), Uid: x.UID, Gid: x.GID, Size: x.Size, Linkname: x.Link}
		if err := t.AddHeader(h); err != nil {
			return err
		}
	}
	return nil
}

// touch records that the entry was just used (its directory's mtime),
// for the size bound's least-recently-used order.
func (e *cacheEntry) touch() {
	now := time.Now()
	_ = os.Chtimes(e.dir, now, now)
}

// layersRecord is where the diff IDs of machine name's rootfs are kept,
// next to its image record: the cache entries it uses.
func layersRecord(l aflayout.Layout, name string) string {
	return l.OnRoot(l.MachineStateDir() + "/" + name + ".layers")
}

// gc removes what a crash left half-filled and, while the cache is larger
// than max bytes, the least recently used entries that no machine's
// rootfs was made from.
func (c *layerCache) gc(l aflayout.Layout, max int64) error {
	des, err := os.ReadDir(c.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	inUse := map[string]bool{}
	for _, m := range l.Machines() {
		b, err := os.ReadFile(layersRecord(l, m))
		if err == nil {
			for _, id := range strings.Fields(string(b)) {
				inUse[strings.TrimPrefix(id, "sha256:")] = true
			}
		}
	}
	type cand struct {
		name string
		size int64
		used time.Time
	}
	var cands []cand
	var total int64
	for _, de := range des {
		p := filepath.Join(c.dir, de.Name())
		if strings.HasPrefix(de.Name(), ".tmp-") {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			continue
		}
		e, err := c.get(v1.Hash{Algorithm: "sha256", Hex: de.Name()})
		if err != nil || e == nil {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			continue
		}
		total += e.Size
		if !inUse[de.Name()] {
			fi, _ := de.Info()
			cands = append(cands, cand{de.Name(), e.Size, fi.ModTime()})
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].used.Before(cands[j].used) })
	for _, cd := range cands {
		if total <= max {
			break
		}
		if err := os.RemoveAll(filepath.Join(c.dir, cd.name)); err != nil {
			return err
		}
		total -= cd.size
		c.log.Info("removed unused layer from the cache (size bound)", "diffID", "sha256:"+cd.name, "bytes", cd.size)
	}
	return nil
}

// RemoveLayerCache removes the layer cache. Machines made from it keep
// their files (hard links hold them); the next provision extracts the
// layers again.
func RemoveLayerCache(l aflayout.Layout) (bool, error) {
	dir := l.OnRoot(l.LayerCacheDir())
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("remove layer cache %s: %w", dir, err)
	}
	return true, nil
}

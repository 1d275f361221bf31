package machine

import (
	"archive/tar"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	aflayout "github.com/Azure/aks-flex-node/internal/layout"
)

// layerIDs are the diff IDs machine name's rootfs was made from (its
// layers record); none without one.
func layerIDs(l aflayout.Layout, name string) []string {
	b, err := os.ReadFile(layersRecord(l, name))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// entries are the cached entries of ids that are there (and readable).
func (c *layerCache) entries(ids []string) []*cacheEntry {
	var out []*cacheEntry
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		h, err := v1.NewHash(id)
		if err != nil {
			continue
		}
		if e, err := c.get(h); err == nil && e != nil {
			out = append(out, e)
		}
	}
	return out
}

// stampNow is the stamp of a cached regular file as it is now.
func (e *cacheEntry) stampNow(x *indexEntry) (artifact.FileStamp, uint32, bool) {
	fi, err := os.Lstat(filepath.Join(e.tree(), filepath.FromSlash(x.Path)))
	if err != nil || !fi.Mode().IsRegular() {
		return artifact.FileStamp{}, 0, false
	}
	st, ok := artifact.StampOf("", fi)
	return st, modeBits(fi.Mode()), ok
}

// dropChanged removes the entries of ids one of whose files is not what
// the index recorded: they are extracted again when next needed.
func (c *layerCache) dropChanged(ids []string) error {
	for _, e := range c.entries(ids) {
		for i := range e.Entries {
			x := &e.Entries[i]
			if x.Type != tar.TypeReg {
				continue
			}
			if st, mode, ok := e.stampNow(x); !ok || !x.unchanged(st, mode) {
				c.log.Warn("cached layer changed since it was extracted; removing it", "diffID", e.DiffID, "path", x.Path)
				if err := os.RemoveAll(e.dir); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// restamp records the stamps the entries of ids' files have now: after
// this package linked or unlinked them (which moves their ctime), once
// dropChanged or materialize's checks passed them.
func (c *layerCache) restamp(ids []string) error {
	for _, e := range c.entries(ids) {
		for i := range e.Entries {
			x := &e.Entries[i]
			if x.Type != tar.TypeReg {
				continue
			}
			st, _, ok := e.stampNow(x)
			if !ok {
				// Gone or replaced: not the layer any more.
				if err := os.RemoveAll(e.dir); err != nil {
					return err
				}
				break
			}
			x.Stamp = &st
		}
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if _, err := os.Stat(e.dir); err != nil {
			continue // removed above
		}
		if _, err := fsutil.WriteFile(filepath.Join(e.dir, cacheIndex), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsroot"
)

// whiteout applies ".wh.<name>" or ".wh..wh..opq" in dirRel (OCI
// image-spec, "Whiteouts"): a layer deletes what lower layers put in the
// tree, never what it wrote itself.
func (x *extractor) whiteout(dirRel, base string) error {
	dir, err := fsroot.Resolve(x.root, dirRel)
	if err != nil {
		return err
	}
	if base == whiteoutOpaque {
		return x.opaque(dir, dirRel)
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("invalid whiteout %q", base)
	}
	if x.written[path.Join(dirRel, name)] {
		return nil // whiteouts hide lower layers, not this one
	}
	return replace(filepath.Join(dir, name))
}

// opaque removes from dir everything this extraction did not write.
func (x *extractor) opaque(dir, dirRel string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		rel := path.Join(dirRel, e.Name())
		p := filepath.Join(dir, e.Name())
		switch {
		case !x.written[rel]:
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		case e.IsDir():
			if err := x.opaque(p, rel); err != nil {
				return err
			}
		}
	}
	return nil
}

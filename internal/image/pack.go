package image

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
)

// layerCompression is the gzip level of the image layer: level 1 packs
// a Debian worker tree about four times faster than the default for a
// layer about a tenth larger, and unpacking (what every start pays) is as
// fast either way.
const layerCompression = gzip.BestSpeed

// layerInfo describes a packed layer.
type layerInfo struct {
	Digest       string // sha256:... of the gzip bytes
	DiffID       string // sha256:... of the tar bytes
	Size         int64  // gzip bytes
	Uncompressed int64
	Entries      int
}

// writeLayer packs t as one gzip tar layer into blobsDir (an OCI
// layout's blobs/sha256), named by its digest. Entries are sorted, every
// mtime is mtime, owners are numeric only, and the gzip header carries
// no name or time: the same tree gives the same bytes.
func writeLayer(t *Tree, mtime time.Time, blobsDir string) (layerInfo, error) {
	tmp, err := os.CreateTemp(blobsDir, ".layer-")
	if err != nil {
		return layerInfo{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	compressed := &countHash{h: sha256.New()}
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, compressed), 1<<20)
	zw, err := gzip.NewWriterLevel(bw, layerCompression)
	if err != nil {
		return layerInfo{}, err
	}
	raw := &countHash{h: sha256.New()}
	n, err := writeTar(io.MultiWriter(zw, raw), t, mtime)
	if err != nil {
		return layerInfo{}, err
	}
	if err := zw.Close(); err != nil {
		return layerInfo{}, err
	}
	if err := bw.Flush(); err != nil {
		return layerInfo{}, err
	}
	if err := tmp.Close(); err != nil {
		return layerInfo{}, err
	}
	info := layerInfo{Digest: "sha256:" + compressed.sum(), DiffID: "sha256:" + raw.sum(), Size: compressed.n, Uncompressed: raw.n, Entries: n}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return layerInfo{}, err
	}
	return info, os.Rename(tmp.Name(), filepath.Join(blobsDir, compressed.sum()))
}

// writeTar writes every entry of t (but "/") to w in path order.
func writeTar(w io.Writer, t *Tree, mtime time.Time) (int, error) {
	tw := tar.NewWriter(w)
	mtime = mtime.UTC().Truncate(time.Second)
	first := map[int]string{} // hard-link group -> the path written as a file
	paths := t.Paths()
	for _, p := range paths {
		n := t.Get(p)
		h := &tar.Header{
			Name:     strings.TrimPrefix(p, "/"),
			Mode:     n.Mode,
			Uid:      n.UID,
			Gid:      n.GID,
			ModTime:  mtime,
			Typeflag: n.Type,
		}
		switch n.Type {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = n.Link
		case tar.TypeChar, tar.TypeBlock:
			h.Devmajor, h.Devminor = n.Major, n.Minor
		case tar.TypeReg:
			if n.LinkID != 0 {
				if f, ok := first[n.LinkID]; ok {
					h.Typeflag, h.Linkname = tar.TypeLink, strings.TrimPrefix(f, "/")
					break
				}
				first[n.LinkID] = p
			}
			h.Size = n.Size
		}
		if err := tw.WriteHeader(h); err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg && n.Size > 0 {
			if err := copyContent(tw, n, p); err != nil {
				return 0, err
			}
		}
	}
	return len(paths), tw.Close()
}

func copyContent(w io.Writer, n *Node, p string) error {
	if n.Content == nil {
		return fmt.Errorf("%s: no content", p)
	}
	rc, err := n.Content.Open()
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	defer rc.Close()
	got, err := io.CopyN(w, rc, n.Size)
	if err != nil {
		return fmt.Errorf("%s: %d of %d bytes: %w", p, got, n.Size, err)
	}
	return nil
}

// countHash hashes and counts what is written to it.
type countHash struct {
	h hash.Hash
	n int64
}

func (c *countHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

func (c *countHash) sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

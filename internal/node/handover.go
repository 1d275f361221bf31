package node

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"

	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// identityFiles are the files outside the PKI dir that carry the node's
// identity: the kubeconfig the kubelet wrote after its TLS bootstrap,
// with a bootstrap token or an Azure identity alike.
var identityFiles = []string{KubeletKubeconf}

// maxIdentityFile bounds each file HandOver copies.
const maxIdentityFile = 1 << 20

// HandOver makes the node's identity in the machine at toRoot the one in
// the machine at fromRoot: the kubelet's PKI dir (its client certificate
// and key, their current-certificate link, its serving certificate) and
// its kubeconfig, so the kubelet on the new side of a repave is the same
// node, never a new one. Entries of the PKI dir the old side does not
// have are removed (a side kept from an earlier repave holds stale ones).
// Reads and writes are confined to each rootfs, regular files and links
// only; the old side must be stopped (its kubelet rotates certificates).
func HandOver(fromRoot, toRoot string) (changed bool, err error) {
	src, err := fsroot.OpenDir(fromRoot, KubeletPKIDir)
	if err != nil {
		return false, fmt.Errorf("open %s in %s: %w", KubeletPKIDir, fromRoot, err)
	}
	defer src.Close()
	entries, err := fs.ReadDir(src.FS(), ".")
	if err != nil {
		return false, fmt.Errorf("read %s in %s: %w", KubeletPKIDir, fromRoot, err)
	}
	var names []string
	for _, e := range entries {
		p := path.Join(KubeletPKIDir, e.Name())
		var c bool
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, err := src.Readlink(e.Name())
			if err != nil {
				return changed, err
			}
			c, err = fsutil.SymlinkIn(toRoot, p, target)
			if err != nil {
				return changed, err
			}
		case e.Type().IsRegular():
			if c, err = copyIn(fromRoot, toRoot, p); err != nil {
				return changed, err
			}
		default:
			continue
		}
		names = append(names, e.Name())
		changed = changed || c
	}
	if !slices.ContainsFunc(names, func(n string) bool { return path.Join(KubeletPKIDir, n) == KubeletClientCert }) {
		return changed, fmt.Errorf("machine %s has no %s: its kubelet never joined", fromRoot, KubeletClientCert)
	}
	removed, err := removeOthers(toRoot, names)
	changed = changed || removed
	if err != nil {
		return changed, err
	}
	for _, p := range identityFiles {
		c, err := copyIn(fromRoot, toRoot, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return changed, err
		}
		changed = changed || c
	}
	return changed, nil
}

// copyIn copies the regular file p from the tree at fromRoot to the one
// at toRoot, with its mode, unless it already holds the same.
func copyIn(fromRoot, toRoot, p string) (bool, error) {
	f, err := fsutil.OpenIn(fromRoot, p)
	if err != nil {
		return false, err
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return false, err
	}
	data, err := fsutil.ReadFileIn(fromRoot, p, maxIdentityFile)
	if err != nil {
		return false, err
	}
	c, err := fsutil.WriteFileIn(toRoot, p, data, fi.Mode().Perm())
	if err != nil {
		return false, fmt.Errorf("hand over %s: %w", p, err)
	}
	return c, nil
}

// removeOthers removes the entries of the PKI dir at toRoot not in keep.
func removeOthers(toRoot string, keep []string) (bool, error) {
	dst, err := fsroot.OpenDir(toRoot, KubeletPKIDir)
	if err != nil {
		return false, err
	}
	entries, err := fs.ReadDir(dst.FS(), ".")
	dst.Close()
	if err != nil {
		return false, err
	}
	removed := false
	for _, e := range entries {
		if slices.Contains(keep, e.Name()) {
			continue
		}
		r, err := fsutil.RemoveIn(toRoot, path.Join(KubeletPKIDir, e.Name()))
		if err != nil {
			return removed, err
		}
		removed = removed || r
	}
	return removed, nil
}

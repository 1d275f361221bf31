package artifact

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"

	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/node/nodedirs"
)

// A converged re-run must not re-hash hundreds of megabytes of node
// components. After a successful verify and install, start records a stamp
// of every bundle file and every installed file: device, inode, size,
// mtime and ctime. When all of them are unchanged the bundle is not hashed again.
// ctime cannot be set back by a user, so any rewrite of a file, even one
// that restores its mtime, breaks the stamp and forces a full verification
// (within the kernel's timestamp granularity, a few milliseconds).

const componentsStamp = "components.stamp"

// stampFile also records the component versions the config asked for:
// changing one must re-run the version check against the manifest.
type stampFile struct {
	Bundle string      `json:"bundle"`
	Want   Components  `json:"want"`
	Files  []FileStamp `json:"files"`
}

// FileStamp is a file's stat as a verification record keeps it: a file
// rewritten in place no longer matches, even with its size and mtime put
// back, because ctime cannot be set from user space. The machine
// package's layer cache records its files the same way.
type FileStamp struct {
	Path string `json:"path"`
	// Link is where a link in the bundle points; the rest is its target's.
	Link  string `json:"link,omitempty"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime"`
	Ctime int64  `json:"ctime"`
	Ino   uint64 `json:"ino"`
	// Dev: the same inode number on another filesystem (a bundle dir
	// remounted or replaced by a mount) is another file.
	Dev uint64 `json:"dev"`
}

// StampOf is the stamp of the file at p whose stat fi is (false when fi
// has no Unix stat).
func StampOf(p string, fi fs.FileInfo) (FileStamp, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileStamp{}, false
	}
	return FileStamp{Path: p, Size: fi.Size(), Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: st.Ino, Dev: uint64(st.Dev)}, true //nolint:unconvert // Dev is uint32 on some arches
}

// stampBundle stats every file of the bundle in dir, as Verify reads it.
// The root is resolved first: WalkDir does not descend into a root that
// is a link (a bundle dir /srv/bundles/current pointing at a version
// dir), which would stamp no file at all and let any change through. The
// resolved paths are recorded, so re-pointing the link breaks the stamp.
// Links inside the bundle are followed, as Verify follows them, and
// stamped as their target; one that does not lead to a regular file
// cannot be stamped, and the bundle is then verified in full every time.
func stampBundle(dir string) ([]FileStamp, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	var out []FileStamp
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var fi fs.FileInfo
		link := ""
		switch {
		case d.IsDir():
			return nil
		case p == filepath.Join(root, StagedMarker):
			// Ours, written after verification; not bundle content.
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
			if fi, err = os.Stat(p); err != nil {
				return fmt.Errorf("bundle link %s: %w", p, err)
			}
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("bundle link %s -> %s: not a regular file", p, link)
			}
		case d.Type().IsRegular():
			if fi, err = d.Info(); err != nil {
				return err
			}
		default:
			return nil
		}
		st, ok := StampOf(p, fi)
		if !ok {
			return fmt.Errorf("%s: no stat data", p)
		}
		st.Link = link
		out = append(out, st)
		return nil
	})
	return out, err
}

// stampComponents stamps the bundle in bundleDir and what was installed
// from it into the machine, sorted.
func (s *Stager) stampComponents(bundleDir string) ([]FileStamp, error) {
	b, err := stampBundle(bundleDir)
	if err != nil {
		return nil, err
	}
	return s.withInstalled(b)
}

// withInstalled adds the installed files' stamps to the bundle's, sorted.
func (s *Stager) withInstalled(b []FileStamp) ([]FileStamp, error) {
	roots, err := installedRoots(s.MachineRoot)
	if err != nil {
		return nil, err
	}
	inst, err := stampTrees(roots...)
	if err != nil {
		return nil, err
	}
	out := append(slices.Clip(b), inst...)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// stampTrees stats every regular file under the given roots, sorted.
func stampTrees(roots ...string) ([]FileStamp, error) {
	var out []FileStamp
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if st, ok := StampOf(p, fi); ok {
				out = append(out, st)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// installedRoots are where Install writes inside the machine, resolved as
// Install resolves them: a link in the rootfs cannot make the stamp
// cover a host directory.
func installedRoots(machineRoot string) ([]string, error) {
	var roots []string
	for _, d := range []string{nodedirs.Bin, nodedirs.Sbin, nodedirs.CNIBin, nodedirs.ImageArchives} {
		p, err := fsroot.Resolve(machineRoot, d)
		if err != nil {
			return nil, err
		}
		roots = append(roots, p)
	}
	return roots, nil
}

func (s *Stager) stampPath() string {
	return s.Layout.OnRoot(filepath.Join(s.Layout.StateDir(), componentsStamp))
}

// Unchanged reports whether the bundle in bundleDir and the files
// installed from it are exactly as they were when last verified for this
// bundle dir and these component versions.
func (s *Stager) Unchanged(bundleDir string) bool {
	data, err := os.ReadFile(s.stampPath())
	if err != nil {
		return false
	}
	var old stampFile
	if json.Unmarshal(data, &old) != nil || old.Bundle != bundleKey(bundleDir) || old.Want != s.Want {
		return false
	}
	cur, err := s.stampComponents(bundleDir)
	if err != nil || len(cur) != len(old.Files) {
		return false
	}
	for i := range cur {
		if cur[i] != old.Files[i] {
			return false
		}
	}
	return true
}

func (s *Stager) saveStamp(bundleDir string) error {
	// The bundle as it was verified in this run, when it was: a file
	// changed after install read it then breaks the stamp.
	var files []FileStamp
	var err error
	if v := s.verified; v != nil && v.dir == bundleKey(bundleDir) && v.want == s.Want {
		files, err = s.withInstalled(v.stamp)
	} else {
		files, err = s.stampComponents(bundleDir)
	}
	if err != nil {
		return err
	}
	data, err := json.Marshal(stampFile{Bundle: bundleKey(bundleDir), Want: s.Want, Files: files})
	if err != nil {
		return err
	}
	if err := s.track(filepath.Join(s.Layout.StateDir(), componentsStamp)); err != nil {
		return err
	}
	if _, err = fsutil.WriteFile(s.stampPath(), data, 0o600); err != nil {
		return err
	}
	s.recordVerified() // now that there is a state dir
	return nil
}

package bootstrap

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// A converged re-run must not re-hash hundreds of megabytes of node
// components. After a successful verify and install, start records a stamp
// of every bundle file and every installed file: size, mtime, ctime and
// inode. When all of them are unchanged the bundle is not hashed again.
// ctime cannot be set back by a user, so any rewrite of a file, even one
// that restores its mtime, breaks the stamp and forces a full verification
// (within the kernel's timestamp granularity, a few milliseconds).

const componentsStamp = "components.stamp"

// stampFile also records the component versions the config asked for:
// changing one must re-run the version check against the manifest.
type stampFile struct {
	Bundle string              `json:"bundle"`
	Want   artifact.Components `json:"want"`
	Files  []fileStamp         `json:"files"`
}

type fileStamp struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime"`
	Ctime int64  `json:"ctime"`
	Ino   uint64 `json:"ino"`
}

// stampTrees stats every regular file under the given roots, sorted.
func stampTrees(roots ...string) ([]fileStamp, error) {
	var out []fileStamp
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
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return nil
			}
			out = append(out, fileStamp{Path: p, Size: fi.Size(), Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: st.Ino})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// installedRoots are where artifact.Install writes inside the machine.
func installedRoots(machineRoot string) []string {
	var roots []string
	for _, d := range []string{"usr/local/bin", "usr/local/sbin", "opt/cni/bin", "var/lib/aks-flex-node/images"} {
		roots = append(roots, filepath.Join(machineRoot, d))
	}
	return roots
}

func (p *Pipeline) stampPath() string {
	return p.Layout.OnRoot(filepath.Join(p.Layout.StateDir, componentsStamp))
}

// componentsUnchanged reports whether the bundle and the installed files
// are exactly as they were when last verified for this bundle dir.
func (p *Pipeline) componentsUnchanged(bundleDir string) bool {
	data, err := os.ReadFile(p.stampPath())
	if err != nil {
		return false
	}
	var old stampFile
	if json.Unmarshal(data, &old) != nil || old.Bundle != bundleDir || old.Want != p.components() {
		return false
	}
	cur, err := stampTrees(append([]string{bundleDir}, installedRoots(p.machineRoot())...)...)
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

func (p *Pipeline) saveComponentsStamp(bundleDir string) error {
	files, err := stampTrees(append([]string{bundleDir}, installedRoots(p.machineRoot())...)...)
	if err != nil {
		return err
	}
	data, err := json.Marshal(stampFile{Bundle: bundleDir, Want: p.components(), Files: files})
	if err != nil {
		return err
	}
	if err := p.track(filepath.Join(p.Layout.StateDir, componentsStamp)); err != nil {
		return err
	}
	_, err = fsutil.WriteFile(p.stampPath(), data, 0o600)
	return err
}

package node

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Checksum is what the state records of a rendered file: "sha256:<hex>"
// of its bytes and mode, or "link:<target>" of a link. The mode is part of
// it: a kubeconfig made world-readable has drifted too.
func Checksum(f File) string {
	if f.Link != "" {
		return "link:" + f.Link
	}
	return contentSum(f.Data, f.Mode.Perm())
}

func contentSum(data []byte, perm fs.FileMode) string {
	h := sha256.New()
	fmt.Fprintf(h, "%04o\n", perm)
	h.Write(data)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Checksums are the checksums of files by path inside the machine: what
// start records, and the only files drift repair ever touches.
func Checksums(files []File) map[string]string {
	out := make(map[string]string, len(files))
	for _, f := range files {
		out[f.Path] = Checksum(f)
	}
	return out
}

// Drift is one recorded file that is not as recorded.
type Drift struct {
	Path string
	// How is "edited" (content, mode or link target differ) or "deleted".
	How string
}

// FindDrift compares the files recorded in sums with what the machine
// rootfs at machineRoot holds, sorted by path. Only recorded paths are
// looked at: a file the agent did not write is never drift. Reads are
// confined to machineRoot.
func FindDrift(machineRoot string, sums map[string]string) ([]Drift, error) {
	paths := make([]string, 0, len(sums))
	for p := range sums {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var out []Drift
	for _, p := range paths {
		got, err := onDisk(machineRoot, p, strings.HasPrefix(sums[p], "link:"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out = append(out, Drift{Path: p, How: "deleted"})
		case err != nil:
			return nil, fmt.Errorf("check %s in machine %s: %w", p, machineRoot, err)
		case got != sums[p]:
			out = append(out, Drift{Path: p, How: "edited"})
		}
	}
	return out, nil
}

// onDisk is the checksum of p in the tree at root, as Checksum makes it.
func onDisk(root, p string, link bool) (string, error) {
	r, err := fsroot.OpenDir(root, path.Dir(p))
	if err != nil {
		return "", err
	}
	defer r.Close()
	base := path.Base(p)
	fi, err := r.Lstat(base)
	if err != nil {
		return "", err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := r.Readlink(base)
		if err != nil {
			return "", err
		}
		return "link:" + target, nil
	}
	if link || !fi.Mode().IsRegular() {
		return fi.Mode().Type().String(), nil
	}
	data, err := fsutil.ReadFileIn(root, p, 16<<20)
	if err != nil {
		return "", err
	}
	return contentSum(data, fi.Mode().Perm()), nil
}

// ErrRenderingChanged means the agent's rendering of a file is no longer
// what start recorded (the config changed and start has not run since):
// restoring it would apply a config nobody applied. Start applies it.
var ErrRenderingChanged = errors.New("the config renders it differently from what start recorded; run aks-flex-node start to apply the config")

// Restore writes file f back into the machine rootfs at machineRoot,
// atomically, when its rendering still has checksum want. A non-link in
// the place of a link is removed first.
func Restore(machineRoot string, f File, want string) error {
	if Checksum(f) != want {
		return fmt.Errorf("restore %s: %w", f.Path, ErrRenderingChanged)
	}
	if f.Link == "" {
		_, err := fsutil.WriteFileIn(machineRoot, f.Path, f.Data, f.Mode)
		return err
	}
	if _, err := fsutil.SymlinkIn(machineRoot, f.Path, f.Link); err == nil {
		return nil
	}
	if _, err := fsutil.RemoveIn(machineRoot, f.Path); err != nil {
		return err
	}
	_, err := fsutil.SymlinkIn(machineRoot, f.Path, f.Link)
	return err
}

// UnitOf is the unit inside the machine that reads the file at p, which
// a repair restarts ("" for none: containerd reads the CNI config when a
// pod starts). UnitFile says whether p is a unit file or its enabling
// link, after whose repair systemd reloads.
func UnitOf(p string) (unit string, unitFile bool) {
	switch p {
	case ContainerdUnitFile, wantsDir + "/" + ContainerdUnitName:
		return ContainerdUnitName, true
	case KubeletUnitFile, wantsDir + "/" + KubeletUnitName:
		return KubeletUnitName, true
	case CgroupRWUnitFile, wantsDir + "/" + CgroupRWUnitName:
		return CgroupRWUnitName, true
	case KubeProxyUnitFile, wantsDir + "/" + KubeProxyUnitName:
		return KubeProxyUnitName, true
	case KubeProxyConfigFile:
		return KubeProxyUnitName, false
	case ContainerdConfig:
		return ContainerdUnitName, false
	case KubeletConfigFile, BootstrapKubeconf, KubeletKubeconf, ClusterCAFile:
		return KubeletUnitName, false
	case CgroupRWScript:
		return CgroupRWUnitName, false
	}
	return "", false
}

// KeptUnits are the units inside the machine the agent keeps active, for
// a node whose recorded files are sums: containerd and the kubelet, and
// kube-proxy when start wrote its unit (networking.kubeProxy "agent").
func KeptUnits(sums map[string]string) []string {
	units := []string{ContainerdUnitName, KubeletUnitName}
	if _, ok := sums[KubeProxyUnitFile]; ok {
		units = append(units, KubeProxyUnitName)
	}
	return units
}

package node

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Write renders the node files for c and writes them into the machine
// rootfs at machineRoot, each atomically and only when its content, mode
// or link target differs: a converged re-run changes nothing. It enables
// the units by linking them into multi-user.target.wants, and removes the
// cgroup v1 remount unit and script when the host is not (or no longer)
// cgroup v1. files lists every path Write manages, as seen inside the
// machine, changed or not (what an uninstall would remove); changed says
// whether anything was written or removed. Errors never contain the token.
func Write(machineRoot string, c *config.Config, opts Options) (changed bool, files []string, err error) {
	if machineRoot == "" {
		return false, nil, errors.New("write node files: empty machine root")
	}
	rendered, err := Render(c, opts)
	if err != nil {
		return false, nil, err
	}
	o, _ := opts.withDefaults() // Render checked it
	for _, f := range rendered {
		host := filepath.Join(machineRoot, f.Path)
		var ch bool
		if f.Link != "" {
			ch, err = writeSymlink(host, f.Link)
		} else {
			ch, err = fsutil.WriteFile(host, f.Data, f.Mode)
		}
		if err != nil {
			return changed, files, fmt.Errorf("write %s in machine %s: %w", f.Path, machineRoot, err)
		}
		changed = changed || ch
		files = append(files, f.Path)
	}
	identity := c.Azure.Identity()
	for _, p := range staleFiles(o, identity) {
		removed, err := fsutil.RemoveIfExists(filepath.Join(machineRoot, p))
		if err != nil {
			return changed, files, fmt.Errorf("remove %s in machine %s: %w", p, machineRoot, err)
		}
		changed = changed || removed
	}
	if !identity {
		// The kubelet writes kubelet.conf itself after its TLS bootstrap;
		// one that runs the plugin is what an identity join left, and the
		// kubelet would take it over the bootstrap token.
		removed, err := removePluginKubeconfig(filepath.Join(machineRoot, KubeletKubeconf))
		if err != nil {
			return changed, files, fmt.Errorf("remove %s in machine %s: %w", KubeletKubeconf, machineRoot, err)
		}
		changed = changed || removed
	}
	return changed, files, nil
}

// removePluginKubeconfig removes path when it is the kubeconfig that runs
// the credential plugin.
func removePluginKubeconfig(path string) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !bytes.Contains(data, []byte(CredentialPlugin)) {
		return false, nil
	}
	return fsutil.RemoveIfExists(path)
}

// writeSymlink makes path a symlink to target unless it already is one. A
// new link is made beside it under a temporary name and renamed over the
// old, so path is never missing. An existing non-link is an error: it is
// someone else's file, not a link to replace.
func writeSymlink(path, target string) (changed bool, err error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		if cur, err := os.Readlink(path); err != nil {
			return false, err
		} else if cur == target {
			return false, nil
		}
	case err == nil:
		return false, fmt.Errorf("%s exists and is not a symlink", path)
	case !errors.Is(err, fs.ErrNotExist):
		return false, err
	}
	if err := fsutil.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return false, err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-"+hex.EncodeToString(rnd[:]))
	if err := os.Symlink(target, tmp); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	return true, nil
}

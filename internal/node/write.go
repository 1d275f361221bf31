package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsroot"
	"github.com/Azure/aks-flex-node/internal/fsutil"
)

// Write renders the node files for c and writes them into the machine
// rootfs at machineRoot, each atomically and only when its content, mode
// or link target differs: a converged re-run changes nothing. It enables
// the units by linking them into multi-user.target.wants, and removes the
// cgroup v1 remount unit and script when the host is not (or no longer)
// cgroup v1. Every write and removal is confined to machineRoot: links in
// the rootfs are resolved as the machine sees them (fsutil.WriteFileIn),
// so a rootfs with "etc/kubernetes -> /host/dir" gets the bootstrap
// kubeconfig in <machineRoot>/host/dir, never on the host. files lists
// every path Write manages, as seen inside the machine, changed or not
// (what an uninstall would remove); changed says whether anything was
// written or removed. Errors never contain the token.
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
		var ch bool
		if f.Link != "" {
			ch, err = fsutil.SymlinkIn(machineRoot, f.Path, f.Link)
		} else {
			ch, err = fsutil.WriteFileIn(machineRoot, f.Path, f.Data, f.Mode)
		}
		if err != nil {
			return changed, files, fmt.Errorf("write %s in machine %s: %w", f.Path, machineRoot, err)
		}
		changed = changed || ch
		files = append(files, f.Path)
	}
	if c.Networking.ClusterCNI() {
		// The cluster's CNI installs its config here (its plugins go to
		// nodedirs.CNIBin, which the bundle's install made): the dir
		// containerd watches exists before the kubelet starts, with the
		// mode a DaemonSet's hostPath mount expects.
		if _, err := fsroot.MkdirAll(machineRoot, CNIConfDir, 0o755); err != nil {
			return changed, files, fmt.Errorf("make %s in machine %s: %w", CNIConfDir, machineRoot, err)
		}
	}
	for _, p := range staleFiles(o, c.Networking.ClusterCNI(), c.Networking.AgentKubeProxy()) {
		removed, err := fsutil.RemoveIn(machineRoot, p)
		if err != nil {
			return changed, files, fmt.Errorf("remove %s in machine %s: %w", p, machineRoot, err)
		}
		changed = changed || removed
	}
	// The kubelet writes kubelet.conf itself after its TLS bootstrap; one
	// that runs the plugin is what an identity join of an earlier version
	// left (its kubelet signed every request as the identity), and a
	// kubelet would keep using it instead of bootstrapping a certificate.
	removed, err := removePluginKubeconfig(machineRoot)
	if err != nil {
		return changed, files, fmt.Errorf("remove %s in machine %s: %w", KubeletKubeconf, machineRoot, err)
	}
	changed = changed || removed
	return changed, files, nil
}

// removePluginKubeconfig removes the kubelet's kubeconfig in machineRoot
// when it is the one that runs the credential plugin.
func removePluginKubeconfig(machineRoot string) (bool, error) {
	data, err := fsutil.ReadFileIn(machineRoot, KubeletKubeconf, 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !bytes.Contains(data, []byte(CredentialPlugin)) {
		return false, nil
	}
	return fsutil.RemoveIn(machineRoot, KubeletKubeconf)
}

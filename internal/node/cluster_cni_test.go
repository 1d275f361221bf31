package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
)

// networking.mode cluster: Write leaves the network config to the
// cluster's CNI. A bridge config from an earlier bridge-mode start goes
// (containerd would load it before a cluster's config that sorts after
// it), and the conf dir the CNI DaemonSet writes into exists, empty.
func TestWriteClusterModeLeavesCNIToTheCluster(t *testing.T) {
	root := t.TempDir()
	c := testConfig()
	c.Networking.PodCIDR = "10.244.3.0/24"
	if _, _, err := Write(root, c, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, CNIConfFile)); err != nil {
		t.Fatalf("bridge mode with a pod CIDR: %v", err)
	}
	c.Networking.PodCIDR = ""
	c.Networking.Mode = config.NetworkModeCluster
	changed, files, err := Write(root, c, Options{})
	if err != nil || !changed {
		t.Fatalf("cluster mode: changed %v, %v", changed, err)
	}
	for _, f := range files {
		if f == CNIConfFile {
			t.Errorf("cluster mode manages %s", f)
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, CNIConfDir))
	if err != nil || len(entries) != 0 {
		t.Fatalf("%s in cluster mode: %v, %v; want an empty dir", CNIConfDir, entries, err)
	}
	if fi, _ := os.Stat(filepath.Join(root, CNIConfDir)); fi.Mode().Perm() != 0o755 {
		t.Errorf("%s mode %v, want 0755", CNIConfDir, fi.Mode().Perm())
	}
	// What the cluster's CNI writes stays: a re-run changes nothing.
	if err := os.WriteFile(filepath.Join(root, CNIConfDir, "10-cluster.conflist"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, _, err := Write(root, c, Options{}); err != nil || changed {
		t.Errorf("re-run: changed %v, %v; want converged", changed, err)
	}
	if _, err := os.Stat(filepath.Join(root, CNIConfDir, "10-cluster.conflist")); err != nil {
		t.Errorf("the cluster's config: %v", err)
	}
}

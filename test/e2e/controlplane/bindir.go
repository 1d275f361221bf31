package controlplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// BinDirEnv overrides where FindBinDir looks for the binaries.
const BinDirEnv = "AKS_FLEX_NODE_K8S_BIN_DIR"

// Components are the binaries ../build-k8s.sh builds. Start needs the first
// four; kubelet, kubectl and kube-proxy are for tests that join nodes.
var Components = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "kube-proxy"}

// FindBinDir returns the directory holding the built components: $BinDirEnv
// when set, else the cache directory ../build-k8s.sh --print-dir names for
// the current cmd/go.mod, cmd/go.sum and mains. It does not build; it fails, saying
// what to run, when any of need (default: all Components) is missing.
func FindBinDir(need ...string) (string, error) {
	if len(need) == 0 {
		need = Components
	}
	dir := os.Getenv(BinDirEnv)
	from := "$" + BinDirEnv
	if dir == "" {
		_, self, _, ok := runtime.Caller(0)
		if !ok {
			return "", errors.New("find bin dir: cannot locate the controlplane package source; set $" + BinDirEnv)
		}
		script := filepath.Join(filepath.Dir(self), "..", "build-k8s.sh")
		out, err := exec.Command("bash", script, "--print-dir").Output()
		if err != nil {
			return "", fmt.Errorf("find bin dir: %s --print-dir: %w", script, err)
		}
		dir = filepath.Join(strings.TrimSpace(string(out)), "bin")
		from = script + " --print-dir"
	}
	var missing []string
	for _, name := range need {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("find bin dir: %s (from %s) lacks %s; build them with test/e2e/build-k8s.sh (about 15 minutes cold)",
			dir, from, strings.Join(missing, ", "))
	}
	return dir, nil
}

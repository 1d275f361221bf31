package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
)

// install-service and uninstall-service change the node (they write units
// and restart the agent), so they wait for the node lock like start does,
// and name its holder when they give up.
func TestServiceCommandsTakeTheNodeLock(t *testing.T) {
	root := t.TempDir()
	cfg, err := os.ReadFile(aclExample)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/aks-flex-node"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, layout.ConfigFile), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := layout.New(root, "", "")
	if err != nil {
		t.Fatal(err)
	}
	held, err := nodelock.TryAcquire(l, "start")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	for _, cmd := range []string{"install-service", "uninstall-service"} {
		_, stderr, code := run(t, cmd, "--root", root, "--lock-timeout", "0")
		if code != 1 || !strings.Contains(stderr, "node lock") || !strings.Contains(stderr, "start (pid") {
			t.Errorf("%s with the lock held: exit %d, stderr %q; want exit 1 naming the holder", cmd, code, stderr)
		}
	}
}

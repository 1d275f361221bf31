package lifecycle

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/state"
)

func TestRemoveTrackedKeepsInstallRecordAndForeignFiles(t *testing.T) {
	root := t.TempDir()
	l, err := layout.New(root, "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(hp string, dir bool) {
		full := l.OnRoot(hp)
		if dir {
			_ = os.MkdirAll(full, 0o755)
			return
		}
		_ = os.MkdirAll(filepath.Dir(full), 0o755)
		_ = os.WriteFile(full, []byte("x"), 0o644)
	}
	mk("/etc/sysctl.d/90-aks-flex-node.conf", false)
	mk("/etc/sysctl.d/other.conf", false)          // not ours
	mk("/opt/aks-flex-node/lib/agent-blue", false) // the binary: reset keeps it
	mk("/opt/aks-flex-node/lib/helper.sh", false)
	mk("/var/lib/aks-flex-node/install-record", false)
	mk("/var/log/aks-flex-node/agent.log", false)
	mk("/var/lib/aks-flex-node/identity/identity.json", false)   // secrets, and
	mk("/var/lib/aks-flex-node/identity/tokens/abc.json", false) // tokens the plugin cached
	if err := NewTracker(l).Add("/etc/sysctl.d/90-aks-flex-node.conf", "/etc/sysctl.d", "/opt/aks-flex-node/lib", "/var/log/aks-flex-node", "/var/lib/aks-flex-node", "/var/lib/aks-flex-node/identity"); err != nil {
		t.Fatal(err)
	}
	remove := RemoveTrackedPaths(l, slog.New(slog.DiscardHandler), false)
	res, err := remove.Do(context.Background())
	if err != nil || !res.Changed {
		t.Fatalf("removeTracked: %v %v", res, err)
	}
	for _, gone := range []string{"/etc/sysctl.d/90-aks-flex-node.conf", "/opt/aks-flex-node/lib/helper.sh", "/var/log/aks-flex-node", "/var/lib/aks-flex-node/identity", "/var/lib/aks-flex-node/" + state.TrackerFile} {
		if _, err := os.Lstat(l.OnRoot(gone)); !os.IsNotExist(err) {
			t.Errorf("%s not removed (%v)", gone, err)
		}
	}
	for _, kept := range []string{"/etc/sysctl.d/other.conf", "/var/lib/aks-flex-node/install-record", "/opt/aks-flex-node/lib/agent-blue"} {
		if _, err := os.Lstat(l.OnRoot(kept)); err != nil {
			t.Errorf("%s removed: %v", kept, err)
		}
	}
	// A second run has nothing to do.
	if res, err := remove.Do(context.Background()); err != nil || res.Changed {
		t.Fatalf("second removeTracked: %v %v", res, err)
	}
}

func TestDedupeDeepestFirst(t *testing.T) {
	got := strings.Join(dedupeDeepestFirst([]string{"/a", "/a/b/c", "/a", "/a/b"}), ",")
	if got != "/a/b/c,/a/b,/a" {
		t.Fatal(got)
	}
}

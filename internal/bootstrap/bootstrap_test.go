package bootstrap

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/state"
)

func TestRemoveTrackedKeepsInstallRecordAndForeignFiles(t *testing.T) {
	root := t.TempDir()
	l, err := layout.New(root, "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	p := &Pipeline{Layout: l}
	p.init()
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
	if err := p.track("/etc/sysctl.d/90-aks-flex-node.conf", "/etc/sysctl.d", "/opt/aks-flex-node/lib", "/var/log/aks-flex-node", "/var/lib/aks-flex-node"); err != nil {
		t.Fatal(err)
	}
	res, err := p.removeTracked(context.Background())
	if err != nil || !res.Changed {
		t.Fatalf("removeTracked: %v %v", res, err)
	}
	for _, gone := range []string{"/etc/sysctl.d/90-aks-flex-node.conf", "/opt/aks-flex-node/lib/helper.sh", "/var/log/aks-flex-node", "/var/lib/aks-flex-node/" + state.TrackerFile} {
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
	if res, err := p.removeTracked(context.Background()); err != nil || res.Changed {
		t.Fatalf("second removeTracked: %v %v", res, err)
	}
}

func TestHostKubeconfigResolvesLinksInsideMachine(t *testing.T) {
	mroot := t.TempDir()
	pki := filepath.Join(mroot, "var/lib/kubelet/pki")
	_ = os.MkdirAll(pki, 0o755)
	_ = os.WriteFile(filepath.Join(pki, "kubelet-client-2026.pem"), []byte("PEMDATA"), 0o600)
	// The kubelet's link is absolute inside the machine.
	if err := os.Symlink("/var/lib/kubelet/pki/kubelet-client-2026.pem", filepath.Join(pki, "kubelet-client-current.pem")); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(mroot, "kubelet.conf")
	_ = os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: "`+"Zm9v"+`"}}]
users: [{name: u, user: {client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem, client-key: /var/lib/kubelet/pki/kubelet-client-current.pem}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	rc, err := hostKubeconfig(kc, mroot)
	if err != nil {
		t.Fatal(err)
	}
	if string(rc.CertData) != "PEMDATA" || string(rc.KeyData) != "PEMDATA" || rc.Host != "https://127.0.0.1:6443" {
		t.Fatalf("rest config: host %q cert %q", rc.Host, rc.CertData)
	}
}

func TestDedupeDeepestFirst(t *testing.T) {
	got := strings.Join(dedupeDeepestFirst([]string{"/a", "/a/b/c", "/a", "/a/b"}), ",")
	if got != "/a/b/c,/a/b,/a" {
		t.Fatal(got)
	}
}

func TestComponentsStampDetectsRewrites(t *testing.T) {
	root := t.TempDir()
	l, _ := layout.New(root, "", "")
	p := &Pipeline{Layout: l, Config: &config.Config{}}
	p.init()
	bundle := filepath.Join(root, "bundle")
	_ = os.MkdirAll(bundle, 0o755)
	f := filepath.Join(bundle, "kubelet")
	_ = os.WriteFile(f, []byte("v1"), 0o755)
	if p.componentsUnchanged(bundle) {
		t.Fatal("no stamp yet, but unchanged")
	}
	if err := p.saveComponentsStamp(bundle); err != nil {
		t.Fatal(err)
	}
	if !p.componentsUnchanged(bundle) {
		t.Fatal("stamp does not match an untouched tree")
	}
	// Same size, mtime restored: ctime still moves, so it is caught.
	fi, _ := os.Stat(f)
	time.Sleep(20 * time.Millisecond) // past the kernel's coarse timestamp tick
	_ = os.WriteFile(f, []byte("v2"), 0o755)
	_ = os.Chtimes(f, fi.ModTime(), fi.ModTime())
	if p.componentsUnchanged(bundle) {
		t.Fatal("a rewritten file with its mtime restored went unnoticed")
	}
	// A new installed file in the machine is caught too.
	_ = p.saveComponentsStamp(bundle)
	mbin := filepath.Join(p.machineRoot(), "usr/local/bin")
	_ = os.MkdirAll(mbin, 0o755)
	_ = os.WriteFile(filepath.Join(mbin, "extra"), nil, 0o755)
	if p.componentsUnchanged(bundle) {
		t.Fatal("a new file in the machine went unnoticed")
	}
	// Asking for another version re-runs verification.
	_ = p.saveComponentsStamp(bundle)
	p.Config.Components.Containerd = "9.9.9"
	if p.componentsUnchanged(bundle) {
		t.Fatal("a changed component version went unnoticed")
	}
}

// A bundle dir that is a link is stamped where it points: walking the link
// itself stamps no file, and a tampered bundle would read as unchanged.
func TestComponentsStampFollowsBundleLinks(t *testing.T) {
	root := t.TempDir()
	l, _ := layout.New(root, "", "")
	p := &Pipeline{Layout: l, Config: &config.Config{}}
	p.init()
	v1, v2 := filepath.Join(root, "v1"), filepath.Join(root, "v2")
	for _, d := range []string{v1, v2} {
		_ = os.MkdirAll(d, 0o755)
		_ = os.WriteFile(filepath.Join(d, "kubelet"), []byte("k1"), 0o644)
	}
	bundle := filepath.Join(root, "current")
	_ = os.Symlink(v1, bundle)
	if err := p.saveComponentsStamp(bundle); err != nil {
		t.Fatal(err)
	}
	if !p.componentsUnchanged(bundle) {
		t.Fatal("stamp does not match an untouched tree")
	}
	time.Sleep(20 * time.Millisecond)
	_ = os.WriteFile(filepath.Join(v1, "kubelet"), []byte("k2"), 0o644)
	if p.componentsUnchanged(bundle) {
		t.Fatal("a rewritten file behind a linked bundle dir went unnoticed")
	}
	// Re-pointing the link at another tree with the same names.
	_ = p.saveComponentsStamp(bundle)
	_ = os.Remove(bundle)
	_ = os.Symlink(v2, bundle)
	if p.componentsUnchanged(bundle) {
		t.Fatal("a re-pointed bundle link went unnoticed")
	}

	// A file in the bundle that is a link is stamped as its target.
	outside := filepath.Join(root, "kubelet.real")
	_ = os.WriteFile(outside, []byte("k1"), 0o644)
	_ = os.Remove(filepath.Join(v2, "kubelet"))
	_ = os.Symlink(outside, filepath.Join(v2, "kubelet"))
	if err := p.saveComponentsStamp(bundle); err != nil {
		t.Fatal(err)
	}
	if !p.componentsUnchanged(bundle) {
		t.Fatal("stamp does not match an untouched tree with a linked file")
	}
	time.Sleep(20 * time.Millisecond)
	_ = os.WriteFile(outside, []byte("k3"), 0o644)
	if p.componentsUnchanged(bundle) {
		t.Fatal("a rewritten link target went unnoticed")
	}
	// A link that leads nowhere cannot be stamped: never "unchanged".
	_ = os.Remove(outside)
	if p.componentsUnchanged(bundle) {
		t.Fatal("a dangling link in the bundle read as unchanged")
	}
}

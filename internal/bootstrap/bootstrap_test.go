package bootstrap

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
	if err := NewTracker(l).Add("/etc/sysctl.d/90-aks-flex-node.conf", "/etc/sysctl.d", "/opt/aks-flex-node/lib", "/var/log/aks-flex-node", "/var/lib/aks-flex-node"); err != nil {
		t.Fatal(err)
	}
	remove := RemoveTrackedPaths(l, slog.New(slog.DiscardHandler))
	res, err := remove.Do(context.Background())
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
	if res, err := remove.Do(context.Background()); err != nil || res.Changed {
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
	rc, err := hostKubeconfig("/kubelet.conf", mroot)
	if err != nil {
		t.Fatal(err)
	}
	if string(rc.CertData) != "PEMDATA" || string(rc.KeyData) != "PEMDATA" || rc.Host != "https://127.0.0.1:6443" {
		t.Fatalf("rest config: host %q cert %q", rc.Host, rc.CertData)
	}

	// The machine points the key at a host file through a link that
	// climbs out for the kernel: it is read inside the machine or not at
	// all, never from the host.
	host := filepath.Join(t.TempDir(), "host-key.pem")
	_ = os.WriteFile(host, []byte("HOSTSECRET"), 0o600)
	rel, _ := filepath.Rel(pki, host)
	_ = os.Remove(filepath.Join(pki, "kubelet-client-current.pem"))
	if err := os.Symlink(rel, filepath.Join(pki, "kubelet-client-current.pem")); err != nil {
		t.Fatal(err)
	}
	rc, err = hostKubeconfig("/kubelet.conf", mroot)
	if err == nil && (string(rc.KeyData) == "HOSTSECRET" || string(rc.CertData) == "HOSTSECRET") {
		t.Fatal("read a host file through a link in the machine")
	}
}

func TestDedupeDeepestFirst(t *testing.T) {
	got := strings.Join(dedupeDeepestFirst([]string{"/a", "/a/b/c", "/a", "/a/b"}), ",")
	if got != "/a/b/c,/a/b,/a" {
		t.Fatal(got)
	}
}

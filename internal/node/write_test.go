package node

import (
	"os"
	"path/filepath"
	"testing"
)

// Issue 13, defect 3: a machine rootfs whose directories are links to
// host paths made Write put the bootstrap kubeconfig (the token), the
// units and the cgroup script on the host. Every write lands inside the
// rootfs, where the machine itself resolves those links.
func TestWriteStaysInsideHostileRootfs(t *testing.T) {
	base := t.TempDir()
	root, host := filepath.Join(base, "rootfs"), filepath.Join(base, "host")
	for _, d := range []string{root + "/etc", root + "/usr/local/lib", host} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"etc/kubernetes":              host,                // absolute: <root>/<host> in the machine
		"etc/systemd":                 "../../host",        // relative, climbs out for the kernel
		"usr/local/lib/aks-flex-node": "/../../../" + host, // ".." at the machine's / stays there
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	changed, files, err := Write(root, testConfig(), Options{CgroupV1: true})
	if err != nil || !changed {
		t.Fatalf("Write: changed %v, %v", changed, err)
	}
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("Write wrote on the host, in %s: %v", host, names)
	}
	inside := map[string]string{
		BootstrapKubeconf: filepath.Join(root, host, "bootstrap-kubelet.conf"),
		KubeletUnitFile:   filepath.Join(root, "host/system/kubelet.service"),
		CgroupRWScript:    filepath.Join(root, host, "cgroup-rw.sh"),
	}
	for p, at := range inside {
		fi, err := os.Lstat(at)
		if err != nil {
			t.Errorf("%s is not where the machine sees it (%s): %v", p, at, err)
			continue
		}
		if p == BootstrapKubeconf && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", p, fi.Mode().Perm())
		}
	}
	if len(files) == 0 {
		t.Error("no files listed")
	}
	if changed, _, err := Write(root, testConfig(), Options{CgroupV1: true}); err != nil || changed {
		t.Errorf("converged re-run: changed %v, %v", changed, err)
	}
	// Going back to cgroup v2 removes the script inside, not on the host.
	if err := os.WriteFile(filepath.Join(host, "cgroup-rw.sh"), []byte("host's"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Write(root, testConfig(), Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(host, "cgroup-rw.sh")); err != nil {
		t.Errorf("cgroup v2 Write removed the host's file: %v", err)
	}
	if _, err := os.Lstat(inside[CgroupRWScript]); !os.IsNotExist(err) {
		t.Errorf("script inside the rootfs not removed: %v", err)
	}
}

// Issue 13, defect 4 through Write: a bootstrap kubeconfig left 0644 is
// made 0600, and the re-run converges.
func TestWriteFixesSecretMode(t *testing.T) {
	root := t.TempDir()
	c := testConfig()
	if _, _, err := Write(root, c, Options{}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, BootstrapKubeconf)
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, _, err := Write(root, c, Options{}); err != nil || !changed {
		t.Fatalf("Write over a 0644 kubeconfig: changed %v, %v", changed, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %v, want 0600", BootstrapKubeconf, fi.Mode().Perm())
	}
	if changed, _, err := Write(root, c, Options{}); err != nil || changed {
		t.Errorf("re-run: changed %v, %v; want converged", changed, err)
	}
}

// Issue 26 item 1: a machine an earlier version joined with an Azure
// identity has a kubelet.conf that runs the plugin for every request (the
// kubelet signed in as the identity); the kubelet would keep using it.
// Write removes it, and the kubelet TLS-bootstraps; a kubeconfig with the
// kubelet's certificate stays.
func TestWriteRemovesIdentityKubeletKubeconfig(t *testing.T) {
	root := t.TempDir()
	old, err := renderBootstrapKubeconfig(&inputs{server: "https://127.0.0.1:6443", caPEM: []byte(testCA), identity: true, serverID: AKSServerID})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, KubeletKubeconf)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, old, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Write(root, identityConfig(), Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("%s that runs the plugin kept: %v", KubeletKubeconf, err)
	}
	if _, err := os.Stat(filepath.Join(root, BootstrapKubeconf)); err != nil {
		t.Errorf("no bootstrap kubeconfig: %v", err)
	}
	cert := []byte("apiVersion: v1\nkind: Config\nusers: [{name: u, user: {client-certificate: " + KubeletClientCert + "}}]\n")
	if err := os.WriteFile(p, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Write(root, identityConfig(), Options{}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != string(cert) {
		t.Errorf("the kubelet's own kubeconfig: %q %v", got, err)
	}
}

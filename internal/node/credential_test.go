package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
)

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

// TestClientConfigSignsInAsTheIdentity: with an Azure identity the host's
// client is a token for it (the kubelet's kubeconfig names the plugin by
// a path inside the machine, which the host cannot run); without one, or
// with no config, it is the kubelet's kubeconfig in the machine.
func TestClientConfigSignsInAsTheIdentity(t *testing.T) {
	root := t.TempDir()
	l, err := layout.New(root, "/opt/aks-flex-node", "")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../examples/acl-managed-identity.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse("acl-managed-identity.json", data)
	if err != nil {
		t.Fatal(err)
	}
	mroot := t.TempDir() // no kubeconfig: the identity needs none
	rc, err := ClientConfig(c, l, mroot)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != c.Node.Kubelet.ClusterFQDN || rc.WrapTransport == nil || rc.ExecProvider != nil || len(rc.CAData) == 0 {
		t.Fatalf("identity client config: host %q, wrapped %v, exec %v, CA %d bytes", rc.Host, rc.WrapTransport != nil, rc.ExecProvider, len(rc.CAData))
	}
	for _, cfg := range []*config.Config{nil, {}} {
		if _, err := ClientConfig(cfg, l, mroot); err == nil || !strings.Contains(err.Error(), KubeletKubeconf) {
			t.Errorf("without an identity: err %v, want the kubelet's kubeconfig named", err)
		}
	}
}

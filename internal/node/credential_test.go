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

// TestIdentityNodeIsOnlyANode (issue 26 item 1): with an Azure identity
// the host's client is the node's own, the kubelet's certificate from its
// kubeconfig in the machine, never a token for the identity (which the
// cluster lets do nothing but ask for that certificate). Before the
// kubelet has one, there is no client, and the error names the file.
func TestIdentityNodeIsOnlyANode(t *testing.T) {
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
	mroot := t.TempDir()
	for _, cfg := range []*config.Config{c, nil, {}} {
		if _, err := ClientConfig(cfg, l, mroot); err == nil || !strings.Contains(err.Error(), KubeletKubeconf) {
			t.Errorf("before the TLS bootstrap: err %v, want the kubelet's kubeconfig named", err)
		}
	}
	pki := filepath.Join(mroot, KubeletPKIDir)
	_ = os.MkdirAll(pki, 0o755)
	_ = os.WriteFile(filepath.Join(mroot, KubeletClientCert), []byte("PEMDATA"), 0o600)
	_ = os.MkdirAll(filepath.Join(mroot, "etc/kubernetes"), 0o755)
	_ = os.WriteFile(filepath.Join(mroot, KubeletKubeconf), []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: "Zm9v"}}]
users: [{name: u, user: {client-certificate: `+KubeletClientCert+`, client-key: `+KubeletClientCert+`}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	rc, err := ClientConfig(c, l, mroot)
	if err != nil {
		t.Fatal(err)
	}
	if string(rc.CertData) != "PEMDATA" || string(rc.KeyData) != "PEMDATA" || rc.WrapTransport != nil || rc.ExecProvider != nil || rc.BearerToken != "" {
		t.Fatalf("identity node's client: cert %q, wrapped %v, exec %v, bearer %v; want the kubelet's certificate only",
			rc.CertData, rc.WrapTransport != nil, rc.ExecProvider, rc.BearerToken != "")
	}
}

package node

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// FuzzMachineKubeconfig gives the host's client loader whatever a machine
// may hold: any kubelet.conf and any bytes at the kubelet's current
// client certificate. Whatever they are, the client it makes has the
// config's server and CA and no other way to sign in than those bytes as
// certificate and key: no exec, no token or token file, no basic auth,
// no auth provider, no TLS check turned off or server name changed, no
// proxy or transport of the machine's. A refusal names no byte of the
// certificate file.
func FuzzMachineKubeconfig(f *testing.F) {
	good := clientPEM(f)
	f.Add([]byte(hostileKubeconf("https://10.9.9.9:6443", "/tmp/exec-ran", "/etc/shadow")), good)
	f.Add([]byte("apiVersion: v1\nkind: Config\nusers: [{name: u, user: {username: a, password: b, token: t}}]\n"), good)
	f.Add([]byte("{}"), []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte(""), bytes.Repeat([]byte("A"), 64))
	const server = "https://api.example.test:443"
	ca := good // any PEM serves: the client is made, not dialled
	c := &config.Config{}
	c.Node.Kubelet.ClusterFQDN, c.Node.Kubelet.CACertData = server, base64.StdEncoding.EncodeToString(ca)
	l, err := layout.New(f.TempDir(), "", "")
	if err != nil {
		f.Fatal(err)
	}
	// One machine per fuzzing process, its two files written anew for
	// each input (a directory per input would be most of the time).
	mroot := f.TempDir()
	for _, p := range []string{KubeletKubeconf, KubeletClientCert} {
		if err := os.MkdirAll(filepath.Join(mroot, filepath.Dir(p)), 0o755); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, kubeconf, cert []byte) {
		for p, data := range map[string][]byte{KubeletKubeconf: kubeconf, KubeletClientCert: cert} {
			if err := os.WriteFile(filepath.Join(mroot, p), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		rc, err := ClientConfig(c, l, mroot)
		if err != nil {
			for _, line := range strings.Split(string(cert), "\n") {
				if len(line) >= 16 && strings.Contains(err.Error(), line) {
					t.Fatalf("the error quotes the certificate file: %v", err)
				}
			}
			return
		}
		switch {
		case rc.Host != server || !bytes.Equal(rc.CAData, ca) || rc.CAFile != "":
			t.Fatalf("server %q CA %d bytes file %q: not the config's", rc.Host, len(rc.CAData), rc.CAFile)
		case !bytes.Equal(rc.CertData, cert) || !bytes.Equal(rc.KeyData, cert) || rc.CertFile != "" || rc.KeyFile != "":
			t.Fatal("the client certificate is not the machine's file's bytes")
		case rc.ExecProvider != nil || rc.AuthProvider != nil || rc.BearerToken != "" || rc.BearerTokenFile != "" || rc.Username != "" || rc.Password != "":
			t.Fatalf("a way to sign in from the machine's kubelet.conf: %+v", rc)
		case rc.Insecure || rc.ServerName != "" || rc.Proxy != nil || rc.WrapTransport != nil || rc.Transport != nil || rc.Impersonate.UserName != "":
			t.Fatalf("TLS or transport from the machine's kubelet.conf: %+v", rc)
		}
	})
}

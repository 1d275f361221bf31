package join

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
	"github.com/Azure/aks-flex-node/test/fakeentra"
	"github.com/Azure/aks-flex-node/test/fakeimds"
)

// aksServerID is the audience the kubelet's plugin asks tokens for, and
// the one the test API server accepts.
const aksServerID = "6dae42f8-4368-4678-94ff-3960e28e3630"

// imdsAddr is where Azure VMs reach IMDS; the test serves it inside the
// test's own network namespace, on an address of that namespace's lo.
const imdsAddr = "169.254.169.254"

// entra is the test's fake tenant, on this machine's end of the link
// (where the API server fetches its keys and the hosts sign in), and the
// identities the hosts use.
type entra struct {
	tenant *fakeentra.Tenant
	// msi is the ACL host's system-assigned managed identity; sp the
	// Debian host's service principal, with a secret and a certificate.
	msi, sp   fakeentra.Client
	spCertPEM []byte
	imds      *fakeimds.Identity
	imdsUp    bool
}

func startEntra(t *testing.T, link *netlab.Link) *entra {
	l, err := net.Listen("tcp", net.JoinHostPort(link.Outer, "0"))
	if err != nil {
		t.Fatal(err)
	}
	en := &entra{tenant: fakeentra.Start(t, l)}
	en.msi = fakeentra.Client{AppID: fakeentra.NewGUID(), ObjectID: fakeentra.NewGUID()}
	cert, pemData, err := fakeentra.ClientCertificate("aks-flex-node-e2e")
	if err != nil {
		t.Fatal(err)
	}
	en.sp = fakeentra.Client{AppID: fakeentra.NewGUID(), ObjectID: fakeentra.NewGUID(), Secret: "e2e-sp-secret-" + fakeentra.NewGUID(), Cert: cert}
	en.spCertPEM = pemData
	en.tenant.AddClient(en.msi)
	en.tenant.AddClient(en.sp)
	en.imds = &fakeimds.Identity{Minter: en.tenant, SystemAssigned: en.msi.AppID}
	return en
}

// serveIMDS puts IMDS at 169.254.169.254:80 in the link's namespace, once:
// until then a managed identity's token request finds no route.
func (en *entra) serveIMDS(t *testing.T, link *netlab.Link) {
	if en.imdsUp {
		return
	}
	ns := filepath.Base(link.NS)
	if out, err := exec.Command("ip", "-n", ns, "addr", "add", imdsAddr+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s addr add %s: %v\n%s", ns, imdsAddr, err, out)
	}
	l, err := aclhost.ListenInNetNS(link.NS, imdsAddr+":80")
	if err != nil {
		t.Fatal(err)
	}
	fakeimds.ServeHandler(t, l, fakeimds.HandlerWithIdentity(nil, nil, en.imds))
	en.imdsUp = true
}

// trust makes the host trust the tenant's CA, as a host in a private
// cloud trusts its authority's.
func (en *entra) trust(t *testing.T, h *aclhost.Host) {
	if err := h.WriteFile("/root/fake-entra-ca.pem", en.tenant.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	h.ShellOK(t, "mkdir -p /etc/ssl/certs && cat /root/fake-entra-ca.pem >> /etc/ssl/certs/ca-certificates.crt && rm /root/fake-entra-ca.pem")
}

// azure is the azure section of a config that signs in with auth.
func (e *env) azure(auth string) map[string]any {
	en := e.entra
	switch auth {
	case "msi":
		return map[string]any{"managedIdentity": map[string]any{}}
	case "sp-secret":
		return map[string]any{"authorityHost": en.tenant.AuthorityHost,
			"servicePrincipal": map[string]any{"tenantId": en.tenant.ID, "clientId": en.sp.AppID, "clientSecret": en.sp.Secret}}
	case "sp-cert":
		return map[string]any{"authorityHost": en.tenant.AuthorityHost,
			"servicePrincipal": map[string]any{"tenantId": en.tenant.ID, "clientId": en.sp.AppID, "clientCertificatePath": spCertPath}}
	}
	return map[string]any{"bootstrapToken": map[string]any{"token": e.cp.Token}}
}

// spCertPath is where the Debian host keeps the service principal's
// certificate.
const spCertPath = "/etc/aks-flex-node/sp.pem"

// objectID is the identity auth signs in as.
func (e *env) objectID(auth string) string {
	if auth == "msi" {
		return e.entra.msi.ObjectID
	}
	return e.entra.sp.ObjectID
}

// agentCLI runs the agent binary on this machine (what an admin runs with
// the cluster's kubeconfig at hand).
func (e *env) agentCLI(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.CommandContext(e.ctx, e.dist+"/aks-flex-node", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("aks-flex-node %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// grant lets the identity auth signs in as run a kubelet: what `cluster
// prepare --identity` prints, applied with kubectl.
func (e *env) grant(t *testing.T, auth string) {
	file := filepath.Join(t.TempDir(), "prepare.yaml")
	e.agentCLI(t, "cluster", "prepare", "--identity", e.objectID(auth), "--output", file)
	if out, err := e.cp.Kubectl(e.ctx, nil, "apply", "-f", file); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kubectl apply -f %s:\n%s", file, out)
	}
}

// bootstrapTokenConfig is the config of a bootstrap-token join as an admin
// makes it: `cluster prepare --bootstrap-token` applied with kubectl (the
// control plane grants no token anything itself), then `config generate`
// from a kubeconfig of the cluster, plus what the test's bundle needs.
func (e *env) bootstrapTokenConfig(t *testing.T, sc scenario) []byte {
	dir := t.TempDir()
	tokenFile, prepared := filepath.Join(dir, "token"), filepath.Join(dir, "prepare.yaml")
	e.agentCLI(t, "cluster", "prepare", "--bootstrap-token", "--token-file", tokenFile, "--ttl", "1h", "--output", prepared)
	if out, err := e.cp.Kubectl(e.ctx, nil, "apply", "-f", prepared); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kubectl apply -f %s:\n%s", prepared, out)
	}
	// The admin's kubeconfig names the address nodes reach.
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: e.cp.Server, CertificateAuthorityData: e.cp.CAPEM}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "unused"}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "admin"}
	kc.CurrentContext = "e2e"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	generated := filepath.Join(dir, "config.json")
	args := []string{"config", "generate", "--kubeconfig", kubeconfig, "--auth", "bootstrap-token", "--token-file", tokenFile,
		"--node-name", sc.nodeName, "--oci-image", "oci-layout:///var/lib/aks-flex-node-test/worker:" + workerTag(), "--offline-artifacts", e.source(sc), "--output", generated}
	if sc.prefix != "" {
		args = append(args, "--host-prefix", sc.prefix)
	}
	e.agentCLI(t, args...)
	data, err := os.ReadFile(generated)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	// What no flag sets: the test bundle's versions and the node's IP.
	cfg["components"] = e.components()
	cfg["networking"] = map[string]any{"cniVersion": e.manifest.Components.CNI}
	cfg["node"].(map[string]any)["kubelet"].(map[string]any)["nodeIP"] = e.net.Inner
	out, _ := json.MarshalIndent(cfg, "", "  ")
	return out
}

// refuse runs start with the config at path and checks that it refused,
// naming want, before touching the host.
func (e *env) refuse(t *testing.T, h *aclhost.Host, name, path, want string) {
	stdout, stderr, err := h.Run(context.Background(), "/root/dist/aks-flex-node", "start", "--config", path)
	if err == nil || !strings.Contains(stdout+stderr, want) || !strings.Contains(stderr, "nothing was changed") {
		t.Errorf("%s: want a refusal naming %q, got err=%v:\n%s\n%s", name, want, err, stdout, stderr)
	}
	for _, secret := range []string{e.entra.sp.Secret, "PRIVATE KEY"} {
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("%s: the output holds a secret (%.12s...)", name, secret)
		}
	}
}

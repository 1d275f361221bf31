package cli

import (
	"crypto/x509"
	"encoding/base64"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/transport"
	"github.com/Azure/aks-flex-node/test/fakearm"
	"github.com/Azure/aks-flex-node/test/fakeentra"
)

const testPoolID = "/subscriptions/6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b/resourceGroups/flex-rg/providers/Microsoft.ContainerService/managedClusters/flex-aks/agentPools/aksflexnodes"

// poolFixture is a fake Entra tenant with an admin's service principal
// (its secret in a file), a fake ARM serving the pool's bootstrap data
// in the documented shape, and --from-pool's clients trusting both.
type poolFixture struct {
	arm                     *fakearm.Server
	tenant, app, secretFile string
	authority               string
}

func newPoolFixture(t *testing.T) *poolFixture {
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	tn := fakeentra.Start(t, listen())
	app := fakeentra.NewGUID()
	tn.AddClient(fakeentra.Client{AppID: app, ObjectID: fakeentra.NewGUID(), Secret: "admin-secret-value"})
	arm := fakearm.Start(t, listen(), fakearm.Options{Tokens: tn, APIVersions: []string{config.DefaultMachineAPIVersion, machineapi.BootstrapDataAPIVersion}})
	// The cluster's CA, as the pool's data carries it: any PEM CA will do.
	ca := base64.StdEncoding.EncodeToString(arm.CAPEM)
	arm.SetBootstrapData(testPoolID, map[string]any{
		"azure": map[string]any{"tenantId": tn.ID, "cloud": "AzurePublicCloud",
			"targetCluster":       map[string]any{"resourceId": strings.Split(testPoolID, "/agentPools/")[0]},
			"targetAgentPoolName": "aksflexnodes", "bootstrapToken": map[string]any{"token": "abcdef.0123456789abcdef"}},
		"components": map[string]any{"kubernetes": "1.35.4", "containerd": "2.0.4", "runc": "1.2.1"},
		"networking": map[string]any{"dnsServiceIP": "10.0.0.10", "cniVersion": "1.4.1"},
		"node": map[string]any{"maxPods": 110, "labels": map[string]any{"node-role": "edge"}, "taints": []any{"aks.azure.com/flex-node=true:NoSchedule"},
			"kubelet": map[string]any{"clusterFQDN": "flex-aks-abc123.hcp.eastus.azmk8s.io", "caCertData": ca}},
	})
	trust := func(pem []byte) *http.Client {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			t.Fatal("CA")
		}
		return transport.Policy{RootCAs: roots, Limits: machineapi.Limits}.Client()
	}
	fromPoolTransport.arm, fromPoolTransport.entra = trust(arm.CAPEM), trust(tn.CAPEM)
	t.Cleanup(func() { fromPoolTransport.arm, fromPoolTransport.entra = nil, nil })
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("admin-secret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &poolFixture{arm: arm, tenant: tn.ID, app: app, secretFile: secret, authority: tn.AuthorityHost}
}

func (f *poolFixture) args(out string, extra ...string) []string {
	return append([]string{"config", "generate", "--from-pool", testPoolID, "--auth", "sp", "--tenant-id", f.tenant, "--client-id", f.app,
		"--client-secret-file", f.secretFile, "--authority-host", f.authority, "--resource-manager-endpoint", f.arm.URL, "--node-name", "edge-01", "--output", out}, extra...)
}

func TestConfigGenerateFromPoolWritesThePoolsJoinDataWithTheIdentityForARM(t *testing.T) {
	f := newPoolFixture(t)
	out := filepath.Join(t.TempDir(), "config.json")
	stdout, stderr, code := run(t, f.args(out, "--host-prefix", "/opt/aks-flex-node")...)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, "admin-secret-value") || strings.Contains(stdout+stderr, "0123456789abcdef") {
		t.Errorf("a secret on the terminal: %s%s", stdout, stderr)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the config: %v %v", fi, err)
	}
	data, _ := os.ReadFile(out)
	c, err := config.Parse(out, data)
	if err != nil {
		t.Fatalf("the written config does not load: %v\n%s", err, data)
	}
	a := c.Azure
	switch {
	case !strings.Contains(c.Node.Kubelet.ClusterFQDN, "flex-aks-abc123.hcp.eastus.azmk8s.io") || c.Node.Kubelet.CACertData == "":
		t.Errorf("server and CA: %+v", c.Node.Kubelet)
	case a.BootstrapToken == nil || a.ServicePrincipal == nil || a.ServicePrincipal.ClientID != f.app:
		t.Errorf("the kubelet's bootstrap token and the identity for ARM: %s", data)
	case a.TargetCluster == nil || !strings.EqualFold(a.TargetCluster.ResourceID+"/agentPools/"+a.TargetAgentPoolName, testPoolID) || a.ResourceManagerEndpoint != f.arm.URL:
		t.Errorf("the target pool and ARM: %s", data)
	case c.Node.MaxPods != 110 || c.Node.Labels["node-role"] != "edge" || len(c.Node.Taints) != 1 || c.Components.Kubernetes != "1.35.4":
		t.Errorf("the pool's join settings: %s", data)
	case c.Agent.NodeName != "edge-01" || c.Agent.HostPrefix != "/opt/aks-flex-node":
		t.Errorf("the host flags: %s", data)
	}
	reqs := f.arm.Requests()
	if len(reqs) != 1 || reqs[0].Kind != fakearm.KindBootstrapData || reqs[0].AppID != f.app || reqs[0].APIVersion != machineapi.BootstrapDataAPIVersion {
		t.Errorf("ARM requests %+v", reqs)
	}
	// The machine the config registers is in the pool asked.
	if id, ok, err := machineapi.IDFromConfig(c); !ok || err != nil || !strings.EqualFold(id.PoolID(), testPoolID) {
		t.Errorf("the config's Machine %v %v %v", id, ok, err)
	}
}

func TestConfigGenerateFromPoolRefusals(t *testing.T) {
	f := newPoolFixture(t)
	dir := t.TempDir()
	f.arm.Inject(fakearm.Fault{Kind: fakearm.KindBootstrapData, Status: http.StatusForbidden, Code: "AuthorizationFailed", Message: "The client does not have authorization"})
	out := filepath.Join(dir, "403.json")
	_, stderr, code := run(t, f.args(out)...)
	if code == 0 || !strings.Contains(stderr, testPoolID) || !strings.Contains(stderr, "AuthorizationFailed") || !strings.Contains(stderr, machineapi.ListBootstrapDataPermission) {
		t.Errorf("a 403: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused generate wrote %s", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "generate", "--from-pool", testPoolID, "--auth", "bootstrap-token", "--token-file", "x"}, "needs --auth msi, sp or arc"},
		{[]string{"config", "generate", "--from-pool", strings.Split(testPoolID, "/agentPools/")[0], "--auth", "msi"}, "--from-pool"},
		{[]string{"config", "generate", "--from-pool", testPoolID, "--kubeconfig", "k", "--auth", "msi"}, "give one"},
		{append(f.args(filepath.Join(dir, "v.json")), "--api-version", "preview"), "--api-version"},
		{[]string{"config", "generate", "--from-pool", testPoolID, "--auth", "msi", "--resource-manager-endpoint", "http://127.0.0.1:1"}, "--resource-manager-endpoint"},
	} {
		_, stderr, code := run(t, c.args...)
		if code != ExitInvalid || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d: %s; want %q", c.args, code, stderr, c.want)
		}
	}
	// Data naming another cluster is not written.
	other := strings.Replace(testPoolID, "flex-aks", "other", 1)
	f.arm.SetBootstrapData(other, map[string]any{"azure": map[string]any{"targetCluster": map[string]any{"resourceId": strings.Split(testPoolID, "/agentPools/")[0]}}})
	args := f.args(filepath.Join(dir, "other.json"))
	args[3] = other
	if _, stderr, code := run(t, args...); code == 0 || !strings.Contains(stderr, "names another cluster") {
		t.Errorf("data of another cluster: exit %d: %s", code, stderr)
	}
}

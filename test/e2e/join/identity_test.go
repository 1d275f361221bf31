package join

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// azure is the azure section of a config that signs in with auth.
func (e *env) azure(auth string) map[string]any {
	if a := e.entra.Azure(auth); a != nil {
		return a
	}
	return map[string]any{"bootstrapToken": map[string]any{"token": e.cp.Token}}
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

// grant lets the identity auth signs in as bootstrap a kubelet's client
// certificate, and nothing more: what `cluster prepare --identity`
// prints, applied with kubectl.
func (e *env) grant(t *testing.T, auth string) {
	file := filepath.Join(t.TempDir(), "prepare.yaml")
	e.agentCLI(t, "cluster", "prepare", "--identity", e.entra.ObjectID(auth), "--output", file)
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
		"--node-name", sc.nodeName, "--offline-artifacts", e.source(sc), "--output", generated}
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
	for _, secret := range []string{e.entra.SP.Secret, "PRIVATE KEY"} {
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("%s: the output holds a secret (%.12s...)", name, secret)
		}
	}
}

// checkPluginFollowsUpgrade: the kubelet's credential plugin is the host's
// current agent slot, bound into the machine (the kubelet's TLS bootstrap
// runs it, again whenever its certificate has lapsed); after agent-upgrade
// the machine runs the new binary.
func (e *env) checkPluginFollowsUpgrade(t *testing.T, h *aclhost.Host, sc scenario) {
	const v2 = "v1.0.1-e2e"
	bin := e.dist + "/aks-flex-node-" + v2
	buildAgentVersion(t, bin, v2)
	if err := h.CopyIn(bin, "/root/dist/aks-flex-node-v2", 0o755); err != nil {
		t.Fatal(err)
	}
	plugin := "nsenter -t $(machinectl show kube1 -p Leader --value) -m -- /opt/aks-flex-node-host/lib/current version"
	if out := h.ShellOK(t, plugin); !strings.Contains(out, "v1.0.0-e2e") {
		t.Errorf("the plugin in the machine before the upgrade: %s", out)
	}
	h.RunOK(t, sc.agent, "agent-upgrade", "--binary", "/root/dist/aks-flex-node-v2", "--sha256", sha256File(t, bin))
	if out := h.ShellOK(t, plugin); !strings.Contains(out, v2) {
		t.Errorf("the plugin in the machine after agent-upgrade to %s: %s", v2, out)
	}
	// A token through the upgraded plugin, as the kubelet asks for one.
	out := h.ShellOK(t, "nsenter -t $(machinectl show kube1 -p Leader --value) -m -n -- /opt/aks-flex-node-host/lib/current token kubelogin --identity-dir /opt/aks-flex-node-host/identity")
	if !strings.Contains(out, `"kind":"ExecCredential"`) || !strings.Contains(out, `"token":"ey`) {
		t.Errorf("token kubelogin in the machine: %s", out)
	}
}

// checkNoSecrets: the service principal's secret is in no journal (the
// host's, the machine's) and in no process's command line.
func (e *env) checkNoSecrets(t *testing.T, h *aclhost.Host, sc scenario) {
	secret := e.entra.SP.Secret
	for what, cmd := range map[string]string{
		"the host's journal":    "journalctl --no-pager -o cat",
		"the machine's journal": "journalctl --no-pager -o cat -D /var/lib/machines/kube1/var/log/journal",
		"the process list":      "ps -eo args",
	} {
		if out := h.ShellOK(t, cmd); strings.Contains(out, secret) {
			t.Errorf("%s holds the service principal's secret", what)
		}
	}
}

package join

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
	"github.com/Azure/aks-flex-node/test/e2e/entratest"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
	"github.com/Azure/aks-flex-node/test/e2e/netlab"
	"github.com/Azure/aks-flex-node/test/fakearm"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

// machineInterval is agent.machineReconcileInterval in the test: the
// Node must show an admin's change within one of it (plus its jitter).
const machineInterval = 15 * time.Second

const testClusterID = "/subscriptions/6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b/resourceGroups/flex-rg/providers/Microsoft.ContainerService/managedClusters/flex-aks"

// An ACL-like host joins with a bootstrap token for the kubelet and its
// managed identity (the fake IMDS) for ARM, registration required: the
// Machine exists in the fake ARM with the node's version; an admin's
// label change there (a new eTag) shows on the Node within one interval,
// with the FlexNodeMachine condition naming the eTag, and in status.
func TestFollowMachine(t *testing.T) {
	aclhost.RequireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := &env{ctx: ctx}
	var err error
	if e.binDir, err = controlplane.FindBinDir("kube-apiserver", "kubelet", "kubectl"); err != nil {
		t.Fatal(err)
	}
	if e.layoutDir, _, err = fixtures.WorkerImage(ctx, t.Logf); err != nil {
		t.Fatal(err)
	}
	if e.bundle, e.manifest, err = fixtures.Bundle(ctx, t.Logf, fixtures.BundleOptions{KubeletPath: e.binDir + "/kubelet", KubectlPath: e.binDir + "/kubectl", KubernetesVersion: "1.35.4"}); err != nil {
		t.Fatal(err)
	}
	e.net = netlab.New(t)
	e.entra = entratest.Start(t, e.net)
	if e.cp, err = controlplane.Start(ctx, controlplane.Options{BinDir: e.binDir, WorkDir: t.TempDir(), AdvertiseAddress: e.net.Outer, Logf: t.Logf,
		AuthenticationConfig: e.entra.AuthenticationConfig()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.cp.DumpLogs(os.Stderr)
		}
		_ = e.cp.Stop()
	})
	e.dist = t.TempDir()
	buildAgent(t, e.dist+"/aks-flex-node")
	bundle := buildBundle(t, e.dist+"/aks-flex-node", e.bundle, e.layoutDir, e.manifest)

	l, err := net.Listen("tcp", net.JoinHostPort(e.net.Outer, "0"))
	if err != nil {
		t.Fatal(err)
	}
	arm := fakearm.Start(t, l, fakearm.Options{Tokens: e.entra.Tenant, APIVersions: []string{config.DefaultMachineAPIVersion}})

	sc := scenario{name: "acl-machine", variant: aclhost.ACL, prefix: "/opt/aks-flex-node", agent: "/opt/aks-flex-node/bin/aks-flex-node", nodeName: "acl-machine-1"}
	h := aclhost.MustStart(t, aclhost.Options{Variant: sc.variant, Name: sc.name, NetNS: e.net.NS, ExtraArgs: []string{
		"--bind=" + t.TempDir() + ":/var/lib/machines",
		"--bind-ro=" + bundle + ":/var/lib/aks-flex-node-test/bundle",
	}})
	t.Cleanup(func() {
		if t.Failed() {
			j, _, _ := h.Run(context.Background(), "journalctl", "--no-pager", "-n", "150", "-u", "aks-flex-node-agent")
			t.Logf("agent journal:\n%s", j)
		}
	})
	if err := h.CopyIn(e.dist+"/aks-flex-node", "/root/dist/aks-flex-node", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := h.CopyIn(filepath.Join(repoRoot(), "scripts", "install.sh"), "/root/dist/install.sh", 0o755); err != nil {
		t.Fatal(err)
	}
	e.entra.Trust(t, h)
	if err := h.WriteFile("/root/fake-arm-ca.pem", arm.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	h.ShellOK(t, "cat /root/fake-arm-ca.pem >> /etc/ssl/certs/ca-certificates.crt && rm /root/fake-arm-ca.pem")
	e.entra.ServeIMDS(t, e.net)

	step("A bootstrap token for the kubelet, the managed identity for ARM, registration required")
	var cfg map[string]any
	if err := json.Unmarshal(e.bootstrapTokenConfig(t, sc), &cfg); err != nil {
		t.Fatal(err)
	}
	az := cfg["azure"].(map[string]any)
	az["managedIdentity"] = map[string]any{}
	az["targetCluster"] = map[string]any{"resourceId": testClusterID, "location": "eastus"}
	az["targetAgentPoolName"] = "aksflexnodes"
	az["resourceManagerEndpoint"] = arm.URL
	ag := cfg["agent"].(map[string]any)
	ag["requireMachineRegistration"] = true
	ag["machineReconcileInterval"] = machineInterval.String()
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := h.WriteFile("/etc/aks-flex-node/config.json", data, 0o600); err != nil {
		t.Fatal(err)
	}
	step("ARM answers 403: start refuses before the host changes, naming the Machine and AuthorizationFailed")
	id := testClusterID + "/agentPools/aksflexnodes/machines/" + sc.nodeName
	arm.Inject(fakearm.Fault{Method: http.MethodGet, Kind: fakearm.KindMachine, Status: http.StatusForbidden, Code: "AuthorizationFailed", Message: "The client does not have authorization", Times: 1})
	before, err := h.Snapshot("/etc", "/var", "/opt")
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := h.Run(ctx, "/root/dist/aks-flex-node", "start", "--config", "/etc/aks-flex-node/config.json")
	if err == nil || !strings.Contains(stderr, id) || !strings.Contains(stderr, "AuthorizationFailed") || !strings.Contains(stderr, "nothing on the host was changed") {
		t.Errorf("start with a 403 from ARM: err=%v\n%s\n%s", err, stdout, stderr)
	}
	after, err := h.Snapshot("/etc", "/var", "/opt")
	if err != nil {
		t.Fatal(err)
	}
	if diff := aclhost.Diff(before, after); len(diff) != 0 {
		t.Errorf("the refused start changed the host:\n%s", strings.Join(diff, "\n"))
	}

	e.install(t, h)
	e.start(t, h, sc, "first")
	kubetest.WaitReadySince(ctx, t, e.cp.Client, sc.nodeName, e.lastStart, 2*time.Minute)

	m := arm.Machine(id)
	props, _ := m["properties"].(map[string]any)
	k, _ := props["kubernetes"].(map[string]any)
	if m == nil || k["orchestratorVersion"] != e.manifest.Components.Kubernetes {
		t.Fatalf("the Machine after start: %v", m)
	}

	step("An admin changes the Machine's labels; the Node shows them within one interval")
	etag, _ := arm.Update(id, func(k map[string]any) { k["nodeLabels"] = map[string]any{"team": "blue"} })
	changed := time.Now()
	deadline := changed.Add(machineInterval + machineInterval/10 + 15*time.Second)
	for {
		n, err := e.cp.Client.CoreV1().Nodes().Get(ctx, sc.nodeName, metav1.GetOptions{})
		if err == nil && n.Labels["team"] == "blue" {
			t.Logf("BENCH follow-machine label-applied-after=%v interval=%v", time.Since(changed).Round(time.Millisecond), machineInterval)
			cond := ""
			for _, c := range n.Status.Conditions {
				if c.Type == "FlexNodeMachine" {
					cond = string(c.Status) + " " + c.Reason + ": " + c.Message
				}
			}
			if !strings.Contains(cond, etag) {
				t.Errorf("FlexNodeMachine condition %q does not name eTag %s", cond, etag)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Node %s has no label team=blue %v after the Machine's change (err %v)", sc.nodeName, time.Since(changed).Round(time.Second), err)
		}
		time.Sleep(time.Second)
	}
	out := h.RunOK(t, sc.agent, "status")
	if !strings.Contains(out, "goal:") || !strings.Contains(out, etag) {
		t.Errorf("status does not show the goal at eTag %s:\n%s", etag, out)
	}
	h.RunOK(t, sc.agent, "reset")

	step("Registration optional: a 403 at start joins with a warning; the agent registers once ARM allows it")
	ag["requireMachineRegistration"] = false
	data, _ = json.MarshalIndent(cfg, "", "  ")
	if err := h.WriteFile("/etc/aks-flex-node/config.json", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if !arm.Remove(id) {
		t.Fatal("no Machine to remove")
	}
	arm.Inject(fakearm.Fault{Method: http.MethodPut, Kind: fakearm.KindMachine, Status: http.StatusForbidden, Code: "AuthorizationFailed", Message: "The client does not have authorization", Times: 1})
	e.install(t, h)
	e.start(t, h, sc, "optional")
	if st := h.RunOK(t, sc.agent, "status"); !strings.Contains(st, "NOT registered") && arm.Machine(id) == nil {
		t.Errorf("status after a failed optional registration:\n%s", st)
	}
	retried := time.Now()
	for arm.Machine(id) == nil {
		if time.Since(retried) > machineInterval+machineInterval/10+15*time.Second {
			t.Fatalf("the agent did not register the Machine within one interval; status:\n%s", h.RunOK(t, sc.agent, "status"))
		}
		time.Sleep(time.Second)
	}
	t.Logf("BENCH follow-machine registered-by-agent-after=%v", time.Since(retried).Round(time.Millisecond))
	deadline = time.Now().Add(10 * time.Second)
	for st := h.RunOK(t, sc.agent, "status"); !strings.Contains(st, "created"); st = h.RunOK(t, sc.agent, "status") {
		if time.Now().After(deadline) {
			t.Fatalf("status does not say the agent registered the Machine:\n%s", st)
		}
		time.Sleep(time.Second)
	}
	h.RunOK(t, sc.agent, "reset")
}

// buildBundle is the offline bundle `artifacts build` makes from the
// fixtures, with the worker image, for a host to read from a directory.
func buildBundle(t *testing.T, agent, fixtureBundle, workerLayout string, m fixtures.Manifest) string {
	t.Helper()
	work := t.TempDir()
	spec, err := json.MarshalIndent(fixtures.BuildSpec(m), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	specPath := filepath.Join(work, "bundle-spec.json")
	if err := os.WriteFile(specPath, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "bundle")
	if b, err := exec.Command(agent, "artifacts", "build", "--manifest", specPath, "--from-dir", fixtureBundle, "--worker-image", workerLayout, "--output-dir", out).CombinedOutput(); err != nil {
		t.Fatalf("aks-flex-node artifacts build: %v\n%s", err, b)
	}
	return out
}

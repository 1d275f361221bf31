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

// machineScenario is the ACL-like host that registers its Machine.
var machineScenario = scenario{name: "acl-machine", variant: aclhost.ACL, prefix: "/opt/aks-flex-node", agent: "/opt/aks-flex-node/bin/aks-flex-node", nodeName: "acl-machine-1"}

// An ACL-like host joins at Kubernetes 1.34.2 with a bootstrap token for
// the kubelet and its managed identity (the fake IMDS) for ARM. With
// registration required, a 403 refuses start before the host changes;
// then the Machine exists in the fake ARM with the node's version, and an
// admin's label change there (a new eTag) shows on the Node within one
// interval, with the FlexNodeMachine condition naming the eTag, and in
// status. AKS's upgrade (the Machine at 1.35.4, then the Node deleted
// after its drain) repaves the node to the other side at 1.35.4; AKS's
// removal (the Machine deleted, the Node tainted) resets the host, which
// uninstall.sh then leaves as it was before install. With registration
// optional, a 403 at start joins and the agent registers the Machine
// within one interval.
func TestFollowMachine(t *testing.T) {
	aclhost.RequireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	e := &env{ctx: ctx}
	e.startCluster(t)
	l, err := net.Listen("tcp", net.JoinHostPort(e.net.Outer, "0"))
	if err != nil {
		t.Fatal(err)
	}
	arm := fakearm.Start(t, l, fakearm.Options{Tokens: e.entra.Tenant, APIVersions: []string{config.DefaultMachineAPIVersion}})
	sc := machineScenario
	// The node joins at the previous minor (the 1.34 kubelet
	// build-k8s.sh --module cmd-1.34 made) and AKS upgrades it to the
	// control plane's 1.35.4: one bundle per version, the config's source
	// a template of the version.
	joined := e.previousBundle(t)
	h := e.bootMachineHost(t, sc, arm, map[string]string{
		joined.Components.Kubernetes:     buildBundle(t, e.dist+"/aks-flex-node", joined.dir, e.layoutDir, joined.Manifest),
		e.manifest.Components.Kubernetes: buildBundle(t, e.dist+"/aks-flex-node", e.bundle, e.layoutDir, e.manifest),
	})

	step("A bootstrap token for the kubelet, the managed identity for ARM, registration required")
	cfg := e.machineConfig(t, sc, arm.URL, joined.Components.Kubernetes)
	writeConfig(t, h, cfg)
	before, err := h.Snapshot("/etc", "/var", "/opt", "/usr")
	if err != nil {
		t.Fatal(err)
	}
	id := testClusterID + "/agentPools/aksflexnodes/machines/" + sc.nodeName
	e.install(t, h)
	checkRefusedOn403(t, h, sc, arm, id)
	e.start(t, h, sc, "first")
	kubetest.WaitReadySince(ctx, t, e.cp.Client, sc.nodeName, e.lastStart, 2*time.Minute)
	m := arm.Machine(id)
	props, _ := m["properties"].(map[string]any)
	k, _ := props["kubernetes"].(map[string]any)
	if m == nil || k["orchestratorVersion"] != joined.Components.Kubernetes {
		t.Fatalf("the Machine after start: %v", m)
	}
	e.benchConvergedStart(t, h, sc)
	e.checkLabelsFollowed(t, h, sc, arm, id)
	e.checkVersionRepave(t, h, sc, arm, id, e.manifest.Components.Kubernetes)
	e.checkMachineDeletionReset(t, h, sc, arm, id, before)

	e.checkOptionalRegistration(t, h, sc, arm, id, cfg)
	h.RunOK(t, sc.agent, "reset")
}

// startCluster is what TestJoin starts, but the registry: the Kubernetes
// binaries, the worker image and the bundle, the network, the fake Entra
// tenant, the control plane, and the agent binary.
func (e *env) startCluster(t *testing.T) {
	var err error
	if e.binDir, err = controlplane.FindBinDir("kube-apiserver", "kubelet", "kubectl"); err != nil {
		t.Fatal(err)
	}
	if e.layoutDir, _, err = fixtures.WorkerImage(e.ctx, t.Logf); err != nil {
		t.Fatal(err)
	}
	if e.bundle, e.manifest, err = fixtures.Bundle(e.ctx, t.Logf, fixtures.BundleOptions{KubeletPath: e.binDir + "/kubelet", KubectlPath: e.binDir + "/kubectl", KubernetesVersion: "1.35.4"}); err != nil {
		t.Fatal(err)
	}
	e.net = netlab.New(t)
	e.entra = entratest.Start(t, e.net)
	if e.cp, err = controlplane.Start(e.ctx, controlplane.Options{BinDir: e.binDir, WorkDir: t.TempDir(), AdvertiseAddress: e.net.Outer, Logf: t.Logf,
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
}

// bootMachineHost boots the host with the bundles in directories, the
// agent and install.sh in /root/dist, trusting the fake Entra's and the
// fake ARM's CAs, with IMDS in its namespace (no ARM: neither).
func (e *env) bootMachineHost(t *testing.T, sc scenario, arm *fakearm.Server, bundles map[string]string) *aclhost.Host {
	args := []string{"--bind=" + t.TempDir() + ":/var/lib/machines"}
	for version, dir := range bundles {
		args = append(args, "--bind-ro="+dir+":"+machineBundleDir+version)
	}
	h := aclhost.MustStart(t, aclhost.Options{Variant: sc.variant, Name: sc.name, NetNS: e.net.NS, ExtraArgs: args})
	t.Cleanup(func() {
		if t.Failed() {
			j, _, _ := h.Run(context.Background(), "journalctl", "--no-pager", "-n", "150", "-u", "aks-flex-node-agent")
			t.Logf("agent journal:\n%s", j)
		}
	})
	if err := h.CopyIn(e.dist+"/aks-flex-node", "/root/dist/aks-flex-node", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sh := range []string{"install.sh", "uninstall.sh"} {
		if err := h.CopyIn(filepath.Join(repoRoot(), "scripts", sh), "/root/dist/"+sh, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.entra.Trust(t, h)
	if arm == nil { // in-cluster mode: nothing talks to ARM
		return h
	}
	if err := h.WriteFile("/root/fake-arm-ca.pem", arm.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	h.ShellOK(t, "cat /root/fake-arm-ca.pem >> /etc/ssl/certs/ca-certificates.crt && rm /root/fake-arm-ca.pem")
	e.entra.ServeIMDS(t, e.net)
	return h
}

// machineBundleDir + a Kubernetes version is where the host has that
// version's bundle; the config's source is the template of it.
const machineBundleDir = "/var/lib/aks-flex-node-test/bundle-"

// machineConfig is a bootstrap-token config as an admin makes it at
// Kubernetes version, with the managed identity for ARM, the target
// cluster and pool, the fake ARM as the endpoint and registration
// required.
func (e *env) machineConfig(t *testing.T, sc scenario, armURL, version string) map[string]any {
	var cfg map[string]any
	if err := json.Unmarshal(e.bootstrapTokenConfig(t, sc), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["components"].(map[string]any)["kubernetes"] = version
	cfg["bootstrap"].(map[string]any)["offlineArtifacts"] = map[string]any{"source": machineBundleDir + "{{ .KubernetesVersion }}"}
	az := cfg["azure"].(map[string]any)
	az["managedIdentity"] = map[string]any{}
	az["targetCluster"] = map[string]any{"resourceId": testClusterID, "location": "eastus"}
	az["targetAgentPoolName"] = "aksflexnodes"
	az["resourceManagerEndpoint"] = armURL
	ag := cfg["agent"].(map[string]any)
	ag["requireMachineRegistration"] = true
	ag["machineReconcileInterval"] = machineInterval.String()
	return cfg
}

func writeConfig(t *testing.T, h *aclhost.Host, cfg map[string]any) {
	t.Helper()
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := h.WriteFile("/etc/aks-flex-node/config.json", data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkRefusedOn403: ARM answers 403 and registration is required: start
// (its preflight passed: the agent is installed) refuses, naming the
// Machine and AuthorizationFailed, before the host changes.
func checkRefusedOn403(t *testing.T, h *aclhost.Host, sc scenario, arm *fakearm.Server, id string) {
	step("ARM answers 403: start refuses before the host changes, naming the Machine and AuthorizationFailed")
	arm.Inject(fakearm.Fault{Method: http.MethodGet, Kind: fakearm.KindMachine, Status: http.StatusForbidden, Code: "AuthorizationFailed", Message: "The client does not have authorization", Times: 1})
	before, err := h.Snapshot("/etc", "/var", "/opt")
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := h.Run(context.Background(), sc.agent, "start")
	if err == nil || !strings.Contains(stderr, id) || !strings.Contains(stderr, "AuthorizationFailed") || !strings.Contains(stderr, "nothing on the host was changed") {
		t.Errorf("start with a 403 from ARM: err=%v\n%s\n%s", err, stdout, stderr)
	}
	after, err := h.Snapshot("/etc", "/var", "/opt")
	if err != nil {
		t.Fatal(err)
	}
	// The metrics store counts the failed task (start's task errors, which
	// the agent serves); it is the one file a refused start writes.
	var diff []string
	for _, d := range aclhost.Diff(before, after) {
		if !strings.Contains(d, " /var/lib/aks-flex-node/metrics.json") {
			diff = append(diff, d)
		}
	}
	if len(diff) != 0 {
		t.Errorf("the refused start changed the host:\n%s", strings.Join(diff, "\n"))
	}
}

// checkLabelsFollowed: an admin changes the Machine's labels (a new
// eTag); the Node shows them within one interval (plus its jitter and
// slack), its FlexNodeMachine condition names the eTag, and so does
// status.
func (e *env) checkLabelsFollowed(t *testing.T, h *aclhost.Host, sc scenario, arm *fakearm.Server, id string) {
	step("An admin changes the Machine's labels; the Node shows them within one interval")
	// After the agent's first pass (the condition is on the Node), so a
	// later pass is what sees the change.
	first := time.Now()
	for !hasCondition(e, sc.nodeName, "FlexNodeMachine") {
		if time.Since(first) > machineInterval+machineInterval/10+2*time.Minute {
			t.Fatalf("no FlexNodeMachine condition on Node %s %v after the join", sc.nodeName, time.Since(first).Round(time.Second))
		}
		time.Sleep(time.Second)
	}
	etag, _ := arm.Update(id, func(k map[string]any) { k["nodeLabels"] = map[string]any{"team": "blue"} })
	changed := time.Now()
	deadline := changed.Add(machineInterval + machineInterval/10 + 15*time.Second)
	for {
		n, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, sc.nodeName, metav1.GetOptions{})
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
	if out := h.RunOK(t, sc.agent, "status"); !strings.Contains(out, "goal:") || !strings.Contains(out, etag) {
		t.Errorf("status does not show the goal at eTag %s:\n%s", etag, out)
	}
}

// checkOptionalRegistration: with registration optional, a 403 at start
// joins with a warning; the agent registers the Machine within one
// interval once ARM allows it, and status says so.
func (e *env) checkOptionalRegistration(t *testing.T, h *aclhost.Host, sc scenario, arm *fakearm.Server, id string, cfg map[string]any) {
	step("Registration optional: a 403 at start joins with a warning; the agent registers once ARM allows it")
	cfg["agent"].(map[string]any)["requireMachineRegistration"] = false
	writeConfig(t, h, cfg)
	arm.Remove(id) // gone already when AKS removed it before
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
	deadline := time.Now().Add(10 * time.Second)
	for st := h.RunOK(t, sc.agent, "status"); !strings.Contains(st, "created"); st = h.RunOK(t, sc.agent, "status") {
		if time.Now().After(deadline) {
			t.Fatalf("status does not say the agent registered the Machine:\n%s", st)
		}
		time.Sleep(time.Second)
	}
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

// hasCondition says whether Node name carries condition typ.
func hasCondition(e *env, name, typ string) bool {
	n, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if string(c.Type) == typ {
			return true
		}
	}
	return false
}

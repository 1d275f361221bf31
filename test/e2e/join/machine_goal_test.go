package join

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/fakearm"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

// previousVersion is the Kubernetes version the node joins at before
// AKS upgrades it to the control plane's.
const previousVersion = "1.34.2"

// versionBundle is a fixtures bundle and its manifest.
type versionBundle struct {
	dir string
	fixtures.Manifest
}

// previousBundle is the fixtures bundle at previousVersion, with the
// 1.34 kubelet `build-k8s.sh --module cmd-1.34` made (cached; the repave
// e2e uses the same one).
func (e *env) previousBundle(t *testing.T) versionBundle {
	out, err := exec.Command("bash", filepath.Join(repoRoot(), "test", "e2e", "build-k8s.sh"), "--module", "cmd-1.34", "--print-dir").Output()
	if err != nil {
		t.Fatal(err)
	}
	kubelet := filepath.Join(strings.TrimSpace(string(out)), "bin", "kubelet")
	if st, err := os.Stat(kubelet); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("no %s: build it with test/e2e/build-k8s.sh --module cmd-1.34 (about 15 minutes cold on 2 busy cores)", kubelet)
	}
	dir, m, err := fixtures.Bundle(e.ctx, t.Logf, fixtures.BundleOptions{KubeletPath: kubelet, KubectlPath: e.binDir + "/kubectl", KubernetesVersion: previousVersion})
	if err != nil {
		t.Fatal(err)
	}
	return versionBundle{dir: dir, Manifest: m}
}

// checkVersionRepave: AKS upgrades the Machine to version (a new eTag).
// While the Node is there the agent waits for AKS's signal and says so
// in the FlexNodeMachine condition, its kubelet unchanged; once AKS
// deleted the Node (after its drain), the node repaves to version, and
// the new kubelet's Node is Ready at it with the condition naming the
// eTag.
func (e *env) checkVersionRepave(t *testing.T, h *aclhost.Host, sc scenario, arm *fakearm.Server, id, version string) {
	step("AKS upgrades the Machine; the agent waits for the Node's deletion, then repaves to the new version")
	etag, _ := arm.Update(id, func(k map[string]any) { k["orchestratorVersion"] = version })
	changed := time.Now()
	c := e.waitCondition(t, sc.nodeName, machineInterval+machineInterval/10+30*time.Second, func(c corev1.NodeCondition) bool {
		return c.Reason == "WaitForNodeDeletion"
	})
	t.Logf("after the Machine's upgrade, with the Node still there: %s %s: %s", c.Status, c.Reason, c.Message)
	old, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, sc.nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := old.Status.NodeInfo.KubeletVersion; v != "v"+previousVersion {
		t.Fatalf("the node moved to kubelet %s before AKS deleted its Node", v)
	}
	// What AKS does once its drain is done.
	if err := e.cp.Client.CoreV1().Nodes().Delete(e.ctx, sc.nodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	deadline := deleted.Add(machineInterval + machineInterval/10 + 8*time.Minute)
	for {
		n, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, sc.nodeName, metav1.GetOptions{})
		if err == nil && n.UID != old.UID && n.Status.NodeInfo.KubeletVersion == "v"+version && nodeReady(n) {
			cond := condition(n, "FlexNodeMachine")
			if cond != nil && cond.Status == corev1.ConditionTrue && strings.Contains(cond.Message, etag) {
				break
			}
		}
		if time.Now().After(deadline) {
			st, _, _ := h.Run(e.ctx, sc.agent, "status")
			t.Fatalf("no Ready Node %s at kubelet v%s naming eTag %s %v after its deletion (err %v); status:\n%s", sc.nodeName, version, etag, time.Since(deleted).Round(time.Second), err, st)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("BENCH follow-machine upgrade-repave node-deleted-to-ready=%v machine-changed-to-ready=%v", time.Since(deleted).Round(time.Millisecond), time.Since(changed).Round(time.Millisecond))
	if st := h.RunOK(t, sc.agent, "status"); !strings.Contains(st, etag) || !strings.Contains(st, version) {
		t.Errorf("status after the upgrade does not name eTag %s and %s:\n%s", etag, version, st)
	}
}

// checkMachineDeletionReset: AKS deletes the Machine; without the Node's
// deletion taint the agent waits and says so; with it, the agent drains
// and resets the host (its service ends stopped and disabled), and
// uninstall.sh leaves the host as before install.sh, as after `reset`.
// Then AKS deletes the Node.
func (e *env) checkMachineDeletionReset(t *testing.T, h *aclhost.Host, sc scenario, arm *fakearm.Server, id string, before aclhost.Tree) {
	step("AKS deletes the Machine and taints the Node; the host is reset")
	if !arm.Remove(id) {
		t.Fatal("no Machine to remove")
	}
	c := e.waitCondition(t, sc.nodeName, machineInterval+machineInterval/10+30*time.Second, func(c corev1.NodeCondition) bool {
		return c.Reason == "WaitForDeletionTaint"
	})
	t.Logf("after the Machine's deletion, without the taint: %s %s: %s", c.Status, c.Reason, c.Message)
	since := time.Now()
	if _, err := e.cp.Kubectl(e.ctx, nil, "taint", "node", sc.nodeName, deletingTaint+"=true:NoSchedule"); err != nil {
		t.Fatal(err)
	}
	deadline := since.Add(machineInterval + machineInterval/10 + 4*time.Minute)
	for {
		out, _, _ := h.Run(e.ctx, "systemctl", "show", "aks-flex-node-agent.service", "-p", "ActiveState", "-p", "UnitFileState")
		done, _, _ := h.Run(e.ctx, "systemctl", "show", "aks-flex-node-deletion-reset.service", "-p", "ActiveState")
		if strings.Contains(out, "ActiveState=inactive") && !strings.Contains(out, "UnitFileState=enabled") && !strings.Contains(done, "ActiveState=active") && !strings.Contains(done, "activating") {
			break
		}
		if time.Now().After(deadline) {
			j, _, _ := h.Run(e.ctx, "journalctl", "--no-pager", "-n", "60", "-u", "aks-flex-node-deletion-reset.service")
			t.Fatalf("agent service %v after the Machine's deletion and the taint:\n%s\nreset unit: %s\n%s", time.Since(since).Round(time.Second), out, done, j)
		}
		time.Sleep(time.Second)
	}
	t.Logf("BENCH follow-machine deletion-taint-to-reset-done=%v", time.Since(since).Round(time.Millisecond))
	h.RunOK(t, "/root/dist/uninstall.sh")
	after, err := h.Snapshot("/etc", "/var", "/opt", "/usr")
	if err != nil {
		t.Fatal(err)
	}
	if d := aclhost.Diff(before, after); len(d) > 0 {
		t.Errorf("the Machine's deletion reset + uninstall left changes:\n%s", strings.Join(d, "\n"))
	}
	if err := e.cp.Client.CoreV1().Nodes().Delete(e.ctx, sc.nodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitCondition waits up to max for Node name's FlexNodeMachine
// condition to satisfy ok, and returns it.
func (e *env) waitCondition(t *testing.T, name string, max time.Duration, ok func(corev1.NodeCondition) bool) corev1.NodeCondition {
	t.Helper()
	deadline := time.Now().Add(max)
	var last *corev1.NodeCondition
	for {
		if n, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{}); err == nil {
			if last = condition(n, "FlexNodeMachine"); last != nil && ok(*last) {
				return *last
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Node %s's FlexNodeMachine condition after %v: %+v", name, max, last)
		}
		time.Sleep(time.Second)
	}
}

// condition is Node n's condition typ, or nil.
func condition(n *corev1.Node, typ string) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if string(n.Status.Conditions[i].Type) == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// nodeReady says whether Node n's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	c := condition(n, string(corev1.NodeReady))
	return c != nil && c.Status == corev1.ConditionTrue
}

// benchConvergedStart times converged starts on this host: not an Azure
// VM (preflight says so and asks IMDS only for a managed identity the
// config names), a local bundle, the Machine registered (start adopts
// it: one GET, from ARM or through the API server). Each says nothing
// changed.
func (e *env) benchConvergedStart(t *testing.T, h *aclhost.Host, sc scenario) {
	step("Converged starts on a host that is not an Azure VM, with a local bundle and the Machine registered")
	// The first re-run records the registration as adopted (the join's
	// record says created): a warm-up, not counted.
	e.start(t, h, sc, "converged warm-up")
	var ds []time.Duration
	for i := range 5 {
		out, d := e.start(t, h, sc, "converged")
		if !strings.Contains(out, "nothing changed") {
			t.Errorf("converged start %d changed something:\n%s", i+1, out)
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	t.Logf("BENCH converged-start scenario=%s host=not-azure source=local-dir machine=adopt runs=%v min=%v median=%v max=%v", sc.name, len(ds), ds[0].Round(time.Millisecond), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
}

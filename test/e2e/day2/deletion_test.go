package day2

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/test/aclhost"
	"github.com/Azure/aks-flex-node/test/e2e/kubetest"
	"github.com/Azure/aks-flex-node/test/fixtures"
)

// deletingTaint is upstream's deletion taint, as an admin applies it.
const deletingTaint = "kubernetes.azure.com/flex-node-deleting=true:NoSchedule"

// nodeDeleted: a Node deleted without the deletion taint is registered
// again by the agent (it restarts the kubelet) within one reconcile
// interval; the new object has a new UID.
func (e *env) nodeDeleted(t *testing.T) {
	n, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	if _, err := e.cp.Kubectl(e.ctx, nil, "delete", "node", nodeName, "--wait=true"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var back time.Duration
	for {
		m, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{})
		if err == nil && m.UID != n.UID {
			back = time.Since(deleted)
			break
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("get node: %v", err)
		}
		// The restart comes within one interval; the kubelet then
		// registers in a few seconds.
		if time.Since(deleted) > reconcileInterval+repairSlack {
			t.Fatalf("Node %s not registered again %v after it was deleted", nodeName, time.Since(deleted))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The 1.35 kubelet registers its Node again by itself, in well under
	// an interval, so the agent, which restarts the kubelet only when it
	// finds the Node missing, mostly has nothing to do: either is fine, as
	// long as the Node is back within one interval (unit tests drive the
	// agent's restart).
	if back > reconcileInterval+repairSlack {
		t.Errorf("Node %s back %v after it was deleted; want within one interval (%v) and %v", nodeName, back, reconcileInterval, repairSlack)
	}
	by := "the kubelet itself"
	if e.hasEventSaying("Repaired", "Node "+nodeName+" was deleted without the", since) {
		by = "the agent (kubelet restarted)"
	}
	t.Logf("BENCH node-reregistered latency=%v (delete to a new Node object, by %s)", back.Round(time.Millisecond), by)
	kubetest.WaitReady(e.ctx, t, e.cp.Client, nodeName, 2*time.Minute)
}

// deletionTaint: with the taint applied by kubectl, the agent drains the
// node through the Eviction API (a pod of its own is evicted), resets the
// host as `aks-flex-node reset` does, and its service ends stopped and
// disabled; the Node object stays for the cluster to delete. before is
// the host as it was before install.sh; uninstall.sh after the reset
// must leave it so, as after `reset` (the join test's check).
func (e *env) deletionTaint(t *testing.T, before aclhost.Tree) {
	grace := int64(1) // sleep as PID 1 ignores SIGTERM
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "evict-me", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: nodeName, TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "main", Image: fixtures.BusyboxImageRef, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}}}
	if _, err := e.cp.Client.CoreV1().Pods("default").Create(e.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "evict-me", func(p *corev1.Pod, err error) bool { return err == nil && p.Status.Phase == corev1.PodRunning })
	since := time.Now()
	if _, err := e.cp.Kubectl(e.ctx, nil, "taint", "node", nodeName, deletingTaint); err != nil {
		t.Fatal(err)
	}
	e.waitEventSaying(t, "Reset", "drained it (1 pod(s) evicted)", since)
	t.Logf("BENCH deletion-taint-to-drained=%v", time.Since(since).Round(time.Millisecond))
	e.waitPod(t, "evict-me", func(_ *corev1.Pod, err error) bool { return apierrors.IsNotFound(err) })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _, _ := e.h.Run(e.ctx, "systemctl", "show", "aks-flex-node-agent.service", "-p", "ActiveState", "-p", "UnitFileState", "-p", "LoadState")
		resetDone, _, _ := e.h.Run(e.ctx, "systemctl", "show", "aks-flex-node-deletion-reset.service", "-p", "ActiveState")
		if strings.Contains(out, "ActiveState=inactive") && !strings.Contains(out, "UnitFileState=enabled") && !strings.Contains(resetDone, "ActiveState=active") && !strings.Contains(resetDone, "activating") {
			t.Logf("after the deletion taint: agent %s; reset unit %s", strings.Join(strings.Fields(out), " "), strings.TrimSpace(resetDone))
			break
		}
		if time.Now().After(deadline) {
			j, _, _ := e.h.Run(e.ctx, "journalctl", "--no-pager", "-n", "60", "-u", "aks-flex-node-deletion-reset.service")
			t.Fatalf("agent service after the deletion taint:\n%s\nreset unit: %s\n%s", out, resetDone, j)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("BENCH deletion-taint-to-reset-done=%v", time.Since(since).Round(time.Millisecond))
	if _, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{}); err != nil {
		t.Errorf("the Node object is gone (%v); the agent must leave it to the cluster", err)
	}
	e.h.RunOK(t, "/root/dist/uninstall.sh")
	after, err := e.h.Snapshot("/etc", "/var", "/opt", "/usr")
	if err != nil {
		t.Fatal(err)
	}
	if d := aclhost.Diff(before, after); len(d) > 0 {
		t.Errorf("the deletion reset + uninstall left changes:\n%s", strings.Join(d, "\n"))
	}
}

// waitPod polls pod name until done says so, for two minutes.
func (e *env) waitPod(t *testing.T, name string, done func(*corev1.Pod, error) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := e.cp.Client.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
		if done(p, err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: still %v (%v) after 2m", name, p.Status.Phase, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

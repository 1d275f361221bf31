package repave

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	corev1 "k8s.io/api/core/v1"

	"github.com/Azure/aks-flex-node/test/fixtures"
)

// blockedDrain: minAvailable 1 with both replicas on the only node
// refuses the second eviction; the drain's bound passes naming the pod,
// the node is uncordoned and kube1 serves on.
func (e *env) blockedDrain(t *testing.T, w *workload) {
	r, log, err := e.nodeUpgrade(t, "--kubernetes-version", version, "--image", worker2Ref, "--drain-timeout", "15s")
	if err == nil || r.Result != "failed" {
		// It flaked once in a loaded run (stop 34): what the disruption
		// controller and the workload said then is the evidence.
		w.describe(t)
		t.Fatalf("node upgrade through a blocking budget: %v, record %+v", err, r)
	}
	if !strings.Contains(log, "pods left after 15s") || !strings.Contains(log, "a PodDisruptionBudget refuses its eviction") {
		t.Errorf("the drain's error names no blocking pod:\n%s", log)
	}
	if n := e.node(t); n.Spec.Unschedulable {
		t.Errorf("node left cordoned after the failed drain")
	}
	if a, b := e.machineState(t, "kube1"), e.machineState(t, "kube2"); a != "active" || b == "active" {
		t.Errorf("after the failed drain: kube1 %s, kube2 %s", a, b)
	}
	if s := e.status(t); s.Active != "kube1" || s.Last == nil || s.Last.Result != "failed" {
		t.Errorf("status after the failed drain: %+v", s)
	}
	w.waitRunning(t)
}

// upgrade repaves from one side to the other: the pods evicted (and back
// once uncordoned), the Node's name and UID unchanged, Ready at the
// version, the old side stopped, status saying so.
func (e *env) upgrade(t *testing.T, w *workload, from, to, image string) {
	args := []string{"--kubernetes-version", version, "--drain-timeout", "2m", "--ready-timeout", "2m"}
	if image != "" {
		args = append(args, "--image", image)
	}
	e.repave(t, w, from, to, image, func() (record, string, error) { return e.nodeUpgrade(t, args...) })
}

// repave checks one repave from one side to the other that run (node
// upgrade, or a start with a changed config) makes, returning its record
// and log.
func (e *env) repave(t *testing.T, w *workload, from, to, image string, run func() (record, string, error)) {
	before := e.node(t)
	t.Logf("repave %s (kubelet %s) -> %s (kubelet v%s)", from, before.Status.NodeInfo.KubeletVersion, to, version)
	pods := w.waitRunning(t)
	watch := e.watchNode(t)
	r, log, err := run()
	if err != nil || r.Result != "succeeded" || r.FromMachine != from || r.ToMachine != to {
		watch.stop()
		t.Fatalf("node upgrade %s -> %s: %v, record %+v", from, to, err, r)
	}
	stopped, drain := benchFigures(t, log)
	window, notReady := watch.finish(stopped)
	if window < 0 {
		t.Errorf("the API server never showed the Node Ready after %s stopped", from)
	}
	t.Logf("BENCH repave %s->%s total=%v drain=%v total-without-drain=%v not-ready-window=%v seen-not-ready=%v",
		from, to, r.Duration, drain, r.Duration-drain, window.Round(time.Millisecond), notReady.Round(time.Millisecond))
	if !strings.Contains(log, `task=drain-node status=ok changed=true`) || !strings.Contains(log, `detail="2 pod(s) evicted"`) {
		t.Errorf("the drain evicted no pods:\n%s", log)
	}
	after := e.node(t)
	if after.UID != before.UID || after.Name != nodeName {
		t.Errorf("Node changed: %s/%s, was %s/%s", after.Name, after.UID, before.Name, before.UID)
	}
	if after.Status.NodeInfo.KubeletVersion != "v"+version || after.Spec.Unschedulable {
		t.Errorf("Node after the repave: kubelet %s, unschedulable %v", after.Status.NodeInfo.KubeletVersion, after.Spec.Unschedulable)
	}
	if a, b := e.machineState(t, to), e.machineState(t, from); a != "active" || b == "active" {
		t.Errorf("after the repave: %s %s, %s %s", to, a, from, b)
	}
	s := e.status(t)
	if s.Active != to || s.Machines[to].KubernetesVersion != version || s.Last == nil || s.Last.Result != "succeeded" {
		t.Errorf("status after the repave: %+v", s)
	}
	if image != "" && (s.Machines[to].ImageDigest == "" || s.Machines[to].ImageDigest == s.Machines[from].ImageDigest) {
		t.Errorf("the new side's image digest %q, the old side's %q", s.Machines[to].ImageDigest, s.Machines[from].ImageDigest)
	}
	for _, p := range w.waitRunning(t) {
		if slices.Contains(pods, p) {
			t.Errorf("pod %s survived the repave", p)
		}
	}
}

// rollback: a bundle whose kubelet exits at start. The new side never
// turns Ready, the old one serves again, uncordoned, and status says why.
// The new side's wait is waited out in full (its kubelet never comes), so
// --ready-timeout is short; it also bounds the old side's return, which
// takes about a second once its machine runs (20x margin).
func (e *env) rollback(t *testing.T) {
	r, log, err := e.nodeUpgrade(t, "--kubernetes-version", failing, "--ready-timeout", "20s", "--drain-timeout", "1m")
	if err == nil || r.Result != "rolled-back" || !strings.Contains(log, "rolled back") {
		t.Fatalf("node upgrade to a failing kubelet: %v, record %+v", err, r)
	}
	n := e.node(t)
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	if !ready || n.Spec.Unschedulable || n.Status.NodeInfo.KubeletVersion != "v"+version {
		t.Errorf("Node after the rollback: ready %v, unschedulable %v, kubelet %s", ready, n.Spec.Unschedulable, n.Status.NodeInfo.KubeletVersion)
	}
	if a, b := e.machineState(t, "kube1"), e.machineState(t, "kube2"); a != "active" || b == "active" {
		t.Errorf("after the rollback: kube1 %s, kube2 %s", a, b)
	}
	s := e.status(t)
	if s.Active != "kube1" || s.Last == nil || s.Last.Result != "rolled-back" || !strings.Contains(s.Last.Reason, "not Ready at kubelet "+failing) || s.Machines["kube2"].Failed == "" {
		t.Errorf("status after the rollback: %+v %+v", s, s.Last)
	}
	text, _, _ := e.h.Run(e.ctx, agent, "status")
	if !strings.Contains(text, "last rolled-back: kube1 (1.35.4) -> kube2 (1.35.5)") {
		t.Errorf("status text after the rollback:\n%s", text)
	}
}

// otherWorkerImage is the worker image with one more label: the same
// layers (the layer cache makes its rootfs at once), another digest.
func otherWorkerImage(t *testing.T, layoutDir string) string {
	p, err := layout.FromPath(layoutDir)
	must(t, err)
	idx, err := p.ImageIndex()
	must(t, err)
	im, err := idx.IndexManifest()
	must(t, err)
	for _, d := range im.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] != fixtures.WorkerTag {
			continue
		}
		img, err := idx.Image(d.Digest)
		must(t, err)
		cf, err := img.ConfigFile()
		must(t, err)
		cfg := cf.Config
		cfg.Labels = map[string]string{"aks-flex-node.e2e/side": "second"}
		for k, v := range cf.Config.Labels {
			cfg.Labels[k] = v
		}
		img2, err := mutate.Config(img, cfg)
		must(t, err)
		dir := filepath.Join(t.TempDir(), "worker2")
		must(t, os.MkdirAll(dir, 0o755))
		p2, err := layout.Write(dir, empty.Index)
		must(t, err)
		must(t, p2.AppendImage(img2, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": fixtures.WorkerTag})))
		return dir
	}
	t.Fatalf("no image tagged %s in %s", fixtures.WorkerTag, layoutDir)
	return ""
}

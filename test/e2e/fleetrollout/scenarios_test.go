package fleetrollout

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// soak is the rollouts' soak: short, the test waits through it per node.
const soak = 10 * time.Second

// happyPath: a rollout to release B (the control plane's Kubernetes
// version, worker image b) with maxUnavailable 1 completes; a watch on
// the Nodes never sees two of them unschedulable or not Ready at once;
// every node ends on B on its other side (kube2), uncordoned, Updated.
func (e *env) happyPath(t *testing.T) {
	w := watchNodes(t, e.cp.Client)
	began := time.Now()
	e.apply(t, rollout("to-b", e.rel.release("b"), 1, soak))
	e.waitComplete(t, "to-b", 15*time.Minute)
	took := time.Since(began)
	e.checkAtMostOneDisrupted(t, w, began)
	e.checkOnRelease(t, "to-b", "b", "kube2")
	ro := e.get(t, "to-b")
	if s := ro.Status; s.Selected != int32(len(e.hosts)) || s.Updated != s.Selected || s.Failed != 0 || s.ObservedGeneration != ro.Generation {
		t.Errorf("rollout status after Complete: %+v (generation %d)", s, ro.Generation)
	}
	e.logFigures(t, "to-b", w, began, ro.Generation, took)
}

// checkAtMostOneDisrupted fails t when the watch saw more than one Node
// unschedulable or not Ready at once, or none at all (a watch that saw no
// node disrupted missed the rollout: every node was cordoned).
func (e *env) checkAtMostOneDisrupted(t *testing.T, w *nodeWatch, since time.Time) {
	t.Helper()
	peak, at, set := w.maxDisrupted()
	switch {
	case peak > 1:
		t.Errorf("%d Nodes unschedulable or not Ready at once at +%v (%s); maxUnavailable is 1. Timeline:\n%s",
			peak, at.Sub(since).Round(time.Millisecond), strings.Join(set, ", "), w.timeline(since))
	case peak == 0:
		t.Errorf("the watch never saw a Node cordoned or not Ready. Timeline:\n%s", w.timeline(since))
	}
}

// checkOnRelease checks every node runs release rel on machine side,
// uncordoned and Ready, its condition Updated at the rollout's
// generation.
func (e *env) checkOnRelease(t *testing.T, rollout, rel, side string) {
	t.Helper()
	ro := e.get(t, rollout)
	for _, m := range e.hosts {
		e.checkHostOn(t, m, rel, side)
		r, err := e.release(e.ctx, m.name)
		if err != nil || r.Rollout != rollout || r.Generation != ro.Generation || r.Phase != fleet.PhaseUpdated {
			t.Errorf("%s: FlexNodeRelease %+v (%v), want Updated at %s generation %d", m.name, r, err, rollout, ro.Generation)
		}
	}
}

// checkHostOn checks m runs release rel on machine side: status says so,
// the Node is Ready at the release's kubelet, uncordoned.
func (e *env) checkHostOn(t *testing.T, m *host, rel, side string) {
	t.Helper()
	st, err := m.status(e.ctx)
	if err != nil {
		t.Error(err)
		return
	}
	want := e.rel.workers[rel]
	digest := want[strings.LastIndex(want, "@")+1:]
	got := st.Machines[st.Active]
	if st.Active != side || got.ImageDigest != digest || got.KubernetesVersion != version {
		t.Errorf("%s: active %s (Kubernetes %s, image %s), want %s on release %s (Kubernetes %s, image %s)", m.name, st.Active, got.KubernetesVersion, got.ImageDigest, side, rel, version, digest)
	}
	n, err := e.node(e.ctx, m.name)
	if err != nil {
		t.Error(err)
		return
	}
	if n.Status.NodeInfo.KubeletVersion != "v"+version || n.Spec.Unschedulable {
		t.Errorf("%s: Node at kubelet %s, unschedulable %v; want v%s, schedulable", m.name, n.Status.NodeInfo.KubeletVersion, n.Spec.Unschedulable, version)
	}
}

// failOnOneHost: release C's bundle has a kubelet that exits, for one
// host only (its registry view serves badRepo's bundle under C's tag).
// The other hosts' bundle requests are held until that host holds the
// slot, so it goes first. It switches, rolls back to B, reports Failed
// and keeps its slot; the rollout says Paused naming it; no other node
// starts (each stays on B, uncordoned). With the host's registry fixed,
// `fleet resume` clears its slot and the rollout completes on C, every
// node on kube1.
func (e *env) failOnOneHost(t *testing.T) {
	e.deleteRollout(t, "to-b") // the oldest rollout that selects a node wins
	bad := e.hosts[1]
	tag := "k8s-" + version + "-c"
	e.reg.swap(bad.ns, bundleRepo+":"+tag, badRepo+":"+tag)
	var others []string
	for _, m := range e.hosts {
		if m != bad {
			others = append(others, m.ns)
		}
	}
	releaseOthers := e.reg.holdBundles(others...)
	defer releaseOthers()
	w := watchNodes(t, e.cp.Client)
	began := time.Now()
	e.apply(t, rollout("to-c", e.rel.release("c"), 1, soak))
	e.waitFor(t, bad.name+" holds a slot of to-c", 5*time.Minute, func(ctx context.Context) error {
		h, err := e.holders(ctx, "to-c")
		if _, ok := h[bad.name]; err == nil && !ok {
			err = fmt.Errorf("holders %v", h)
		}
		return err
	})
	releaseOthers()
	e.waitFor(t, bad.name+" Failed", 10*time.Minute, func(ctx context.Context) error {
		r, err := e.release(ctx, bad.name)
		if err == nil && (r.Rollout != "to-c" || r.Phase != fleet.PhaseFailed) {
			err = fmt.Errorf("%+v", r)
		}
		return err
	})
	failedAt := time.Now()
	e.checkPausedOn(t, "to-c", bad.name)
	// The others stage and wait: none takes the slot while the failed
	// node holds it. Negative, so over a bounded window: until each has
	// staged, then two soaks more.
	e.waitFor(t, "the other nodes Staged", 5*time.Minute, func(ctx context.Context) error {
		for _, m := range e.hosts {
			if r, err := e.release(ctx, m.name); m != bad && (err != nil || r.Rollout != "to-c" || r.Phase != fleet.PhaseStaged) {
				return fmt.Errorf("%s: %+v %v", m.name, r, err)
			}
		}
		return nil
	})
	time.Sleep(2 * soak)
	started := w.everDisrupted(failedAt)
	for _, m := range e.hosts {
		if m != bad && started[m.name] {
			t.Errorf("%s was cordoned or not Ready while %s held the failed slot. Timeline:\n%s", m.name, bad.name, w.timeline(began))
		}
	}
	e.checkPausedOn(t, "to-c", bad.name)
	for _, m := range e.hosts {
		e.checkHostOn(t, m, "b", "kube2") // the failed one rolled back
	}
	if t.Failed() {
		return
	}

	e.reg.swap(bad.ns, bundleRepo+":"+tag, "")
	out, err := e.fleetCLI(e.ctx, "resume", "to-c")
	must(t, err)
	t.Logf("fleet resume to-c:\n%s", out)
	e.waitComplete(t, "to-c", 15*time.Minute)
	e.checkAtMostOneDisrupted(t, w, began)
	e.checkOnRelease(t, "to-c", "c", "kube1")
	if h, err := e.holders(e.ctx, "to-c"); err != nil || len(h) != 0 {
		t.Errorf("slots of to-c held after Complete: %v %v", h, err)
	}
}

// checkPausedOn checks the rollout is Paused, its status naming node as
// failed, and that node holds a slot marked failed.
func (e *env) checkPausedOn(t *testing.T, name, node string) {
	t.Helper()
	e.waitFor(t, "rollout "+name+" Paused naming "+node, 2*time.Minute, func(ctx context.Context) error {
		ro, err := e.rollouts.Get(ctx, name)
		if err != nil {
			return err
		}
		c := condition(ro, v1alpha1.ConditionPaused)
		named := false
		for _, f := range ro.Status.FailedNodes {
			named = named || f.Name == node
		}
		if c == nil || c.Status != "True" || !named || ro.Status.Failed != 1 {
			return fmt.Errorf("Paused %+v, failed %d %+v", c, ro.Status.Failed, ro.Status.FailedNodes)
		}
		return nil
	})
	h, err := e.holders(e.ctx, name)
	must(t, err)
	if reason, ok := h[node]; !ok || reason == "" || len(h) != 1 {
		t.Errorf("slots of %s: %v; want one, held by %s marked failed", name, h, node)
	}
}

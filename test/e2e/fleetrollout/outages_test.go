package fleetrollout

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// slotTTL is the agents' slot lease (fleet.DefaultSlotTTL); they renew
// at a third of it.
const slotTTL = fleet.DefaultSlotTTL

// stageFailsOnOneHost: release D's worker image, pinned by digest, is
// served to one host with another image's manifest (a mirror serving the
// wrong bytes). That host reports Failed at stage, naming the digest; the
// other hosts' bundle requests are held until it does, and then no node
// starts (none cordoned, no slot taken) while it reports Failed. Fixed
// and resumed, the rollout goes on (powerCut runs inside it).
func (e *env) stageFailsOnOneHost(t *testing.T) {
	e.deleteRollout(t, "to-c")
	bad := e.hosts[2]
	want := e.rel.workers["d"]
	from := workerRepo + ":" + want[strings.LastIndex(want, "@")+1:]
	e.reg.swap(bad.ns, from, workerRepo+":a")
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
	e.apply(t, rollout("to-d", e.rel.release("d"), 1, soak))
	e.waitFor(t, bad.name+" Failed at stage", 5*time.Minute, func(ctx context.Context) error {
		r, err := e.release(ctx, bad.name)
		if err == nil && (r.Rollout != "to-d" || r.Phase != fleet.PhaseFailed || r.Step != fleet.StepStage) {
			err = fmt.Errorf("%+v", r)
		}
		return err
	})
	releaseOthers()
	r, _ := e.release(e.ctx, bad.name)
	t.Logf("%s: %s %s %s: %s", bad.name, r.Phase, r.Step, r.Reason, r.Message)
	if digest := from[strings.Index(from, ":")+1:]; !strings.Contains(r.Message, digest) {
		t.Errorf("%s's staging error does not name the digest %s: %q", bad.name, digest, r.Message)
	}
	e.waitFor(t, "the other nodes Staged", 5*time.Minute, func(ctx context.Context) error {
		for _, m := range e.hosts {
			if r, err := e.release(ctx, m.name); m != bad && (err != nil || r.Rollout != "to-d" || r.Phase != fleet.PhaseStaged) {
				return fmt.Errorf("%s: %+v %v", m.name, r, err)
			}
		}
		return nil
	})
	time.Sleep(2 * soak)
	if d := w.everDisrupted(began); len(d) > 0 {
		t.Errorf("nodes cordoned or not Ready while %s could not stage: %v. Timeline:\n%s", bad.name, d, w.timeline(began))
	}
	if h, err := e.holders(e.ctx, "to-d"); err != nil || len(h) != 0 {
		t.Errorf("slots of to-d held while %s could not stage: %v %v", bad.name, h, err)
	}
	if t.Failed() {
		return
	}
	e.reg.swap(bad.ns, from, "")
	out, err := e.fleetCLI(e.ctx, "resume", "to-d")
	must(t, err)
	t.Logf("fleet resume to-d:\n%s", out)
}

// powerCut: the first node to take a slot of to-d loses power while it
// holds it, mid-switch (its Node cordoned). Its lease expires, but a
// holder whose Node is cordoned or NotReady keeps its slot (the power-cut
// rule, fleet.HolderDown): for a lease and a half after the cut nobody
// else takes it (the Node turns NotReady meanwhile), and `fleet status`
// names the slot as kept past its lease with what to do. The node comes
// back (same disk), its agent re-adopts the slot under its new boot ID,
// finishes, and the rollout completes on D.
func (e *env) powerCut(t *testing.T) {
	var cut *host
	e.waitFor(t, "a node holds a slot of to-d, its Node cordoned", 5*time.Minute, func(ctx context.Context) error {
		h, err := e.holders(ctx, "to-d")
		if err != nil {
			return err
		}
		for _, m := range e.hosts {
			if _, ok := h[m.name]; !ok {
				continue
			}
			n, err := e.node(ctx, m.name)
			if err != nil || !n.Spec.Unschedulable {
				return fmt.Errorf("%s holds a slot, not cordoned yet (%v)", m.name, err)
			}
			cut = m
			return nil
		}
		return fmt.Errorf("holders %v", h)
	})
	cutAt := time.Now()
	must(t, cut.h.PowerOff())
	t.Logf("power cut of %s, holding a slot of to-d", cut.name)
	on := false
	defer func() {
		if !on {
			_ = cut.h.PowerOn(context.Background()) // so its cleanup finds it running
		}
	}()
	// The other agents judge expiry from when they saw the slot last
	// change (at most a renewal interval before the cut): by the end of
	// the window it expired to all of them, and the cut node's Node is
	// NotReady (the node lifecycle controller's grace, 50 s).
	off := cutAt.Add(slotTTL + slotTTL/2)
	var notReady time.Duration
	for time.Now().Before(off) {
		h, err := e.holders(e.ctx, "to-d")
		must(t, err)
		if _, ok := h[cut.name]; !ok || len(h) != 1 {
			t.Fatalf("+%v after the power cut of %s, slots of to-d held by %v: a slot kept by a powered-off holder was taken over",
				time.Since(cutAt).Round(time.Millisecond), cut.name, h)
		}
		if n, err := e.node(e.ctx, cut.name); notReady == 0 && err == nil && !nodeReady(n) {
			notReady = time.Since(cutAt)
			t.Logf("BENCH rollout-e2e power-cut node-not-ready-after=%v", notReady.Round(time.Millisecond))
		}
		time.Sleep(time.Second)
	}
	t.Logf("BENCH rollout-e2e power-cut slot-kept-while-off=%v (lease %v)", time.Since(cutAt).Round(time.Millisecond), slotTTL)
	out, err := e.fleetCLI(e.ctx, "status", "to-d")
	must(t, err)
	if want := "held by " + cut.name + ": lease expired"; !strings.Contains(out, want) {
		t.Errorf("fleet status to-d, %s powered off for %v, does not say %q:\n%s", cut.name, time.Since(cutAt).Round(time.Second), want, out)
	}
	t.Logf("fleet status to-d while %s is off:\n%s", cut.name, out)
	must(t, cut.h.PowerOn(e.ctx))
	on = true
	// Back, it finishes its own switch first: nobody else holds a slot
	// until it reports Updated.
	var other map[string]string
	// (Its Updated is on its Node before it frees the slot, so the
	// condition is read first: a holder seen after it is no violation.)
	e.waitFor(t, cut.name+" back and Updated on to-d", 10*time.Minute, func(ctx context.Context) error {
		r, err := e.release(ctx, cut.name)
		if err == nil && r.Rollout == "to-d" && r.Phase == fleet.PhaseUpdated {
			return nil
		}
		h, herr := e.holders(ctx, "to-d")
		if herr != nil {
			return herr
		}
		if _, ok := h[cut.name]; (ok && len(h) > 1 || !ok && len(h) > 0) && other == nil {
			other = h
		}
		if err == nil {
			err = fmt.Errorf("%+v", r)
		}
		return err
	})
	t.Logf("BENCH rollout-e2e power-cut back-to-updated=%v after the cut", time.Since(cutAt).Round(time.Millisecond))
	if other != nil {
		t.Errorf("slots of to-d held by %v before %s, back, had finished", other, cut.name)
	}
	e.waitComplete(t, "to-d", 15*time.Minute)
	e.checkOnRelease(t, "to-d", "d", "kube2")
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// writerKilled: the elected status writer's agent is killed (SIGKILL,
// then kept stopped) while it holds no slot; another agent takes the
// status-writer slot within its lease and a margin; the killed agent is
// started again.
func (e *env) writerKilled(t *testing.T, rollout string) {
	var w *host
	e.waitFor(t, "the status writer holds no rollout slot", 5*time.Minute, func(ctx context.Context) error {
		wn, err := e.writer(ctx)
		if err != nil {
			return err
		}
		h, err := e.holders(ctx, rollout)
		if err != nil {
			return err
		}
		if _, holds := h[wn]; holds {
			return fmt.Errorf("the writer %s holds a slot", wn)
		}
		for _, m := range e.hosts {
			if m.name == wn {
				w = m
			}
		}
		return nil
	})
	killedAt := time.Now()
	m := w.h
	if _, stderr, err := m.Shell(e.ctx, "systemctl kill -s KILL aks-flex-node-agent; systemctl stop aks-flex-node-agent"); err != nil {
		t.Fatalf("%s: kill the agent: %v\n%s", w.name, err, stderr)
	}
	t.Logf("killed the status writer, the agent of %s", w.name)
	e.waitFor(t, "another status writer", fleet.DefaultLeaseDuration+2*time.Minute, func(ctx context.Context) error {
		wn, err := e.writer(ctx)
		if err == nil && wn == w.name {
			err = fmt.Errorf("held by %s", wn)
		}
		return err
	})
	t.Logf("BENCH rollout-e2e status-writer-takeover=%v", time.Since(killedAt).Round(time.Millisecond))
	if _, stderr, err := m.Shell(e.ctx, "systemctl start aks-flex-node-agent"); err != nil {
		t.Fatalf("%s: start the agent: %v\n%s", w.name, err, stderr)
	}
}

// writer is the node whose agent holds the status-writer slot.
func (e *env) writer(ctx context.Context) (string, error) {
	s, err := e.statusWriterSlot(ctx)
	if err != nil {
		return "", err
	}
	if s.Spec.HolderIdentity == nil || *s.Spec.HolderIdentity == "" {
		return "", fmt.Errorf("the status-writer slot has no holder")
	}
	node, _, _ := strings.Cut(*s.Spec.HolderIdentity, "/")
	return node, nil
}

func (e *env) statusWriterSlot(ctx context.Context) (*v1alpha1.FlexNodeSlot, error) {
	store, err := fleet.NewSlotStore(e.cp.AdminConfig, nil, v1alpha1.Namespace)
	if err != nil {
		return nil, err
	}
	list, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range list.Items {
		if l.Name == fleet.StatusWriterSlot {
			return &v1alpha1.FlexNodeSlot{ObjectMeta: l.ObjectMeta, Spec: l.Spec}, nil
		}
	}
	return nil, fmt.Errorf("no %s slot in %s", fleet.StatusWriterSlot, v1alpha1.Namespace)
}

// nodeDeletedThenWriterKilled: a rollout to B again (to-e). The first
// node to hold a slot has its Node deleted: the slot is free at once (its
// holder's Node is gone) and another node takes it well before the lease
// would expire. Then, while the rollout goes on, the status writer is
// killed (writerKilled); the rollout completes on B (after a resume when
// the deleted node failed: completeOrResume), and the status the new
// writer wrote is true.
func (e *env) nodeDeletedThenWriterKilled(t *testing.T) {
	e.deleteRollout(t, "to-d")
	e.apply(t, rollout("to-e", e.rel.release("b"), 1, soak))
	var first string
	e.waitFor(t, "a node holds a slot of to-e", 5*time.Minute, func(ctx context.Context) error {
		h, err := e.holders(ctx, "to-e")
		for n := range h {
			first = n
		}
		if err == nil && first == "" {
			err = fmt.Errorf("no holder")
		}
		return err
	})
	deletedAt := time.Now()
	must(t, e.cp.Client.CoreV1().Nodes().Delete(e.ctx, first, metav1.DeleteOptions{}))
	t.Logf("deleted Node %s, holding a slot of to-e", first)
	e.waitFor(t, "another node holds the slot of the deleted "+first, slotTTL-slotTTL/3, func(ctx context.Context) error {
		h, err := e.holders(ctx, "to-e")
		if err != nil {
			return err
		}
		if _, still := h[first]; still || len(h) != 1 {
			return fmt.Errorf("holders %v", h)
		}
		return nil
	})
	t.Logf("BENCH rollout-e2e deleted-node-slot-taken-over=%v", time.Since(deletedAt).Round(time.Millisecond))
	e.writerKilled(t, "to-e")
	e.completeOrResume(t, "to-e", first, 15*time.Minute)
	ro := e.get(t, "to-e")
	// The deleted Node is back under a new UID: its kubelet registered it
	// again (completeOrResume waited for it).
	if s := ro.Status; s.Selected != int32(len(e.hosts)) || s.Updated != s.Selected || s.Failed != 0 || s.ObservedGeneration != ro.Generation {
		t.Errorf("rollout status after Complete, %s deleted: %+v (generation %d)", first, s, ro.Generation)
	}
	for _, m := range e.hosts {
		e.checkHostOn(t, m, "b", "kube1")
	}
}

// completeOrResume waits for rollout name to be Complete. A node whose
// Node was deleted mid-switch lost its slot with it: it reports Failed
// (SlotLost, or its rollback's failure) on the Node its kubelet
// registered again, and the rollout pauses naming it, as for any
// failure; the operator's `fleet resume` lets it try again, once. When
// the deletion fell outside the switch the rollout completes by itself.
func (e *env) completeOrResume(t *testing.T, name, node string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	resumed := false
	e.waitFor(t, "rollout "+name+" Complete, or Paused naming "+node+" and resumed", timeout, func(ctx context.Context) error {
		ro, err := e.rollouts.Get(ctx, name)
		if err != nil {
			return err
		}
		// Complete counts once the deleted node is counted again: while
		// its Node is gone the others alone make the rollout Complete
		// (true then), and it turns NodesPending when the kubelet
		// registers the Node again (ci, stop 36: 68 s after the
		// deletion, the switch's rollback in between).
		if c := condition(ro, v1alpha1.ConditionComplete); c != nil && c.Status == "True" && ro.Status.ObservedGeneration == ro.Generation {
			if ro.Status.Selected == int32(len(e.hosts)) {
				return nil
			}
			return fmt.Errorf("Complete with %d of %d nodes selected: %s's Node not back yet", ro.Status.Selected, len(e.hosts), node)
		}
		if c := condition(ro, v1alpha1.ConditionPaused); !resumed && c != nil && c.Status == "True" {
			for _, f := range ro.Status.FailedNodes {
				if f.Name != node {
					continue
				}
				out, err := e.fleetCLI(ctx, "resume", name)
				if err != nil {
					return fmt.Errorf("fleet resume %s: %v\n%s", name, err, out)
				}
				t.Logf("%s failed after its Node was deleted (step %s, %s: %s); fleet resume %s:\n%s", node, f.Step, f.Reason, f.Message, name, out)
				resumed = true
			}
		}
		return fmt.Errorf("not Complete: %+v", ro.Status)
	})
	e.waitComplete(t, name, time.Until(deadline)+time.Minute)
}

package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// waitFor polls cond every 20 ms for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not within 5s: %s", what)
}

// TestStatusWriterFollowsTheNodes runs the writer against the fake API:
// its first round writes the status the Nodes' conditions make; a node
// that moves on is written again (one write for a burst), with an Event
// on the rollout naming the node, its phase, step and reason; a
// re-report that changes nothing but the heartbeat writes nothing; a
// conflict is read again and retried.
func TestStatusWriterFollowsTheNodes(t *testing.T) {
	f, cfg := newFakeAPI(t)
	r := rollout(1, false)
	r.UID = "uid-edge-b"
	f.setRollout(r)
	f.setNode(node("a", "edge", "edge-b", 1, PhaseUpdated))
	f.setNode(node("b", "edge", "edge-b", 1, PhaseStaged))
	f.setNode(node("x", "other", "", 0, ""))
	w, err := NewStatusWriter(cfg, nil, fakeNodes(t, cfg), "a/123", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Settle, w.MinInterval = 20*time.Millisecond, 50*time.Millisecond
	var results []string
	var resMu sync.Mutex
	w.Wrote = func(s string) { resMu.Lock(); results = append(results, s); resMu.Unlock() }
	defer running(t, w)()
	waitFor(t, "the first status", func() bool { return f.getRollout("edge-b").Status.Selected == 2 })
	st := f.getRollout("edge-b").Status
	if st.Updated != 1 || st.Staged != 1 || st.ObservedGeneration != 1 {
		t.Errorf("first status %+v", st)
	}
	// b fails at switch.
	b := node("b", "edge", "edge-b", 1, PhaseFailed)
	f.setNode(b)
	waitFor(t, "b's failure in the status", func() bool { return f.getRollout("edge-b").Status.Failed == 1 })
	st = f.getRollout("edge-b").Status
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionPaused); c == nil || c.Status != metav1.ConditionTrue || st.FailedNodes[0].Name != "b" {
		t.Errorf("after b failed: %+v", st)
	}
	waitFor(t, "an Event", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.events) == 1 })
	ev := f.events[0]
	if ev.Reason != "Failed" || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != v1alpha1.Kind || ev.InvolvedObject.UID != "uid-edge-b" ||
		ev.Namespace != "default" || !strings.Contains(ev.Message, "node b: Failed at step switch (RolledBack), was Staged: kubelet exited") || ev.ReportingInstance != "a/123" {
		t.Errorf("event %+v", ev)
	}
	// A re-report: only the heartbeat moves. Nothing is written.
	writes := f.count("PUT " + rolloutsPath)
	SetNodeRelease(&b, NodeRelease{Rollout: "edge-b", Generation: 1, Phase: PhaseFailed, Step: "switch", Reason: "RolledBack", Message: "kubelet exited"}, t0.Add(time.Minute))
	f.setNode(b)
	time.Sleep(300 * time.Millisecond)
	if n := f.count("PUT " + rolloutsPath); n != writes {
		t.Errorf("%d status writes after a heartbeat", n-writes)
	}
	// A conflict: read again, written.
	f.mu.Lock()
	f.conflictStatus = 1
	f.mu.Unlock()
	f.setNode(node("b", "edge", "edge-b", 1, PhaseUpdated))
	waitFor(t, "complete after a conflict", func() bool {
		c := meta.FindStatusCondition(f.getRollout("edge-b").Status.Conditions, v1alpha1.ConditionComplete)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	resMu.Lock()
	got := strings.Join(results, ",")
	resMu.Unlock()
	if !strings.Contains(got, "conflict,ok") {
		t.Errorf("write results %s", got)
	}
	if f.count("GET "+rolloutsPath+"/edge-b") == 0 {
		t.Error("the conflict was not read again")
	}
}

// TestPhaseEventOfAnUnknownPhase: a phase this writer does not know (a
// newer agent's) still makes a true Event.
func TestPhaseEventOfAnUnknownPhase(t *testing.T) {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: ConditionType, Reason: "Held", Message: "rollout=edge-b generation=1 step= reason=Operator"}}}}
	to, ok := looseRelease(&n)
	if !ok || to.Phase != "Held" || to.Rollout != "edge-b" {
		t.Fatalf("loose read %+v %v", to, ok)
	}
	ev := phaseEvent(rollout(1, false), phaseChange{node: "m", to: to}, "w", t0, 0)
	if ev.Reason != "Held" || ev.Type != corev1.EventTypeNormal || ev.Message != "node m: Held (Operator)" {
		t.Errorf("event %s %s %q", ev.Reason, ev.Type, ev.Message)
	}
}

// Events never hold the status up: sixty nodes moving at once queue
// sixty Events, each slow to create (300 ms, a loaded server), and the
// status still follows the nodes within the round's pace.
func TestStatusWriterDoesNotWaitForItsEvents(t *testing.T) {
	f, cfg := newFakeAPI(t)
	r := rollout(1, false)
	r.UID = "uid-edge-b"
	f.setRollout(r)
	const n = 60
	for i := range n {
		f.setNode(node(fmt.Sprintf("n%02d", i), "edge", "edge-b", 1, PhaseStaged))
	}
	w, err := NewStatusWriter(cfg, nil, fakeNodes(t, cfg), "a/123", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Settle, w.MinInterval = 20*time.Millisecond, 50*time.Millisecond
	defer running(t, w)()
	waitFor(t, "the first status", func() bool { return f.getRollout("edge-b").Status.Staged == n })
	f.mu.Lock()
	f.eventDelay = 300 * time.Millisecond
	f.mu.Unlock()
	for i := range n {
		f.setNode(node(fmt.Sprintf("n%02d", i), "edge", "edge-b", 1, PhaseUpdating))
	}
	waitFor(t, "every node updating in the status", func() bool { return f.getRollout("edge-b").Status.Updating == n })
	for i := range n {
		f.setNode(node(fmt.Sprintf("n%02d", i), "edge", "edge-b", 1, PhaseUpdated))
	}
	// Sending the sixty Events one after another takes 18 s.
	waitFor(t, "every node updated in the status", func() bool { return f.getRollout("edge-b").Status.Updated == n })
}

// running runs w until the returned stop, which fails t if Run failed.
func running(t *testing.T, w *StatusWriter) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

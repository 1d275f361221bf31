package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

func selecting(name string, gen int64, created time.Time, sel map[string]string) *v1alpha1.FlexNodeRollout {
	return &v1alpha1.FlexNodeRollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: gen, CreationTimestamp: metav1.NewTime(created)},
		Spec:       v1alpha1.RolloutSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: sel}, Release: v1alpha1.Release{KubernetesVersion: "v1.35.4"}},
	}
}

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	r := selecting("b", 3, t0, nil)
	paused := r.DeepCopy()
	paused.Spec.Paused = true
	resumed := r.DeepCopy()
	resumed.Annotations = map[string]string{AnnotationResumedAt: "2026-12-06T08:00:00Z"}
	at := func(p Phase, step, slot string) Record {
		return Record{Rollout: "b", UID: r.UID, Generation: 3, Phase: p, Step: step, Slot: slot}
	}
	old := func(rec Record) Record { rec.Generation = 2; return rec }
	for _, c := range []struct {
		name string
		v    view
		want action
	}{
		{"nothing selects, nothing recorded", view{}, actWait},
		{"nothing selects any more", view{rec: at(PhaseUpdated, "", "")}, actForget},
		{"first sight", view{rollout: r}, actStart},
		{"another rollout", view{rollout: r, rec: Record{Rollout: "a", UID: "uid-a", Generation: 3, Phase: PhaseUpdated}}, actStart},
		{"same name made anew mid-switch", view{rollout: r, rec: Record{Rollout: "b", UID: "uid-old", Phase: PhaseUpdating, Step: StepSwitch}}, actStart},
		{"updated at this generation", view{rollout: r, rec: at(PhaseUpdated, "", "")}, actWait},
		{"updated at an older generation", view{rollout: r, rec: old(at(PhaseUpdated, "", ""))}, actStart},
		{"staged", view{rollout: r, rec: at(PhaseStaged, "", "")}, actTakeSlot},
		{"staged, paused", view{rollout: paused, rec: at(PhaseStaged, "", "")}, actWait},
		{"staged, a peer failed", view{rollout: r, rec: at(PhaseStaged, "", ""), failedPeers: []string{"n9"}}, actWait},
		{"staged at an older generation", view{rollout: r, rec: old(at(PhaseStaged, "", ""))}, actStart},
		{"restart mid-drain", view{rollout: r, rec: at(PhaseUpdating, StepDrain, "b-slot-0")}, actResume},
		{"restart mid-soak, paused since", view{rollout: paused, rec: at(PhaseUpdating, StepSoak, "b-slot-0")}, actResume},
		{"failed with its slot", view{rollout: r, rec: at(PhaseFailed, StepSwitch, "b-slot-0")}, actWait},
		{"failed with its slot, new generation, no resume", view{rollout: r, rec: old(at(PhaseFailed, StepSwitch, "b-slot-0"))}, actWait},
		{"failed to stage, new generation", view{rollout: r, rec: old(at(PhaseFailed, StepStage, ""))}, actStart},
		{"failed to stage, same generation", view{rollout: r, rec: at(PhaseFailed, StepStage, "")}, actWait},
		{"failed, resumed", view{rollout: resumed, rec: at(PhaseFailed, StepSoak, "b-slot-1")}, actRetry},
		{"failed, resume already acted on", view{rollout: resumed, rec: func() Record {
			rec := at(PhaseFailed, StepSoak, "b-slot-1")
			rec.ResumedAt = resumedAt(resumed)
			return rec
		}()}, actWait},
		{"managed elsewhere, first sight", view{rollout: r, managedElsewhere: true}, actManagedElsewhere},
		{"managed elsewhere, reported", view{rollout: r, managedElsewhere: true, rec: at(PhaseManagedElsewhere, "", "")}, actWait},
		{"managed elsewhere no more", view{rollout: r, rec: at(PhaseManagedElsewhere, "", "")}, actStart},
	} {
		got, why := decide(c.v)
		if got != c.want {
			t.Errorf("%s: %s (%s), want %s", c.name, got, why, c.want)
		}
		if why == "" {
			t.Errorf("%s: no reason given", c.name)
		}
	}
}

func TestSelectTakesTheOldest(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "edge", "site": "a"}}}
	all := []*v1alpha1.FlexNodeRollout{
		selecting("late", 1, t0.Add(time.Hour), map[string]string{"pool": "edge"}),
		selecting("zeta", 1, t0, map[string]string{"site": "a"}),
		selecting("alpha", 1, t0, map[string]string{"pool": "edge"}),
		selecting("other", 1, t0.Add(-time.Hour), map[string]string{"pool": "core"}),
	}
	bad := selecting("bad", 1, t0.Add(-2*time.Hour), nil)
	bad.Spec.NodeSelector = nil
	all = append(all, bad)
	got, others := Select(all, n)
	if got == nil || got.Name != "alpha" || strings.Join(others, ",") != "zeta,late" {
		t.Fatalf("chose %v, others %v; want alpha, then zeta,late", nameOf(got), others)
	}
	if got, _ := Select(all[3:], n); got != nil {
		t.Fatalf("chose %s for a Node it does not select", got.Name)
	}
}

func TestPeersCountSelectedAndFailed(t *testing.T) {
	r := selecting("b", 3, time.Now(), map[string]string{"pool": "edge"})
	mk := func(name string, pool string, rel *NodeRelease) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}}
		if rel != nil {
			SetNodeRelease(n, *rel, time.Now())
		}
		return n
	}
	nodes := []*corev1.Node{
		mk("n1", "edge", &NodeRelease{Rollout: "b", Generation: 3, Phase: PhaseFailed, Step: StepStage, Reason: "ChecksumMismatch"}),
		mk("n2", "edge", &NodeRelease{Rollout: "b", Generation: 2, Phase: PhaseFailed}),
		mk("n3", "edge", &NodeRelease{Rollout: "a", Generation: 3, Phase: PhaseFailed}),
		mk("n4", "edge", nil),
		mk("n5", "core", &NodeRelease{Rollout: "b", Generation: 3, Phase: PhaseFailed}),
	}
	selected, failed := peers(r, nodes)
	if selected != 4 || strings.Join(failed, ",") != "n1" {
		t.Fatalf("selected %d failed %v; want 4 and n1", selected, failed)
	}
}

// host is a fake Host whose Healthy answers from a list.
type host struct {
	healthy []error
	probes  atomic.Int32
}

func (h *host) Running(context.Context, v1alpha1.Release) (bool, error) { return false, nil }
func (h *host) Stage(context.Context, v1alpha1.Release) error           { return nil }
func (h *host) Switch(context.Context, v1alpha1.Release, time.Duration) error {
	return nil
}
func (h *host) Healthy(context.Context) error {
	i := int(h.probes.Add(1)) - 1
	if i < len(h.healthy) {
		return h.healthy[i]
	}
	return nil
}

func TestSoakNeedsEveryProbeHealthy(t *testing.T) {
	ctx := context.Background()
	h := &host{}
	a := &Agent{Host: h, SoakProbe: 10 * time.Millisecond}
	began := time.Now()
	if err := a.soak(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d < 200*time.Millisecond {
		t.Errorf("soaked %v, less than the soak", d)
	}
	if n := h.probes.Load(); n < 3 {
		t.Errorf("%d probes in the soak; want several", n)
	}
	bad := errors.New("kubelet restarted 2 times since the switch")
	h = &host{healthy: []error{nil, nil, bad}}
	a.Host = h
	if err := a.soak(ctx, time.Hour); !errors.Is(err, bad) {
		t.Fatalf("soak with a failing probe: %v", err)
	}
	if h.probes.Load() != 3 {
		t.Errorf("%d probes; the soak should stop at the first unhealthy one", h.probes.Load())
	}
	// A zero soak still asks once.
	h = &host{healthy: []error{bad}}
	a.Host = h
	if err := a.soak(ctx, 0); !errors.Is(err, bad) {
		t.Fatalf("zero soak: %v", err)
	}
}

func TestStepAndReason(t *testing.T) {
	err := fmt.Errorf("repave: %w", &StepError{Step: StepDrain, Reason: "DrainTimeout", Err: errors.New("2 pods left")})
	if s, r := stepAndReason(err, StepSwitch, "SwitchFailed"); s != StepDrain || r != "DrainTimeout" {
		t.Errorf("%s %s", s, r)
	}
	if s, r := stepAndReason(errors.New("x"), StepSwitch, "SwitchFailed"); s != StepSwitch || r != "SwitchFailed" {
		t.Errorf("%s %s", s, r)
	}
	if s, r := stepAndReason(&StepError{Reason: "RolledBack", Err: errors.New("x")}, StepSwitch, "SwitchFailed"); s != StepSwitch || r != "RolledBack" {
		t.Errorf("%s %s", s, r)
	}
}

// A heartbeat of the FlexNodeRelease condition, or a kubelet condition
// of the node's own Node, does not move the agent; a phase does.
func TestNodeKeyIsWhatMovesTheAgent(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u", Labels: map[string]string{"a": "b"}}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Message: "ready"}, {Type: ConditionType, Reason: "Staged"}}
	hb := n.DeepCopy()
	hb.Status.Conditions[1].LastHeartbeatTime = metav1.Now()
	hb.Status.Conditions[0].Message = "kubelet is posting ready status"
	if nodeKey(n) != nodeKey(hb) {
		t.Error("a heartbeat or a kubelet condition counts as a change")
	}
	moved := n.DeepCopy()
	moved.Status.Conditions[1].Reason = "Updating"
	if nodeKey(n) == nodeKey(moved) {
		t.Error("a phase change does not count")
	}
}

// The Nodes' conditions hint at the slots in use: Updating, and Failed
// past stage, in this rollout, at any generation.
func TestInUseCountsTheNodesThatHoldSlots(t *testing.T) {
	r := selecting("b", 3, time.Now(), nil)
	var nodes []*corev1.Node
	for i, rel := range []*NodeRelease{
		{Rollout: "b", Generation: 3, Phase: PhaseUpdating, Step: StepDrain},
		{Rollout: "b", Generation: 2, Phase: PhaseUpdating, Step: StepSoak},
		{Rollout: "b", Generation: 3, Phase: PhaseFailed, Step: StepSwitch, Reason: "RolledBack"},
		{Rollout: "b", Generation: 3, Phase: PhaseFailed, Step: StepStage, Reason: "DiskFull"},
		{Rollout: "b", Generation: 3, Phase: PhaseFailed, Step: StepSoak, Reason: "SlotLost"},
		{Rollout: "b", Generation: 3, Phase: PhaseStaged},
		{Rollout: "b", Generation: 3, Phase: PhaseUpdated},
		{Rollout: "a", Generation: 3, Phase: PhaseUpdating, Step: StepDrain},
		nil,
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)}}
		if rel != nil {
			SetNodeRelease(n, *rel, time.Now())
		}
		nodes = append(nodes, n)
	}
	a := &Agent{cache: &agentCache{nodes: storeNodes(t, nodes...)}}
	if got := a.inUse(r); got != 3 {
		t.Errorf("in use %d, want 3 (two Updating, one failed at switch)", got)
	}
	a.Spread = -1
	max1 := intstr.FromInt32(3)
	r.Spec.Strategy.MaxUnavailable = &max1
	if a.mayBeFree(t.Context(), r) {
		t.Error("three in use of three: may be free")
	}
	max2 := intstr.FromInt32(4)
	r.Spec.Strategy.MaxUnavailable = &max2
	if !a.mayBeFree(t.Context(), r) {
		t.Error("three in use of four: not free")
	}
}

// Staging a new rollout starts spread over 50 ms a selected node (a
// minute at most), so a thousand nodes do not pull the release and write
// their Staged condition in the same second; none with Spread negative.
func TestStageWaitGrowsWithTheFleet(t *testing.T) {
	r := selecting("b", 1, time.Now(), map[string]string{"pool": "edge"})
	nodesOf := func(n int) *Agent {
		var nodes []*corev1.Node
		for i := range n {
			nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), Labels: map[string]string{"pool": "edge"}}})
		}
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other"}}) // not selected
		return &Agent{cache: &agentCache{nodes: storeNodes(t, nodes...)}}
	}
	for n, most := range map[int]time.Duration{4: 200 * time.Millisecond, 100: 5 * time.Second, 5000: time.Minute} {
		a := nodesOf(n)
		var longest time.Duration
		for range 200 {
			d := a.stageWait(r)
			if d < 0 || d > most {
				t.Fatalf("%d nodes: a wait of %s, want 0-%s", n, d, most)
			}
			longest = max(longest, d)
		}
		if longest < most/2 {
			t.Errorf("%d nodes: the longest of 200 waits %s, want them spread up to %s", n, longest, most)
		}
		a.Spread = -1
		if d := a.stageWait(r); d != 0 {
			t.Errorf("%d nodes, Spread -1: a wait of %s", n, d)
		}
	}
}

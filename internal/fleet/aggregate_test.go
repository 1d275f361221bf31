package fleet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

var t0 = time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)

// node is a Node in pool edge (or other) reporting phase for rollout rn
// at gen; phase "" reports nothing.
func node(name, pool, rn string, gen int64, phase Phase) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}}
	if phase != "" {
		r := NodeRelease{Rollout: rn, Generation: gen, Phase: phase}
		if phase == PhaseFailed {
			r.Step, r.Reason, r.Message = "switch", "RolledBack", "kubelet exited"
		}
		SetNodeRelease(&n, r, t0)
	}
	return n
}

func rollout(gen int64, paused bool) *v1alpha1.FlexNodeRollout {
	return &v1alpha1.FlexNodeRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-b", Generation: gen},
		Spec:       v1alpha1.RolloutSpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "edge"}}, Paused: paused},
	}
}

func TestAggregate(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		r                             *v1alpha1.FlexNodeRollout
		nodes                         []corev1.Node
		counts                        [5]int32 // selected, staged, updating, updated, failed
		complete, paused, progressing metav1.ConditionStatus
		reason                        string // Complete's reason
	}{
		{"all updated", rollout(2, false), []corev1.Node{
			node("a", "edge", "edge-b", 2, PhaseUpdated), node("b", "edge", "edge-b", 2, PhaseUpdated),
			node("x", "other", "", 0, ""),
		}, [5]int32{2, 0, 0, 2, 0}, "True", "False", "False", "AllNodesUpdated"},
		{"updated at an older generation is not done", rollout(3, false), []corev1.Node{
			node("a", "edge", "edge-b", 3, PhaseUpdated), node("b", "edge", "edge-b", 2, PhaseUpdated),
		}, [5]int32{2, 0, 0, 1, 0}, "False", "False", "True", "NodesPending"},
		{"another rollout's condition does not count", rollout(1, false), []corev1.Node{
			node("a", "edge", "edge-b", 1, PhaseUpdated), node("b", "edge", "edge-c", 1, PhaseUpdated),
		}, [5]int32{2, 0, 0, 1, 0}, "False", "False", "True", "NodesPending"},
		{"in progress", rollout(1, false), []corev1.Node{
			node("a", "edge", "edge-b", 1, PhaseUpdated), node("b", "edge", "edge-b", 1, PhaseUpdating),
			node("c", "edge", "edge-b", 1, PhaseStaged), node("d", "edge", "", 0, ""),
		}, [5]int32{4, 1, 1, 1, 0}, "False", "False", "True", "NodesPending"},
		{"a failure pauses", rollout(1, false), []corev1.Node{
			node("a", "edge", "edge-b", 1, PhaseUpdated), node("b", "edge", "edge-b", 1, PhaseFailed),
		}, [5]int32{2, 0, 0, 1, 1}, "False", "True", "False", "NodesPending"},
		{"paused by spec", rollout(1, true), []corev1.Node{
			node("a", "edge", "edge-b", 1, PhaseStaged),
		}, [5]int32{1, 1, 0, 0, 0}, "False", "True", "False", "NodesPending"},
		{"nothing selected is never complete", rollout(1, false), []corev1.Node{
			node("x", "other", "", 0, ""),
		}, [5]int32{0, 0, 0, 0, 0}, "False", "False", "False", "NoNodesSelected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Aggregate(tc.r, tc.nodes, t0)
			if err != nil {
				t.Fatal(err)
			}
			got := [5]int32{st.Selected, st.Staged, st.Updating, st.Updated, st.Failed}
			if got != tc.counts || st.ObservedGeneration != tc.r.Generation {
				t.Errorf("counts %v (generation %d), want %v", got, st.ObservedGeneration, tc.counts)
			}
			for typ, want := range map[string]metav1.ConditionStatus{v1alpha1.ConditionComplete: tc.complete, v1alpha1.ConditionPaused: tc.paused, v1alpha1.ConditionProgressing: tc.progressing} {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil || c.Status != want || c.ObservedGeneration != tc.r.Generation {
					t.Errorf("%s: %+v, want %s", typ, c, want)
				}
			}
			if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete); c.Reason != tc.reason {
				t.Errorf("Complete reason %s, want %s", c.Reason, tc.reason)
			}
			if int(st.Failed) != len(st.FailedNodes) {
				t.Errorf("failed %d, failed nodes %v", st.Failed, st.FailedNodes)
			}
		})
	}
}

func TestAggregateFailedNodesAndTransitions(t *testing.T) {
	var nodes []corev1.Node
	for i := range 12 {
		nodes = append(nodes, node(fmt.Sprintf("n%02d", 11-i), "edge", "edge-b", 1, PhaseFailed))
	}
	nodes = append(nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "odd", Labels: map[string]string{"pool": "edge"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: ConditionType, Reason: "Staged", Message: "garbage"}}}})
	r := rollout(1, false)
	st, err := Aggregate(r, nodes, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st.FailedNodes[0].Name != "n00" || st.FailedNodes[0].Step != "switch" || st.FailedNodes[0].Reason != "RolledBack" || st.FailedNodes[0].Message != "kubelet exited" {
		t.Errorf("first failed node %+v", st.FailedNodes[0])
	}
	paused := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionPaused)
	if !strings.Contains(paused.Message, "n00, n01") || !strings.Contains(paused.Message, "and 2 more") {
		t.Errorf("paused message %q", paused.Message)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete); !strings.Contains(c.Message, "unreadable") || !strings.Contains(c.Message, "odd") {
		t.Errorf("complete message %q does not name the unreadable node", c.Message)
	}
	// The next pass keeps LastTransitionTime where the status held.
	r.Status = st
	st2, err := Aggregate(r, nodes, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(st2.Conditions, v1alpha1.ConditionPaused); !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Paused moved to %v with no transition", c.LastTransitionTime)
	}
	if _, err := Aggregate(&v1alpha1.FlexNodeRollout{}, nodes, t0); err == nil {
		t.Error("a rollout without a selector aggregated")
	}
}

// TestAggregateManagedElsewhere: a selected node AKS manages through ARM
// is named in status.managedElsewhere and does not hold Complete back;
// one whose condition another rollout wrote is listed too (ARM manages
// it for every rollout); a selector that picks only such nodes is never
// complete.
func TestAggregateManagedElsewhere(t *testing.T) {
	elsewhere := Phase(phaseManagedElsewhere)
	st, err := Aggregate(rollout(1, false), []corev1.Node{
		node("a", "edge", "edge-b", 1, PhaseUpdated), node("m2", "edge", "edge-c", 4, elsewhere),
		node("m1", "edge", "edge-b", 1, elsewhere), node("x", "other", "edge-b", 1, elsewhere),
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(st.ManagedElsewhere, ",") != "m1,m2" || st.Selected != 3 || st.Updated != 1 {
		t.Errorf("managed elsewhere %v, selected %d, updated %d", st.ManagedElsewhere, st.Selected, st.Updated)
	}
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete)
	if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "2 managed elsewhere (m1, m2)") || strings.Contains(c.Message, "unreadable") {
		t.Errorf("Complete %s: %s", c.Status, c.Message)
	}
	st, err = Aggregate(rollout(1, false), []corev1.Node{node("m1", "edge", "edge-b", 1, elsewhere)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete); c.Status != metav1.ConditionFalse {
		t.Errorf("only managed-elsewhere nodes: Complete %s (%s)", c.Status, c.Message)
	} else if c.Reason != "NoNodesSelected" || !strings.Contains(c.Message, "managed elsewhere: m1") {
		t.Errorf("only managed-elsewhere nodes: %s: %s", c.Reason, c.Message)
	}
}

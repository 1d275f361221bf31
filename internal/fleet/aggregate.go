package fleet

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// maxFailedNodes is the schema's bound on status.failedNodes.
const maxFailedNodes = 1000

// Aggregate is the rollout's status as its nodes report it: r's selector
// applied to nodes (all the cluster's Nodes, or any superset of the
// selected), each selected node's FlexNodeRelease condition counted only
// when it is about r at r's generation (a node still reporting an older
// generation has not started this one). Complete is True only when every
// selected node is Updated at r's generation, and never for a selector
// that picks no node (a typo must not read as done). Paused is True when
// spec.paused is set or any node failed. Conditions keep their
// LastTransitionTime while their status holds. Pure: the caller reads and
// writes the cluster.
func Aggregate(r *v1alpha1.FlexNodeRollout, nodes []corev1.Node, now time.Time) (v1alpha1.RolloutStatus, error) {
	if r.Spec.NodeSelector == nil {
		return v1alpha1.RolloutStatus{}, fmt.Errorf("rollout %s: spec.nodeSelector: required", r.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(r.Spec.NodeSelector)
	if err != nil {
		return v1alpha1.RolloutStatus{}, fmt.Errorf("rollout %s: spec.nodeSelector: %w", r.Name, err)
	}
	st := v1alpha1.RolloutStatus{ObservedGeneration: r.Generation, Conditions: append([]metav1.Condition(nil), r.Status.Conditions...)}
	var unreadable []string
	elsewhere := int32(0) // before the list's bound cuts it
	for i := range nodes {
		n := &nodes[i]
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		st.Selected++
		if managedElsewhere(n) {
			st.ManagedElsewhere = append(st.ManagedElsewhere, n.Name)
			elsewhere++
			continue
		}
		rel, ok, err := ReadNodeRelease(n)
		if err != nil {
			unreadable = append(unreadable, n.Name)
			continue
		}
		if !ok || rel.Rollout != r.Name || rel.Generation != r.Generation {
			continue
		}
		switch rel.Phase {
		case PhaseStaged:
			st.Staged++
		case PhaseUpdating:
			st.Updating++
		case PhaseUpdated:
			st.Updated++
		case PhaseFailed:
			st.Failed++
			st.FailedNodes = append(st.FailedNodes, v1alpha1.FailedNode{Name: n.Name, Step: rel.Step, Reason: rel.Reason, Message: bound(rel.Message)})
		}
	}
	sort.Slice(st.FailedNodes, func(i, j int) bool { return st.FailedNodes[i].Name < st.FailedNodes[j].Name })
	if len(st.FailedNodes) > maxFailedNodes {
		st.FailedNodes = st.FailedNodes[:maxFailedNodes]
	}
	sort.Strings(st.ManagedElsewhere)
	if len(st.ManagedElsewhere) > maxFailedNodes {
		st.ManagedElsewhere = st.ManagedElsewhere[:maxFailedNodes]
	}
	setConditions(&st, r, unreadable, elsewhere, now)
	return st, nil
}

func bound(s string) string {
	if len(s) > maxMessage {
		return s[:maxMessage]
	}
	return s
}

func setConditions(st *v1alpha1.RolloutStatus, r *v1alpha1.FlexNodeRollout, unreadable []string, elsewhere int32, now time.Time) {
	set := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: r.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	counts := fmt.Sprintf("%d selected: %d staged, %d updating, %d updated, %d failed", st.Selected, st.Staged, st.Updating, st.Updated, st.Failed)
	if len(unreadable) > 0 {
		counts += fmt.Sprintf("; %d with an unreadable %s condition (%s)", len(unreadable), ConditionType, names(unreadable))
	}
	if elsewhere > 0 {
		counts += fmt.Sprintf("; %d managed elsewhere (%s)", elsewhere, names(st.ManagedElsewhere))
	}
	// A node AKS manages through ARM never takes part, so it does not
	// hold Complete back; a selector that picks only such nodes is not
	// complete either (nothing here updated anything).
	inRollout := st.Selected - elsewhere
	complete := inRollout > 0 && st.Updated == inRollout
	noNodes := "spec.nodeSelector picks no Node"
	if elsewhere > 0 {
		noNodes = "spec.nodeSelector picks only Nodes managed elsewhere: " + names(st.ManagedElsewhere)
	}
	switch {
	case complete:
		set(v1alpha1.ConditionComplete, true, "AllNodesUpdated", counts)
	case inRollout == 0:
		set(v1alpha1.ConditionComplete, false, "NoNodesSelected", noNodes)
	default:
		set(v1alpha1.ConditionComplete, false, "NodesPending", counts)
	}
	var failed []string
	for _, f := range st.FailedNodes {
		failed = append(failed, f.Name)
	}
	paused := r.Spec.Paused || st.Failed > 0
	switch {
	case st.Failed > 0:
		set(v1alpha1.ConditionPaused, true, "NodesFailed", fmt.Sprintf("%d failed and keep their slots: %s", st.Failed, names(failed)))
	case r.Spec.Paused:
		set(v1alpha1.ConditionPaused, true, "PausedBySpec", "spec.paused is true")
	default:
		set(v1alpha1.ConditionPaused, false, "NotPaused", "")
	}
	switch {
	case complete:
		set(v1alpha1.ConditionProgressing, false, "Complete", counts)
	case paused:
		set(v1alpha1.ConditionProgressing, false, "Paused", counts)
	case inRollout == 0:
		set(v1alpha1.ConditionProgressing, false, "NoNodesSelected", noNodes)
	default:
		set(v1alpha1.ConditionProgressing, true, "NodesUpdating", counts)
	}
}

// names lists up to ten names, then how many more.
func names(ns []string) string {
	if len(ns) <= 10 {
		return strings.Join(ns, ", ")
	}
	return strings.Join(ns[:10], ", ") + fmt.Sprintf(" and %d more", len(ns)-10)
}

// phaseManagedElsewhere is the phase a node reports when its config names
// an AKS Machine through ARM (fleet protocol decision 1; the agent's
// release.go names it). Read from the condition's reason alone, so the
// status writer lists such a node whatever the rest of its condition says.
const phaseManagedElsewhere = "ManagedElsewhere"

func managedElsewhere(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == ConditionType {
			return c.Reason == phaseManagedElsewhere
		}
	}
	return false
}

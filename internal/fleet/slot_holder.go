package fleet

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// HolderDown says whether the Node of a slot's holder may be unavailable
// because of the slot (the power-cut rule, issue 29): cordoned, or not
// Ready (NotReady, Unknown once the node lifecycle controller stopped
// hearing from its kubelet, or no Ready condition at all). why names it
// for an operator. An expired slot whose holder is down is kept past its
// lease: another node taking it would make two nodes unavailable under
// maxUnavailable 1 while the first is, say, powered off mid-switch. Only
// a holder that is Ready and schedulable (its agent died, the node
// serves) or whose Node is gone (deleted, or registered again under
// another UID) gives an expired slot up.
//
// The Node must carry its spec.unschedulable and its Ready condition: a
// NodeGetter backed by an informer whose transform drops them would keep
// every expired slot (the safe side: no second node starts).
func HolderDown(n *corev1.Node) (down bool, why string) {
	why = notReady(n)
	if n.Spec.Unschedulable {
		if why != "" {
			return true, why + ", and cordoned"
		}
		return true, "Node cordoned"
	}
	return why != "", why
}

// notReady is why n is not Ready, "" when it is.
func notReady(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return ""
		}
		since := ""
		if !c.LastTransitionTime.IsZero() {
			since = " since " + c.LastTransitionTime.UTC().Format(time.RFC3339)
		}
		if c.Status == corev1.ConditionUnknown {
			return "Node NotReady (Ready Unknown: its kubelet stopped reporting)" + since
		}
		return "Node NotReady" + since
	}
	return "Node reports no Ready condition"
}

// HeldPastExpiry is what an operator reads about a slot kept past its
// lease by a holder that is down (HolderDown): who, why, and the two ways
// out.
func HeldPastExpiry(holder, why string) string {
	return "held by " + holder + ": lease expired, " + why + "; bring the node back or delete its Node (kubectl delete node " + holder + ")"
}

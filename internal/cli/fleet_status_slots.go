package cli

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/Azure/aks-flex-node/internal/fleet"
)

// noteKeptSlots adds to each node's slot in slots (slotsByNode) why it is
// kept past its lease when it is (the power-cut rule: a holder whose Node
// is cordoned or not Ready keeps its slot until it comes back or its Node
// is deleted), so the operator reads what to do. Expiry here is the
// holder's renewTime plus the lease on this machine's clock: a hint for a
// reader. The agents judge it by observation (fleet.Slots), immune to
// clock skew, so a slot a few seconds past its lease here may not be
// expired to them yet.
func noteKeptSlots(slots map[string]string, leases []coordinationv1.Lease, rollout string, nodes []corev1.Node, now time.Time) {
	byName := map[string]*corev1.Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	for _, l := range leases {
		if !slotOf(l.Name, rollout) || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil ||
			l.Annotations[fleet.AnnotationFailedReason] != "" {
			continue
		}
		h, ok := fleet.ParseHolder(derefString(l.Spec.HolderIdentity))
		if !ok {
			continue
		}
		if now.Sub(l.Spec.RenewTime.Time) <= time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second {
			continue
		}
		n := byName[h.Node]
		if n == nil || n.UID != h.UID {
			continue // free: the next taker's
		}
		if down, why := fleet.HolderDown(n); down {
			slots[h.Node] += " (" + fleet.HeldPastExpiry(h.Node, why) + ")"
		}
	}
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

package cli

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A slot kept past its lease by a powered-off holder is named in the
// status with why and what to do; one within its lease, one whose holder
// serves, and one whose holder's Node was registered again are not.
func TestFleetStatusNamesSlotKeptPastLease(t *testing.T) {
	now := time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)
	secs := int32(60)
	lease := func(name, holder string, renewed time.Time) coordinationv1.Lease {
		r := metav1.NewMicroTime(renewed)
		return coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &r}}
	}
	node := func(name, uid string, ready corev1.ConditionStatus, since time.Time) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + uidOr(uid, name))}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(since)}}}}
	}
	leases := []coordinationv1.Lease{
		lease("r-slot-0", "off/uid-off/b", now.Add(-2*time.Minute)),
		lease("r-slot-1", "fresh/uid-fresh/b", now.Add(-10*time.Second)),
		lease("r-slot-2", "serves/uid-serves/b", now.Add(-5*time.Minute)),
		lease("r-slot-3", "again/uid-again/b", now.Add(-5*time.Minute)),
	}
	nodes := []corev1.Node{
		node("off", "", corev1.ConditionUnknown, now.Add(-100*time.Second)),
		node("fresh", "", corev1.ConditionUnknown, now),
		node("serves", "", corev1.ConditionTrue, now),
		node("again", "new", corev1.ConditionFalse, now),
	}
	slots := slotsByNode(leases, "r")
	noteKeptSlots(slots, leases, "r", nodes, now)
	want := "r-slot-0 (held by off: lease expired, Node NotReady (Ready Unknown: its kubelet stopped reporting) since 2026-12-06T10:58:20Z; bring the node back or delete its Node (kubectl delete node off))"
	if slots["off"] != want {
		t.Errorf("the powered-off holder's slot:\n got %q\nwant %q", slots["off"], want)
	}
	for _, n := range []string{"fresh", "serves", "again"} {
		if strings.Contains(slots[n], "expired") {
			t.Errorf("%s: %q", n, slots[n])
		}
	}
}

func uidOr(uid, name string) string {
	if uid != "" {
		return uid
	}
	return name
}

package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

func TestOrderIsStable(t *testing.T) {
	var ns []string
	for i := range 50 {
		ns = append(ns, fmt.Sprintf("node-%02d", i))
	}
	a := Order("uid-1", ns)
	rev := slices.Clone(ns)
	slices.Reverse(rev)
	if b := Order("uid-1", rev); !slices.Equal(a, b) {
		t.Fatal("the order depends on the input's order")
	}
	if slices.Equal(a, ns) {
		t.Fatal("the order is the names' order: not hashed")
	}
	if b := Order("uid-2", ns); slices.Equal(a, b) {
		t.Fatal("two rollouts order 50 nodes the same")
	}
	// Removing a node moves no other relative to the rest.
	without := slices.DeleteFunc(slices.Clone(a), func(s string) bool { return s == a[7] })
	if b := Order("uid-1", without); !slices.Equal(b, without) {
		t.Fatalf("removing %s reordered the rest", a[7])
	}
}

func TestWave(t *testing.T) {
	for _, tc := range []struct{ pos, canary, mu, want int }{
		{0, 1, 3, 0}, {1, 1, 3, 1}, {3, 1, 3, 1}, {4, 1, 3, 2},
		{0, 0, 2, 0}, {1, 0, 2, 0}, {2, 0, 2, 1},
		{1, 2, 1, 0}, {2, 2, 1, 1}, {3, 2, 1, 2},
	} {
		if got := Wave(tc.pos, tc.canary, tc.mu); got != tc.want {
			t.Errorf("Wave(%d, %d, %d) = %d, want %d", tc.pos, tc.canary, tc.mu, got, tc.want)
		}
	}
}

// gateRollout selects pool edge with a canary of 1 and maxUnavailable
// 50%, at generation 1.
func gateRollout() *v1alpha1.FlexNodeRollout {
	r := rollout(1, false)
	r.UID = "0b6c-rollout"
	c, mu := intstr.FromInt32(1), intstr.FromString("50%")
	r.Spec.Strategy.Canary, r.Spec.Strategy.MaxUnavailable = &c, &mu
	return r
}

// sixStaged are six selected nodes, each Staged, in the gate's order.
func sixStaged(t *testing.T, r *v1alpha1.FlexNodeRollout) ([]corev1.Node, []string) {
	var ns []corev1.Node
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("edge-%d", i)
		names = append(names, name)
		ns = append(ns, node(name, "edge", r.Name, r.Generation, PhaseStaged))
	}
	ns = append(ns, node("other", "other", "", 0, ""))
	return ns, Order(r.UID, names)
}

func setPhase(ns []corev1.Node, name string, r *v1alpha1.FlexNodeRollout, p Phase) {
	for i := range ns {
		if ns[i].Name == name {
			ns[i] = node(name, ns[i].Labels["pool"], r.Name, r.Generation, p)
			return
		}
	}
}

// starters are the nodes MayStart lets go, in order.
func starters(t *testing.T, r *v1alpha1.FlexNodeRollout, ns []corev1.Node, order []string) ([]string, map[string]StartDecision) {
	t.Helper()
	var out []string
	all := map[string]StartDecision{}
	for _, n := range append(slices.Clone(order), "other") {
		d, err := MayStart(StartInput{Rollout: r, Self: n, Nodes: ns, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		all[n] = d
		if d.Start {
			out = append(out, n)
		}
	}
	return out, all
}

func TestMayStartCanaryThenWaves(t *testing.T) {
	r := gateRollout()
	ns, order := sixStaged(t, r)
	// Only the canary.
	got, all := starters(t, r, ns, order)
	if !slices.Equal(got, order[:1]) || !strings.Contains(all[order[1]].Why, "canaries") || all["other"].Start {
		t.Fatalf("all staged: %v start (%q), want the canary %s alone", got, all[order[1]].Why, order[0])
	}
	// The canary switching, then soaking: still alone.
	setPhase(ns, order[0], r, PhaseUpdating)
	if got, _ := starters(t, r, ns, order); len(got) != 0 {
		t.Fatalf("canary updating: %v start", got)
	}
	// The canary soaked: 50% of 6 is 3 slots, taken in order.
	setPhase(ns, order[0], r, PhaseUpdated)
	if got, all := starters(t, r, ns, order); !slices.Equal(got, order[1:4]) || all[order[4]].Wave != 2 {
		t.Fatalf("canary updated: %v start, want %v; %+v", got, order[1:4], all[order[4]])
	}
	// One of them switching: two free slots for the next two.
	setPhase(ns, order[1], r, PhaseUpdating)
	if got, _ := starters(t, r, ns, order); !slices.Equal(got, order[2:4]) {
		t.Fatalf("one updating: %v start, want %v", got, order[2:4])
	}
	// A node not staged yet does not hold the ones behind it back.
	// (It would be let go itself once staged: the gate is asked by a
	// node that has staged, whatever its Node shows yet.)
	setPhase(ns, order[2], r, "")
	got, _ = starters(t, r, ns, order)
	if got = slices.DeleteFunc(got, func(n string) bool { return n == order[2] }); !slices.Equal(got, order[3:5]) {
		t.Fatalf("one unstaged: %v start, want %v", got, order[3:5])
	}
	// A failure pauses everyone.
	setPhase(ns, order[1], r, PhaseFailed)
	if got, all := starters(t, r, ns, order); len(got) != 0 || !strings.HasPrefix(all[order[3]].Why, "paused: 1 failed") {
		t.Fatalf("one failed: %v start (%q)", got, all[order[3]].Why)
	}
}

func TestMayStartHoldPlanPauseManagedElsewhere(t *testing.T) {
	r := gateRollout()
	ns, order := sixStaged(t, r)
	ns[slices.IndexFunc(ns, func(n corev1.Node) bool { return n.Name == order[0] })].Labels[HoldLabel] = "true"
	got, all := starters(t, r, ns, order)
	if !all[order[0]].Held || all[order[0]].Start {
		t.Fatalf("held node: %+v", all[order[0]])
	}
	// The held node leaves the order: the next one is the canary.
	if !slices.Equal(got, order[1:2]) || all[order[1]].Position != 0 {
		t.Fatalf("with %s held: %v start, want %s as the canary", order[0], got, order[1])
	}
	// A node managed elsewhere is not in the order either.
	setPhase(ns, order[1], r, PhaseManagedElsewhere)
	if got, _ := starters(t, r, ns, order); !slices.Equal(got, order[2:3]) {
		t.Fatalf("managed elsewhere: %v start, want %s", got, order[2])
	}
	r.Spec.Strategy.Mode = v1alpha1.ModePlan
	if got, all := starters(t, r, ns, order); len(got) != 0 || !strings.HasPrefix(all[order[2]].Why, "mode Plan") {
		t.Fatalf("plan: %v start", got)
	}
	r.Spec.Strategy.Mode, r.Spec.Paused = v1alpha1.ModeRollout, true
	if got, _ := starters(t, r, ns, order); len(got) != 0 {
		t.Fatalf("paused: %v start", got)
	}
}

func TestMayStartWindows(t *testing.T) {
	r := gateRollout()
	ns, order := sixStaged(t, r)
	// t0 is Sunday 05:00Z; the window opens at 06:00Z.
	r.Spec.Strategy.Windows = []v1alpha1.Window{{Days: []v1alpha1.Weekday{"Sun"}, Start: "06:00", End: "07:00"}}
	got, all := starters(t, r, ns, order)
	if len(got) != 0 || !all[order[0]].Retry.Equal(utc("2026-12-06T06:00:00Z")) {
		t.Fatalf("closed window: %v start, retry %v", got, all[order[0]].Retry)
	}
	r.Spec.Strategy.Windows[0].Start = "05:00"
	if got, _ := starters(t, r, ns, order); !slices.Equal(got, order[:1]) {
		t.Fatalf("open window: %v start", got)
	}
}

// TestMayStartRollback: a rollback has no canary and no windows, and a
// failed node does not stop it; maxUnavailable still bounds it.
func TestMayStartRollback(t *testing.T) {
	r := gateRollout()
	r.Generation = 2
	r.Spec.Rollback = &v1alpha1.RollbackRequest{Reason: "pods crash"}
	r.Spec.Strategy.Windows = []v1alpha1.Window{{Days: []v1alpha1.Weekday{"Mon"}, Start: "06:00", End: "07:00"}}
	ns, order := sixStaged(t, r)
	setPhase(ns, order[5], r, PhaseFailed)
	setPhase(ns, order[4], r, PhaseRolledBack)
	if got, _ := starters(t, r, ns, order); !slices.Equal(got, order[:3]) {
		t.Fatalf("rollback: %v start, want %v", got, order[:3])
	}
	r.Spec.Paused = true
	if got, _ := starters(t, r, ns, order); len(got) != 0 {
		t.Fatalf("paused rollback: %v start", got)
	}
}

func TestRolloutOrder(t *testing.T) {
	r := gateRollout()
	ns, order := sixStaged(t, r)
	ns[0].Labels[HoldLabel] = "true"
	rows, err := RolloutOrder(r, ns)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(slices.Clone(order), func(n string) bool { return n == ns[0].Name })
	if len(rows) != 5 {
		t.Fatalf("%d rows, want the 5 not held", len(rows))
	}
	for i, row := range rows {
		// 50% of 6 selected is 3 slots; one canary.
		if row.Node != want[i] || row.Position != i || row.Canary != (i == 0) || row.Wave != Wave(i, 1, 3) {
			t.Errorf("row %d: %+v, want %s", i, row, want[i])
		}
	}
	if rows[1].Wave != 1 || rows[4].Wave != 2 {
		t.Errorf("waves %d, %d", rows[1].Wave, rows[4].Wave)
	}
}

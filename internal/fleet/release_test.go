package fleet

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestNodeReleaseRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	for _, r := range []NodeRelease{
		{Rollout: "edge-b", Generation: 3, Phase: PhaseStaged, Step: "stage"},
		{Rollout: "edge-b", Generation: 3, Phase: PhaseUpdating, Step: "drain"},
		{Rollout: "edge.b-2", Generation: 12, Phase: PhaseUpdated},
		{Rollout: "edge-b", Generation: 3, Phase: PhaseFailed, Step: "switch", Reason: "RolledBack", Message: "kubelet exited: status 1\nsecond line"},
		{Rollout: "edge-b", Generation: 3, Phase: PhaseManagedElsewhere, Reason: "AKSMachine", Message: "its AKS Machine is the goal"},
	} {
		n := &corev1.Node{}
		c := SetNodeRelease(n, r, t0)
		got, ok, err := ReadNodeRelease(n)
		r.Since = t0
		if err != nil || !ok || got != r {
			t.Errorf("%+v: read back %+v, %v, %v (message %q)", r, got, ok, err, c.Message)
		}
		want := map[Phase]corev1.ConditionStatus{PhaseUpdated: "True", PhaseFailed: "False", PhaseStaged: "Unknown", PhaseUpdating: "Unknown", PhaseManagedElsewhere: "Unknown"}[r.Phase]
		if c.Status != want || c.Reason != string(r.Phase) {
			t.Errorf("%s: status %s reason %s", r.Phase, c.Status, c.Reason)
		}
	}
}

// Since moves only on a transition: a re-report keeps it.
func TestSetNodeReleaseKeepsSince(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: "True"}}}}
	r := NodeRelease{Rollout: "r", Generation: 1, Phase: PhaseUpdating, Step: "soak"}
	SetNodeRelease(n, r, t0)
	c := SetNodeRelease(n, r, t0.Add(time.Minute))
	if !c.LastTransitionTime.Time.Equal(t0) || !c.LastHeartbeatTime.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("re-report: transition %v heartbeat %v", c.LastTransitionTime, c.LastHeartbeatTime)
	}
	r.Phase = PhaseUpdated
	c = SetNodeRelease(n, r, t0.Add(2*time.Minute))
	if !c.LastTransitionTime.Time.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("transition kept the old since: %v", c.LastTransitionTime)
	}
	if len(n.Status.Conditions) != 2 || n.Status.Conditions[0].Type != corev1.NodeReady {
		t.Errorf("conditions %v", n.Status.Conditions)
	}
}

func TestReadNodeReleaseRefusesForeignConditions(t *testing.T) {
	for _, c := range []corev1.NodeCondition{
		{Type: ConditionType, Reason: "Staged", Message: "hello"},
		{Type: ConditionType, Reason: "Done", Message: "rollout=r generation=1 step= reason="},
		{Type: ConditionType, Reason: "Staged", Message: "rollout=R generation=1 step= reason="},
		{Type: ConditionType, Reason: "Staged", Message: "rollout=r generation=99999999999999999999 step= reason="},
	} {
		n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{c}}}
		n.Name = "n1"
		if _, ok, err := ReadNodeRelease(n); !ok || err == nil || !strings.Contains(err.Error(), "node n1") {
			t.Errorf("%+v: ok %v err %v", c, ok, err)
		}
	}
	if _, ok, err := ReadNodeRelease(&corev1.Node{}); ok || err != nil {
		t.Errorf("no condition: %v %v", ok, err)
	}
}

func TestConditionPatch(t *testing.T) {
	c := NodeRelease{Rollout: "r", Generation: 2, Phase: PhaseStaged, Since: time.Unix(0, 0)}.Condition(time.Unix(60, 0))
	data, err := ConditionPatch(c)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Status struct{ Conditions []corev1.NodeCondition }
	}
	if err := json.Unmarshal(data, &p); err != nil || len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != ConditionType {
		t.Fatalf("%s: %v", data, err)
	}
}

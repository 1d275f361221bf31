package lifecycle

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/metrics"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// The repave's task names are an interface, like start's: logs, the
// e2e tests and `make bench-repave` read them.
func TestRepaveTaskNames(t *testing.T) {
	r := NewRepave(RepaveOptions{Options: Options{Config: &config.Config{}}}, state.Applied{Machine: layout.MachineBlue})
	var got []string
	for _, p := range append(r.Phases("v2"), r.RollbackPhase()) {
		got = append(got, p.Name+": "+strings.Join(p.Names(), ","))
	}
	want := []string{
		"stage: stage-node-components",
		"prepare: stop-other-machine,provision-machine,install-node-components,write-nspawn-files,write-node-config",
		"drain: cordon-node,drain-node",
		"switch: stop-active-machine,hand-over-identity,write-pod-network,start-machine,import-images,wait-node-version",
		"finish: save-state,uncordon-node",
		"rollback: stop-new-machine,start-machine,wait-node-version,uncordon-node",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("repave phases:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.From() != "kube1" || r.To() != "kube2" {
		t.Errorf("from kube1: %s -> %s", r.From(), r.To())
	}
	r = NewRepave(RepaveOptions{Options: Options{Config: &config.Config{}}}, state.Applied{Machine: layout.MachineGreen})
	if r.From() != "kube2" || r.To() != "kube1" {
		t.Errorf("from kube2: %s -> %s", r.From(), r.To())
	}
	if d := DescribeRepave(); !strings.Contains(d, "version-skew") || !strings.Contains(d, "hand-over-identity") {
		t.Errorf("DescribeRepave:\n%s", d)
	}
}

// fakeHost is machinectl and systemctl for two machines, and the API
// server's Node, which a machine that starts brings to Ready at its
// kubelet's version with a new heartbeat (unless that kubelet fails).
type fakeHost struct {
	mu       sync.Mutex
	state    map[string]string
	versions map[string]string // kubelet version per machine; "" never Ready
	cs       *fake.Clientset
	clock    time.Time
	calls    []string
}

func newFakeHost(t *testing.T, active, version string) *fakeHost {
	h := &fakeHost{state: map[string]string{"kube1": "inactive", "kube2": "inactive"}, versions: map[string]string{}, clock: time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)}
	h.state[active] = "active"
	h.cs = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}})
	h.post(t.Context(), version, corev1.ConditionTrue)
	return h
}

// post is a kubelet's status update: its version, Ready, a new heartbeat.
func (h *fakeHost) post(ctx context.Context, version string, ready corev1.ConditionStatus) {
	h.clock = h.clock.Add(time.Second)
	n, _ := h.cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	n.Status.NodeInfo.KubeletVersion = "v" + version
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: metav1.NewTime(h.clock)}}
	_, _ = h.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
}

func (h *fakeHost) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, name+" "+strings.Join(args, " "))
	switch {
	case name == "systemctl" && args[0] == "show":
		m := strings.TrimSuffix(strings.TrimPrefix(args[1], "systemd-nspawn@"), ".service")
		return []byte("ActiveState=" + h.state[m] + "\n"), nil
	case name == "machinectl" && args[0] == "poweroff":
		h.state[args[1]] = "inactive"
	case name == "machinectl" && args[0] == "start":
		h.state[args[1]] = "active"
		if v := h.versions[args[1]]; v != "" {
			h.post(ctx, v, corev1.ConditionTrue)
		}
	case name == "machinectl" && args[0] == "show":
		return []byte("1234\n"), nil
	case name == "nsenter":
		return []byte("running\n"), nil
	}
	return nil, nil
}

func newTestRepave(t *testing.T, h *fakeHost, from string, applied string) (*Repave, layout.Layout) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	c := &config.Config{}
	c.Agent.NodeName = "n1"
	r := NewRepave(RepaveOptions{
		Options:           Options{Layout: l, Config: c, Exec: h.run},
		KubernetesVersion: "1.35.4", ReadyTimeout: 2 * time.Second,
		NewClient: func(*config.Config, layout.Layout, string) (kubeclient.Interface, error) {
			return kubeclienttest.Wrap(h.cs), nil
		},
	}, state.Applied{Machine: from, KubernetesVersion: applied})
	r.from.Control.Poll, r.to.Control.Poll = time.Millisecond, time.Millisecond
	return r, l
}

func sidesFor(from, version string) (*state.Sides, *state.Repave) {
	s := &state.Sides{Active: from, Machines: map[string]state.Side{from: {KubernetesVersion: version}}}
	rec := &state.Repave{FromMachine: from, ToMachine: layout.Layout{}.OtherMachine(from), FromVersion: version, ToVersion: "1.35.4", Started: time.Now()}
	s.InFlight = rec
	return s, rec
}

// A new side that never becomes Ready is rolled back: it is stopped, the
// old side starts and is Ready at its own version (a heartbeat after the
// rollback began), the node is uncordoned, and the record says why.
func TestRepaveRollsBackANewSideThatIsNotReady(t *testing.T) {
	h := newFakeHost(t, "kube2", "1.34.2") // the new side runs, its kubelet failing
	h.versions["kube1"] = "1.34.2"
	r, l := newTestRepave(t, h, "kube1", "1.34.2")
	h.state["kube1"] = "inactive"
	if _, err := SetUnschedulable(t.Context(), r.client, "n1", true); err != nil {
		t.Fatal(err)
	}
	sides, rec := sidesFor("kube1", "1.34.2")
	err := r.failed(t.Context(), sides, rec, SwitchPhase, errors.New("node n1 not Ready at kubelet 1.35.4"))
	var rb *RolledBackError
	if !errors.As(err, &rb) || rb.To != "kube2" {
		t.Fatalf("failed in switch = %v, want a rollback", err)
	}
	if h.state["kube1"] != "active" || h.state["kube2"] != "inactive" {
		t.Errorf("machines after the rollback: %v", h.state)
	}
	n, _ := h.cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	if n.Spec.Unschedulable || n.UID != "uid-1" {
		t.Errorf("node after the rollback: unschedulable=%v uid=%s", n.Spec.Unschedulable, n.UID)
	}
	got, lerr := state.Open(l).Sides()
	if lerr != nil || got == nil || got.Active != "kube1" || got.InFlight != nil || got.Last == nil ||
		got.Last.Result != state.RepaveRolledBack || !strings.Contains(got.Last.Reason, "not Ready at kubelet 1.35.4") ||
		!strings.Contains(got.Machines["kube2"].Failed, "not Ready") {
		t.Errorf("sides after the rollback: %+v %+v, %v", got, got.Last, lerr)
	}
	if ev := nodeEvents(t, h)[events.ReasonRolledBack]; !strings.Contains(ev, "Warning: repave from machine kube1 (Kubernetes 1.34.2) to machine kube2 (Kubernetes 1.35.4): rolled back: machine kube2 did not become Ready: node n1 not Ready at kubelet 1.35.4") ||
		!strings.Contains(ev, "machine kube1 serves again") {
		t.Errorf("RolledBack Event: %q", ev)
	}
	repaveMetric(t, l, "rolled-back", 1)
}

// nodeEvents are the Events recorded, by reason: "type: message".
func nodeEvents(t *testing.T, h *fakeHost) map[string]string {
	t.Helper()
	evs, err := h.cs.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range evs.Items {
		out[e.Reason] = e.Type + ": " + e.Message
	}
	return out
}

// repaveMetric checks the repave histogram's count for result, as the
// agent serves it from the store.
func repaveMetric(t *testing.T, l layout.Layout, result string, want uint64) {
	t.Helper()
	mfs, err := metrics.NewRegistry(l).Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.Namespace+"_repave_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "result" && lp.GetValue() == result {
					if got := m.GetHistogram().GetSampleCount(); got != want {
						t.Errorf("repave_duration_seconds{result=%q} count %d, want %d", result, got, want)
					}
					return
				}
			}
		}
	}
	t.Errorf("no repave_duration_seconds{result=%q} in %d metric families", result, len(mfs))
}

// A rollback whose old side does not come back either says so, and the
// record is a failure, not a rollback.
func TestRepaveRollbackThatFailsIsReported(t *testing.T) {
	h := newFakeHost(t, "kube2", "1.34.2") // kube1's kubelet never posts
	r, l := newTestRepave(t, h, "kube1", "1.34.2")
	sides, rec := sidesFor("kube1", "1.34.2")
	err := r.failed(t.Context(), sides, rec, SwitchPhase, errors.New("not Ready"))
	var rb *RolledBackError
	if err == nil || errors.As(err, &rb) || !strings.Contains(err.Error(), "rollback: ") {
		t.Fatalf("failed rollback = %v", err)
	}
	if got, _ := state.Open(l).Sides(); got == nil || got.Last == nil || got.Last.Result != state.RepaveFailed {
		t.Errorf("sides: %+v", got)
	}
}

// A drain that does not finish leaves the old side serving, uncordoned.
func TestRepaveFailedDrainUncordons(t *testing.T) {
	h := newFakeHost(t, "kube1", "1.34.2")
	r, l := newTestRepave(t, h, "kube1", "1.34.2")
	if _, err := SetUnschedulable(t.Context(), r.client, "n1", true); err != nil {
		t.Fatal(err)
	}
	sides, rec := sidesFor("kube1", "1.34.2")
	err := r.failed(t.Context(), sides, rec, "drain", errors.New("pods left after 1s: default/a"))
	if err == nil || !strings.Contains(err.Error(), "default/a") {
		t.Fatalf("failed drain = %v", err)
	}
	n, _ := h.cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	if n.Spec.Unschedulable || h.state["kube1"] != "active" {
		t.Errorf("after a failed drain: unschedulable=%v machines %v", n.Spec.Unschedulable, h.state)
	}
	if got, _ := state.Open(l).Sides(); got.Last.Result != state.RepaveFailed || got.Active != "kube1" {
		t.Errorf("sides: %+v", got)
	}
	if ev := nodeEvents(t, h)[events.ReasonRepaveFailed]; !strings.Contains(ev, "Warning: repave from machine kube1 (Kubernetes 1.34.2) to machine kube2 (Kubernetes 1.35.4) failed after") || !strings.Contains(ev, "default/a") {
		t.Errorf("RepaveFailed Event: %q", ev)
	}
	repaveMetric(t, l, "failed", 1)
}

// The new side is Ready only at the new version with a heartbeat after
// the old side stopped: the Ready the stopped kubelet left does not count.
func TestWaitNodeVersionNeedsTheNewKubelet(t *testing.T) {
	h := newFakeHost(t, "kube1", "1.35.4")
	r, _ := newTestRepave(t, h, "kube1", "1.35.4")
	hb := taskOutput(t, r, h)
	_, err := WaitNodeVersion(r.to, r.client, "n1", "1.35.4", 300*time.Millisecond, hb, nil).Do(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no heartbeat since the switch") {
		t.Fatalf("a stale Ready = %v", err)
	}
	h.post(t.Context(), "1.35.4", corev1.ConditionTrue)
	if _, err := WaitNodeVersion(r.to, r.client, "n1", "1.35.4", time.Second, hb, nil).Do(t.Context()); err != nil {
		t.Fatalf("the new kubelet's Ready: %v", err)
	}
	if _, err := WaitNodeVersion(r.to, r.client, "n1", "1.36.0", 300*time.Millisecond, hb, nil).Do(t.Context()); err == nil || !strings.Contains(err.Error(), "waiting for 1.36.0") {
		t.Fatalf("another version: %v", err)
	}
}

// A rollback whose Node was deleted mid-switch (an operator did; the
// fleet rollout e2e does) still stops the new side: the Node's absence
// failed it before, and the old side stayed stopped until the agent's
// recovery. The mark handed on is the moment it stopped, so a Ready the
// stopped kubelet posted does not count for the side that starts next.
func TestStopNewMachineWhenTheNodeIsGone(t *testing.T) {
	h := newFakeHost(t, "kube2", "1.35.4")
	r, _ := newTestRepave(t, h, "kube1", "1.34.2")
	if err := h.cs.CoreV1().Nodes().Delete(t.Context(), "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	hb := task.NewOutput[time.Time]("stop-new-machine")
	before := time.Now().Truncate(time.Second)
	res, err := StopNewMachine(r.to, r.client, "n1", hb).Do(t.Context())
	if err != nil {
		t.Fatalf("stop-new-machine without a Node: %v", err)
	}
	if h.state["kube2"] != "inactive" || !res.Changed || !strings.Contains(res.Detail, "Node n1 is gone") {
		t.Errorf("stop-new-machine without a Node: kube2 %s, result %+v", h.state["kube2"], res)
	}
	if got, err := hb.Get(); err != nil || got.Before(before) || got.After(time.Now()) {
		t.Errorf("the mark without a Node: %v (%v), want the moment kube2 stopped (after %v)", got, err, before)
	}
	// With the Node there, the mark is its last heartbeat, as always.
	h2 := newFakeHost(t, "kube2", "1.35.4")
	r2, _ := newTestRepave(t, h2, "kube1", "1.34.2")
	hb2 := task.NewOutput[time.Time]("stop-new-machine")
	if _, err := StopNewMachine(r2.to, r2.client, "n1", hb2).Do(t.Context()); err != nil {
		t.Fatalf("stop-new-machine with the Node: %v", err)
	}
	if got, _ := hb2.Get(); !got.Equal(h2.clock) {
		t.Fatalf("the mark with the Node: %v, want its last heartbeat %v", got, h2.clock)
	}
}

// taskOutput runs stop-active-machine, which hands the heartbeat on.
func taskOutput(t *testing.T, r *Repave, h *fakeHost) *task.Output[time.Time] {
	if _, err := StopActiveMachine(r.from, r.client, "n1", r.heartbeat).Do(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h.state["kube1"] != "inactive" {
		t.Fatalf("stop-active-machine left kube1 %s", h.state["kube1"])
	}
	return r.heartbeat
}

// `node upgrade` first finishes a repave a crash left in flight (here one
// killed after it started the new side, the node cordoned): the applied
// state's side alone runs, the Node is uncordoned and the record closed as
// interrupted, before the new repave looks at the state.
func TestRepaveRecoversAnInterruptedOneFirst(t *testing.T) {
	h := newFakeHost(t, "kube2", "1.35.4")
	r, l := newTestRepave(t, h, "kube1", "1.34.2")
	dir := l.OnRoot(l.StateDir())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := state.OpenDir(dir).SaveApplied(state.Applied{NodeName: "n1", Machine: "kube1", KubernetesVersion: "1.34.2"}); err != nil {
		t.Fatal(err)
	}
	sides, rec := sidesFor("kube1", "1.34.2")
	rec.Step = SwitchPhase
	if err := state.OpenDir(dir).SaveSides(*sides); err != nil {
		t.Fatal(err)
	}
	if _, err := SetUnschedulable(t.Context(), r.client, "n1", true); err != nil {
		t.Fatal(err)
	}
	if err := r.recoverInterrupted(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h.state["kube1"] != "active" || h.state["kube2"] != "inactive" {
		t.Errorf("machines after the recovery: %v", h.state)
	}
	n, _ := h.cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	if n.Spec.Unschedulable {
		t.Error("the Node is left cordoned")
	}
	got, err := state.OpenDir(dir).Sides()
	if err != nil || got.InFlight != nil || got.Last == nil || got.Last.Result != state.RepaveInterrupted || got.Active != "kube1" {
		t.Fatalf("sides after the recovery: %+v (%v)", got, err)
	}
}

// Issue 26 item 13a: a Node an operator cordoned before the repave stays
// cordoned on every path the repave ends by: a failed drain, a rollback,
// and a repave that succeeds (finish's uncordon); a Node the repave
// cordoned itself is uncordoned on each.
func TestRepaveKeepsAnOperatorsCordonOnEveryPath(t *testing.T) {
	for _, before := range []bool{true, false} {
		// failed drain
		h := newFakeHost(t, "kube1", "1.34.2")
		r, _ := newTestRepave(t, h, "kube1", "1.34.2")
		if _, err := SetUnschedulable(t.Context(), r.client, "n1", true); err != nil {
			t.Fatal(err)
		}
		sides, rec := sidesFor("kube1", "1.34.2")
		rec.WasUnschedulable = before
		_ = r.failed(t.Context(), sides, rec, "drain", errors.New("pods left"))
		if n, _ := h.cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{}); n.Spec.Unschedulable != before {
			t.Errorf("cordoned before=%v: after a failed drain unschedulable=%v", before, n.Spec.Unschedulable)
		}
		// rollback
		h = newFakeHost(t, "kube2", "1.34.2")
		h.versions["kube1"] = "1.34.2"
		r, _ = newTestRepave(t, h, "kube1", "1.34.2")
		h.state["kube1"] = "inactive"
		if _, err := SetUnschedulable(t.Context(), r.client, "n1", true); err != nil {
			t.Fatal(err)
		}
		sides, rec = sidesFor("kube1", "1.34.2")
		rec.WasUnschedulable = before
		var rb *RolledBackError
		if err := r.failed(t.Context(), sides, rec, SwitchPhase, errors.New("not Ready")); !errors.As(err, &rb) {
			t.Fatalf("rollback: %v", err)
		}
		if n, _ := h.cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{}); n.Spec.Unschedulable != before {
			t.Errorf("cordoned before=%v: after a rollback unschedulable=%v", before, n.Spec.Unschedulable)
		}
		// finish: the last task of a repave that succeeds
		r.cordonedBefore = before
		finish := r.Phases("v2")[4]
		uncordon := finish.Tasks[len(finish.Tasks)-1]
		if uncordon.Name() != "uncordon-node" {
			t.Fatalf("finish ends with %s", uncordon.Name())
		}
		if _, err := SetUnschedulable(t.Context(), r.client, "n1", true); err != nil {
			t.Fatal(err)
		}
		if _, err := uncordon.Do(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n, _ := h.cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{}); n.Spec.Unschedulable != before {
			t.Errorf("cordoned before=%v: after finish unschedulable=%v", before, n.Spec.Unschedulable)
		}
	}
}

// Issue 26 item 13b: every crash point of the repave, the rollback
// phase's included, has a name of its own (phase-qualified): the
// rollback's start-machine, wait-node-version and uncordon-node are not
// the switch's or finish's.
func TestRepaveRollbackCrashPointsAreDistinct(t *testing.T) {
	r := NewRepave(RepaveOptions{Options: Options{Config: &config.Config{}}}, state.Applied{Machine: layout.MachineBlue})
	seen := map[string]bool{}
	for _, p := range append(r.Phases("v2"), r.RollbackPhase()) {
		for _, s := range p.Steps() {
			if seen[s] || !strings.HasPrefix(s, p.Name+".") {
				t.Errorf("crash point %q of phase %s: not distinct or not qualified", s, p.Name)
			}
			seen[s] = true
		}
	}
	if !seen["rollback.start-machine"] || !seen["switch.start-machine"] {
		t.Errorf("crash points: %v", seen)
	}
}

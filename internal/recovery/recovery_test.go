package recovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/state"
)

// host is a fake host: machines' unit states as systemd answers them, and
// every machinectl call in order.
type host struct {
	states map[string]string
	calls  []string
}

func (h *host) run(_ context.Context, name string, args ...string) ([]byte, error) {
	switch {
	case name == "systemctl" && args[0] == "show":
		m := strings.TrimSuffix(strings.TrimPrefix(args[1], "systemd-nspawn@"), ".service")
		st := h.states[m]
		if st == "" {
			st = "inactive"
		}
		return []byte("ActiveState=" + st + "\n"), nil
	case name == "machinectl":
		h.calls = append(h.calls, args[0]+" "+args[1])
		switch args[0] {
		case "start":
			h.states[args[1]] = "active"
		case "poweroff", "terminate":
			h.states[args[1]] = "inactive"
		}
	}
	return nil, nil
}

func (h *host) running() []string {
	var out []string
	for m, st := range h.states {
		if st == "active" {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

const node = "node-1"

// setup is a joined host whose applied state names active, with a repave
// kube1 -> kube2 in flight at step.
func setup(t *testing.T, active, step string, wasUnschedulable bool) layout.Layout {
	t.Helper()
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := l.OnRoot(l.StateDir())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := state.OpenDir(dir).SaveApplied(state.Applied{NodeName: node, Machine: active, KubernetesVersion: "1.35.4", Image: "img:2", ImageDigest: "sha256:2"}); err != nil {
		t.Fatal(err)
	}
	s := state.Sides{Active: "kube1", Machines: map[string]state.Side{"kube1": {KubernetesVersion: "1.34.2", ImageDigest: "sha256:1"}},
		InFlight: &state.Repave{FromMachine: "kube1", ToMachine: "kube2", FromVersion: "1.34.2", ToVersion: "1.35.4",
			Started: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Step: step, WasUnschedulable: wasUnschedulable}}
	if err := state.OpenDir(dir).SaveSides(s); err != nil {
		t.Fatal(err)
	}
	return l
}

func cordoned(t *testing.T, cs kubernetes.Interface) bool {
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Unschedulable
}

// The rule at each step a crash can leave in flight: the applied state's
// side runs alone, the Node is schedulable again when this repave may have
// cordoned it, and the record is closed as interrupted, twice the same.
func TestRepaveConvergesToTheAppliedSide(t *testing.T) {
	cases := []struct {
		name, applied, step string
		before              map[string]string
		wasUnschedulable    bool
		wantUncordoned      bool
		wantStarts          []string
	}{
		{"in prepare, old side serving", "kube1", "prepare", map[string]string{"kube1": "active"}, false, false, nil},
		{"in drain, cordoned by it", "kube1", "drain", map[string]string{"kube1": "active"}, false, true, nil},
		{"in drain, cordoned by an admin before", "kube1", "drain", map[string]string{"kube1": "active"}, true, false, nil},
		{"in switch, new side started", "kube1", "switch", map[string]string{"kube2": "active"}, false, true, []string{"poweroff kube2", "start kube1"}},
		{"in switch, power cut", "kube1", "switch", map[string]string{}, false, true, []string{"start kube1"}},
		{"in switch, keeper started the old side", "kube1", "switch", map[string]string{"kube1": "active", "kube2": "active"}, false, true, []string{"poweroff kube2"}},
		{"after save-state, new side serving", "kube2", "finish", map[string]string{"kube2": "active"}, false, true, nil},
		{"after save-state, power cut", "kube2", "finish", map[string]string{}, false, true, []string{"start kube2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := setup(t, tc.applied, tc.step, tc.wasUnschedulable)
			h := &host{states: tc.before}
			cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: corev1.NodeSpec{Unschedulable: true}})
			now := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
			e := Env{Layout: l, Control: &machine.Control{Run: h.run, Poll: time.Millisecond}, NodeName: node,
				Client: func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil }, Now: func() time.Time { return now }}
			if !InFlight(l) {
				t.Fatal("InFlight does not see the record")
			}
			rec, err := Repave(context.Background(), e)
			if err != nil {
				t.Fatal(err)
			}
			if got := h.running(); !slices.Equal(got, []string{tc.applied}) {
				t.Errorf("running %v, want only %s", got, tc.applied)
			}
			if !slices.Equal(h.calls, tc.wantStarts) {
				t.Errorf("machinectl calls %q, want %q (the other side stopped before the active one starts)", h.calls, tc.wantStarts)
			}
			if got := !cordoned(t, cs); got != tc.wantUncordoned {
				t.Errorf("uncordoned = %v, want %v", got, tc.wantUncordoned)
			}
			if rec == nil || rec.Result != state.RepaveInterrupted || rec.Step != "" || rec.Duration != time.Minute ||
				!strings.Contains(rec.Reason, "at its "+tc.step+" step") || !strings.Contains(rec.Reason, "serves on "+tc.applied) {
				t.Fatalf("closed record %+v", rec)
			}
			s, err := state.Open(l).Sides()
			if err != nil || s.InFlight != nil || s.Last == nil || s.Last.Result != state.RepaveInterrupted || s.Active != tc.applied {
				t.Fatalf("sides after recovery: %+v (%v)", s, err)
			}
			if tc.applied == "kube2" && (s.Machines["kube2"].KubernetesVersion != "1.35.4" || s.Machines["kube2"].ImageDigest != "sha256:2" || s.Machines["kube2"].Failed != "") {
				t.Errorf("the new side after a committed switch: %+v", s.Machines["kube2"])
			}
			if tc.applied == "kube1" && !strings.Contains(s.Machines["kube2"].Failed, "interrupted at "+tc.step) {
				t.Errorf("the side not in use: %+v", s.Machines["kube2"])
			}
			// Idempotent: nothing in flight, nothing done.
			h.calls = nil
			if rec, err := Repave(context.Background(), e); rec != nil || err != nil || len(h.calls) != 0 || InFlight(l) {
				t.Errorf("a second recovery: %+v, %v, calls %q", rec, err, h.calls)
			}
		})
	}
}

// An API server that cannot be reached leaves the record in flight (the
// machines already right), so the next pass uncordons and closes it.
func TestRepaveKeepsTheRecordUntilTheUncordon(t *testing.T) {
	l := setup(t, "kube1", "switch", false)
	h := &host{states: map[string]string{"kube2": "active"}}
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: corev1.NodeSpec{Unschedulable: true}})
	down := errors.New("connection refused")
	e := Env{Layout: l, Control: &machine.Control{Run: h.run, Poll: time.Millisecond}, NodeName: node,
		Client: func() (kubeclient.Interface, error) { return nil, down }}
	if rec, err := Repave(context.Background(), e); rec != nil || !errors.Is(err, down) {
		t.Fatalf("recovery without the API server: %+v, %v", rec, err)
	}
	if !InFlight(l) || !slices.Equal(h.running(), []string{"kube1"}) {
		t.Fatalf("after the failed uncordon: in flight %v, running %v", InFlight(l), h.running())
	}
	e.Client = func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil }
	if rec, err := Repave(context.Background(), e); rec == nil || err != nil || cordoned(t, cs) || InFlight(l) {
		t.Fatalf("the next pass: %+v, %v", rec, err)
	}
}

// Without an applied state naming a machine nothing is touched.
func TestRepaveNeedsTheAppliedSide(t *testing.T) {
	l := setup(t, "kube1", "switch", false)
	if err := os.Remove(filepath.Join(l.OnRoot(l.StateDir()), state.AppliedFile)); err != nil {
		t.Fatal(err)
	}
	h := &host{states: map[string]string{"kube2": "active"}}
	_, err := Repave(context.Background(), Env{Layout: l, Control: &machine.Control{Run: h.run}, NodeName: node})
	if err == nil || len(h.calls) != 0 {
		t.Fatalf("recovery without an applied state: %v, calls %q", err, h.calls)
	}
}

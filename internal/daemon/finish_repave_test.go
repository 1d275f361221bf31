package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/state"
)

// finish-repave leaves a repave in flight alone while a command holds the
// node lock (it is that repave, alive), and once the lock is free closes
// it by the recovery rule: the applied side alone runs, the Node is
// uncordoned, the record closed as interrupted, the repair recorded.
func TestFinishRepave(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := l.OnRoot(l.StateDir())
	for _, p := range []string{dir, filepath.Dir(l.OnRoot(l.JoinedMarker()))} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(l.OnRoot(l.JoinedMarker()), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := state.OpenDir(dir).SaveApplied(state.Applied{NodeName: "n1", Machine: "kube1"}); err != nil {
		t.Fatal(err)
	}
	inFlight := state.Sides{Active: "kube1", Machines: map[string]state.Side{}, InFlight: &state.Repave{FromMachine: "kube1", ToMachine: "kube2",
		Started: time.Now(), Step: "switch"}}
	if err := state.OpenDir(dir).SaveSides(inFlight); err != nil {
		t.Fatal(err)
	}
	states := map[string]string{"kube1": "inactive", "kube2": "active"}
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		switch {
		case name == "systemctl" && args[0] == "show":
			return []byte("ActiveState=" + states[strings.TrimSuffix(strings.TrimPrefix(args[1], "systemd-nspawn@"), ".service")] + "\n"), nil
		case name == "machinectl" && args[0] == "poweroff":
			states[args[1]] = "inactive"
		case name == "machinectl" && args[0] == "start":
			states[args[1]] = "active"
		}
		return nil, nil
	}
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}})
	client := func() (kubeclient.Interface, error) { return kubeclienttest.Wrap(cs), nil }
	k := &MachineKeeper{Layout: l, Control: &machine.Control{Run: run, Poll: time.Millisecond}, Log: slog.New(slog.DiscardHandler)}
	loop := FinishRepave(k, client, "n1")

	held, err := nodelock.TryAcquire(l, "node upgrade")
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s, _ := state.OpenDir(dir).Sides(); s.InFlight == nil || states["kube2"] != "active" {
		t.Fatalf("finish-repave acted while node upgrade held the lock: %+v %v", s, states)
	}
	held.Release()

	if err := loop.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	s, _ := state.OpenDir(dir).Sides()
	if s.InFlight != nil || s.Last == nil || s.Last.Result != state.RepaveInterrupted || states["kube1"] != "active" || states["kube2"] != "inactive" {
		t.Fatalf("after finish-repave: %+v %v", s, states)
	}
	if n, _ := cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{}); n.Spec.Unschedulable {
		t.Error("the Node is left cordoned")
	}
	repairs, err := state.OpenDir(dir).Repairs()
	if err != nil || len(repairs) == 0 || repairs[len(repairs)-1].Kind != RepairRepaveInterrupted {
		t.Errorf("repairs: %+v (%v)", repairs, err)
	}
}

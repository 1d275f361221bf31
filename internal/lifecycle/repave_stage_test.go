package lifecycle

import (
	"errors"
	"os"
	"testing"

	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/state"
)

// Stage refuses before anything runs while another command holds the
// node lock, while a repave is in flight (its recovery comes first), and
// when the applied state moved since the repave was made; the machines
// and the Node are untouched each time.
func TestStageRefusesBeforeItChangesAnything(t *testing.T) {
	h := newFakeHost(t, "kube1", "1.34.2")
	r, l := newTestRepave(t, h, "kube1", "1.34.2")
	dir := l.OnRoot(l.StateDir())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := state.OpenDir(dir).SaveApplied(state.Applied{NodeName: "n1", Machine: "kube2", KubernetesVersion: "1.34.2"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Stage(t.Context(), Preflight{}); !errors.Is(err, ErrStateMoved) {
		t.Errorf("applied state on the other side: %v, want ErrStateMoved", err)
	}
	sides, _ := sidesFor("kube1", "1.34.2")
	if err := state.OpenDir(dir).SaveSides(*sides); err != nil {
		t.Fatal(err)
	}
	if err := r.Stage(t.Context(), Preflight{}); !errors.Is(err, ErrRepaveInFlight) {
		t.Errorf("a repave in flight: %v, want ErrRepaveInFlight", err)
	}
	lock, err := nodelock.TryAcquire(l, "node upgrade")
	if err != nil {
		t.Fatal(err)
	}
	var held *nodelock.HeldError
	if err := r.Stage(t.Context(), Preflight{}); !errors.As(err, &held) {
		t.Errorf("the node lock held: %v, want *nodelock.HeldError", err)
	}
	lock.Release()
	if len(h.calls) != 0 {
		t.Errorf("host commands run by a refused staging: %v", h.calls)
	}
}

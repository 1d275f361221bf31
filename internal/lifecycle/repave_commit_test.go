package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/state"
)

// The commit hook (the fleet agent's Record write) runs right after
// save-state, before the uncordon, only when a caller set one: node
// upgrade's phases do not change.
func TestRepaveCommitHookFollowsSaveState(t *testing.T) {
	o := RepaveOptions{Options: Options{Config: &config.Config{}}, Committed: func(context.Context) error { return nil }}
	r := NewRepave(o, state.Applied{Machine: layout.MachineBlue})
	var finish []string
	for _, p := range r.Phases("v2") {
		if p.Name == "finish" {
			finish = p.Names()
		}
	}
	if got := strings.Join(finish, ","); got != "save-state,record-commit,uncordon-node" {
		t.Errorf("finish with a commit hook: %s", got)
	}
}

// A switch back (as a fleet rollback runs it) calls the hook once the
// applied state names the retained side, while the repave still holds
// the node lock (a start waiting for it reads the Record the hook
// wrote) and before the Node is uncordoned. A hook that fails does not
// fail the committed switch.
func TestSwitchBackCommitsUnderTheNodeLock(t *testing.T) {
	for _, hookErr := range []error{nil, errors.New("disk full")} {
		h := newFakeHost(t, "kube2", "1.35.4")
		h.versions["kube1"] = "1.34.2"
		r, l, _ := newTestSwitchBack(t, h)
		calls := 0
		r.opts.Committed = func(ctx context.Context) error {
			calls++
			a, err := state.Open(l).Applied()
			if err != nil || a == nil || a.Machine != "kube1" {
				t.Errorf("at the hook the applied state is %+v (%v), want the retained side kube1 committed", a, err)
			}
			if lk, err := nodelock.Acquire(ctx, l, "start", nodelock.Wait{}); err == nil {
				lk.Release()
				t.Error("at the hook the node lock is free: a start could run before the Record says what the node runs")
			} else if !errors.As(err, new(*nodelock.HeldError)) {
				t.Errorf("at the hook: %v", err)
			}
			if n, _ := h.cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); !n.Spec.Unschedulable {
				t.Error("at the hook the Node is uncordoned already")
			}
			return hookErr
		}
		if _, err := r.Run(t.Context(), backPreflight(l)); err != nil {
			t.Fatalf("switch back, hook error %v: %v", hookErr, err)
		}
		if calls != 1 {
			t.Errorf("hook called %d times, want 1", calls)
		}
		if lk, err := nodelock.Acquire(t.Context(), l, "start", nodelock.Wait{}); err != nil {
			t.Errorf("after the switch back the node lock is still held: %v", err)
		} else {
			lk.Release()
		}
	}
}

// Package recovery finishes a repave whose process died: `node upgrade`
// killed (kill -9, OOM) or the host's power cut at any step. The rule:
//
//   - the applied state names the active side (save-state, in the
//     repave's finish phase, is the switch's commit point; the keeper of
//     internal/daemon keeps the same side running);
//   - every other side is stopped first, then the active one started if
//     it is not running, so two machines never run as the node;
//   - the Node is uncordoned when the repave may have cordoned it (its
//     drain had begun and the Node was schedulable before);
//   - the in-flight record is closed as "interrupted", the last repave
//     `status` shows, and the sides record follows the applied state.
//
// Each step is idempotent (a crash of the recovery itself is recovered
// the same way) and runs under the node lock the caller holds: a repave
// holds that lock for its whole run, so an in-flight record seen under the
// lock belongs to a process that is gone. The agent runs it at start and
// on every pass; `node upgrade` runs it before it repaves.
package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/state"
)

// Env is what the recovery acts through.
type Env struct {
	Layout  layout.Layout
	Control *machine.Control
	// Client is the API server as the node; NodeName the Node.
	Client   func() (kubeclient.Interface, error)
	NodeName string
	Log      *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// StartTimeout and StopTimeout bound one machine start and stop; 0
	// means a minute and two.
	StartTimeout, StopTimeout time.Duration
}

// InFlight says whether the sides record holds a repave in flight; the
// cheap look before taking the node lock.
func InFlight(l layout.Layout) bool {
	s, err := state.Open(l).Sides()
	return err == nil && s != nil && s.InFlight != nil
}

// Repave finishes the interrupted repave, if the sides record holds one:
// see the package doc. It returns the closed record (nil when nothing was
// in flight). On an error the record stays in flight and the next call
// does what is left.
func Repave(ctx context.Context, e Env) (*state.Repave, error) {
	store := state.Open(e.Layout)
	sides, err := store.Sides()
	if err != nil || sides == nil || sides.InFlight == nil {
		return nil, err
	}
	applied, err := store.Applied()
	if err != nil {
		return nil, fmt.Errorf("recover the interrupted repave: %w", err)
	}
	if applied == nil || applied.Machine == "" {
		return nil, errors.New("recover the interrupted repave: no applied state names the active machine")
	}
	rec := *sides.InFlight
	active := applied.Machine
	e.log().Warn("a repave was interrupted; recovering", "from", rec.FromMachine, "to", rec.ToMachine, "step", rec.Step, "active", active)
	if err := e.machines(ctx, active); err != nil {
		return nil, err
	}
	if rec.MayHaveCordoned() {
		if err := e.uncordon(ctx); err != nil {
			return nil, err
		}
	}
	closed := sides.CloseInterrupted(*applied, e.now())
	if err := store.SaveSides(*sides); err != nil {
		return nil, fmt.Errorf("recover the interrupted repave: %w", err)
	}
	e.log().Info("interrupted repave closed: "+closed.Reason, "result", closed.Result)
	return closed, nil
}

// machines stops every side but active, then starts active unless it is
// running or on its way.
func (e Env) machines(ctx context.Context, active string) error {
	for _, other := range e.Layout.Machines() {
		if other == active {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, orDefault(e.StopTimeout, 2*time.Minute))
		err := e.Control.Stop(sctx, other) // a stopped machine is left alone
		cancel()
		if err != nil {
			return fmt.Errorf("recover the interrupted repave: stop %s: %w", other, err)
		}
	}
	st, err := e.Control.State(ctx, active)
	if err != nil {
		return fmt.Errorf("recover the interrupted repave: %w", err)
	}
	if st != "inactive" && st != "failed" {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, orDefault(e.StartTimeout, time.Minute))
	defer cancel()
	if err := e.Control.Start(sctx, active); err != nil {
		return fmt.Errorf("recover the interrupted repave: %w", err)
	}
	e.log().Info("started the active machine after the interrupted repave", "machine", active, "was", st)
	return nil
}

// uncordon marks the Node schedulable unless it is already.
func (e Env) uncordon(ctx context.Context) error {
	cs, err := e.Client()
	if err != nil {
		return fmt.Errorf("recover the interrupted repave: uncordon: %w", err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("recover the interrupted repave: read Node %s: %w", e.NodeName, err)
	}
	if !n.Spec.Unschedulable {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": false}})
	if _, err := cs.CoreV1().Nodes().Patch(ctx, e.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("recover the interrupted repave: uncordon Node %s: %w", e.NodeName, err)
	}
	e.log().Info("uncordoned the Node the interrupted repave had cordoned", "node", e.NodeName)
	return nil
}

func (e Env) log() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

func (e Env) now() time.Time {
	if e.Now == nil {
		return time.Now()
	}
	return e.Now()
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

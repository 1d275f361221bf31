package fleet

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// StartInput is what an agent knows when it considers taking a slot.
type StartInput struct {
	Rollout *v1alpha1.FlexNodeRollout
	Self    string        // this node's name
	Nodes   []corev1.Node // from the Node informer: any superset of the selected
	Now     time.Time     // this node's own clock (windows are judged on it)
}

// StartDecision is whether this node may now try for a slot. Slots stay
// the bound on concurrency (Slots.Acquire); the decision adds what the
// slots do not know: hold, plan mode, windows, the canaries, the order.
type StartDecision struct {
	Start bool
	// Held: report HeldRelease instead of any other phase.
	Held bool
	// Why it may not start, for the log and the condition's message.
	Why string
	// Retry is when the answer changes with no event from the API server
	// (a window opens): arm a timer for it. Zero: only on an event.
	Retry time.Time
	// Position in the order (0-based) and its wave; -1 when not in it.
	Position, Wave int
}

// MayStart decides for in.Self. Under a rollback (RollingBack) the
// decision is the rollback's: no canary, no windows (a rollback is wanted now), the same
// maxUnavailable; plan mode does not apply (a plan has nothing to roll
// back). Pure: the caller reads the cluster.
func MayStart(in StartInput) (StartDecision, error) {
	r := in.Rollout
	no := func(why string) (StartDecision, error) { return StartDecision{Why: why, Position: -1, Wave: -1}, nil }
	sel, err := metav1.LabelSelectorAsSelector(r.Spec.NodeSelector)
	if err != nil || r.Spec.NodeSelector == nil {
		return StartDecision{}, fmt.Errorf("rollout %s: spec.nodeSelector: %v", r.Name, err)
	}
	var self *corev1.Node
	var selected []*corev1.Node
	for i := range in.Nodes {
		if n := &in.Nodes[i]; sel.Matches(labels.Set(n.Labels)) {
			selected = append(selected, n)
			if n.Name == in.Self {
				self = n
			}
		}
	}
	if self == nil {
		return no("not selected by spec.nodeSelector")
	}
	if Held(self) {
		d, _ := no("held: label " + HoldLabel + "=true")
		d.Held = true
		return d, nil
	}
	rollback := RollingBack(r, selected)
	switch {
	case r.Spec.Paused:
		return no("paused: spec.paused is true")
	case !rollback && r.Spec.Strategy.Mode == v1alpha1.ModePlan:
		return no("mode Plan: stage and report a verdict only; nothing drains")
	}
	if !rollback {
		ws, err := CompileWindows(r.Spec.Strategy.Windows)
		if err != nil {
			return StartDecision{}, fmt.Errorf("rollout %s: %w", r.Name, err)
		}
		if st := ws.At(in.Now); !st.Open {
			d, _ := no("outside the maintenance windows: " + st.String())
			d.Retry = st.NextOpen
			return d, nil
		}
	}
	v := readWave(r, selected)
	d := StartDecision{Position: -1, Wave: -1}
	for i, n := range v.order {
		if n == in.Self {
			d.Position = i
		}
	}
	mu, err := v1alpha1.ResolveMaxUnavailable(r.Spec.Strategy.MaxUnavailable, len(selected))
	if err != nil {
		return StartDecision{}, fmt.Errorf("rollout %s: spec.strategy.maxUnavailable: %w", r.Name, err)
	}
	canary := 0
	if !rollback {
		if canary, err = v1alpha1.ResolveCanary(r.Spec.Strategy.Canary, len(v.order)); err != nil {
			return StartDecision{}, fmt.Errorf("rollout %s: spec.strategy.canary: %w", r.Name, err)
		}
	}
	if d.Position < 0 {
		d.Why = "not in the order (" + string(v.phase[in.Self]) + ")"
		return d, nil
	}
	d.Wave = Wave(d.Position, canary, mu)
	if p := v.phase[in.Self]; p != "" && p != PhaseStaged {
		d.Why = "already " + string(p) + " at generation " + fmt.Sprint(r.Generation)
		return d, nil
	}
	d.Why = v.block(d.Position, canary, mu, rollback)
	d.Start = d.Why == ""
	return d, nil
}

// waveView is the rollout's nodes as the gate sees them.
type waveView struct {
	gen   int64
	order []string         // the selected nodes that take part, in Order
	phase map[string]Phase // each one's phase for this rollout at gen ("" when none)
	busy  int              // Updating at any generation: each holds a slot
}

func readWave(r *v1alpha1.FlexNodeRollout, selected []*corev1.Node) waveView {
	v := waveView{gen: r.Generation, phase: map[string]Phase{}}
	var names []string
	for _, n := range selected {
		rel, ok, err := ReadNodeRelease(n)
		mine := ok && err == nil && rel.Rollout == r.Name
		switch {
		case Held(n) || managedElsewhere(n):
			continue
		case mine && rel.Phase == PhaseUpdating:
			v.busy++
		}
		if mine && rel.Generation == r.Generation {
			v.phase[n.Name] = rel.Phase
		}
		names = append(names, n.Name)
	}
	v.order = Order(r.UID, names)
	return v
}

// block is why the node at pos may not start yet, or "".
func (v waveView) block(pos, canary, mu int, rollback bool) string {
	var failed []string
	for _, n := range v.order {
		if v.phase[n] == PhaseFailed {
			failed = append(failed, n)
		}
	}
	if len(failed) > 0 && !rollback {
		return fmt.Sprintf("paused: %d failed (%s)", len(failed), names(failed))
	}
	if pos >= canary {
		var pending []string
		for _, n := range v.order[:canary] {
			if v.phase[n] != PhaseUpdated {
				pending = append(pending, n)
			}
		}
		if len(pending) > 0 {
			return fmt.Sprintf("waiting for the canaries to finish their soak: %s", names(pending))
		}
	}
	free := mu - v.busy
	if free <= 0 {
		return fmt.Sprintf("all %d slots in use", mu)
	}
	ahead := 0
	for _, n := range v.order[:pos] {
		if v.phase[n] == PhaseStaged {
			ahead++
		}
	}
	if ahead >= free {
		return fmt.Sprintf("%d staged nodes ahead of it in the order wait for the %d free slots", ahead, free)
	}
	return ""
}

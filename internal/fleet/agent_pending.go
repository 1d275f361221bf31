package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// Issue 30 item 8: a node cut off from the API server mid-switch. The
// Host's switch (and its rollback) is bounded by its own deadline (the
// repave's ReadyTimeout) and needs nothing from the agent, so the node
// finishes or rolls back on its own; the Record says what happened
// (report writes it first) and, until the API server has it, that it is
// Unreported and what the slot still needs (SlotAction). Each pass tells
// the API server first (settle): the Node's condition, then the slot's
// failure or release. A slot is released only after the Node's condition
// says Updated (or RolledBack): the next node never starts while this
// one still shows Updating.

// What a slot still needs once the API server answers.
const (
	slotRelease = "release"
	slotFail    = "fail"
)

// releaseLater keeps the slot in the Record, to be released by a later
// pass once the API server has the Node's condition; cause is why it
// was not released now.
func (a *Agent) releaseLater(cause error) error {
	a.rec.SlotAction = slotRelease
	a.log().Warn("rollout: the API server did not take the report; the slot is released once it does", "slot", a.rec.Slot, "error", cause)
	if err := a.save(); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// settle tells the API server what the Record holds that it does not
// have: the condition, then the slot's failure or release. r is the
// rollout that selects the node now (nil when none), n its Node.
func (a *Agent) settle(ctx context.Context, r *v1alpha1.FlexNodeRollout, n *corev1.Node) error {
	if a.rec.Unreported {
		a.repMu.Lock()
		err := a.setCondition(ctx, a.now())
		if err == nil {
			a.rec.Unreported = false
			err = a.save()
		}
		a.repMu.Unlock()
		if err != nil {
			return err
		}
		a.log().Info("rollout: reported what happened while the API server was away", "phase", a.rec.Phase, "step", a.rec.Step, "reason", a.rec.Reason)
		if a.rec.Phase == PhaseFailed {
			// The evidence could not reach the Node either: gathered
			// again, now that it can.
			a.attachEvidence(ctx, a.rec.Step, a.rec.Reason, errors.New(a.rec.Message))
		}
	}
	if err := a.resendEvents(ctx); err != nil {
		return err
	}
	if a.rec.SlotAction == "" {
		return nil
	}
	if err := a.settleSlot(ctx, r, n); err != nil {
		return err
	}
	return a.save()
}

// settleSlot does the Record's SlotAction to the slot it names.
func (a *Agent) settleSlot(ctx context.Context, r *v1alpha1.FlexNodeRollout, n *corev1.Node) error {
	act := a.rec.SlotAction
	done := func() {
		if act == slotRelease {
			a.slot, a.rec.Slot = nil, ""
			a.metricsPhase(a.rec.Rollout, a.rec.Phase) // the slot no longer held
		}
		a.rec.SlotAction = ""
	}
	if a.rec.Slot == "" || r == nil || r.Name != a.rec.Rollout || r.UID != a.rec.UID {
		done() // no slot, or its rollout is gone and its slots with it
		return nil
	}
	s := a.slotsFor(r, n)
	sl := a.slot
	if sl == nil || sl.Lease.Name != a.rec.Slot {
		found, err := a.ownSlot(ctx, s)
		if err != nil {
			return err
		}
		if found == nil {
			a.log().Warn("rollout: the slot was lost while the API server was away", "slot", a.rec.Slot)
			done()
			return nil
		}
		sl = found
	}
	var err error
	if act == slotFail {
		err = s.Fail(ctx, sl, a.rec.Step, a.rec.Reason)
	} else {
		err = s.Release(ctx, sl)
	}
	if err != nil && !errors.Is(err, ErrSlotLost) {
		return err
	}
	done()
	return nil
}

// ownSlot is the slot the Record names if this node still holds it.
func (a *Agent) ownSlot(ctx context.Context, s *Slots) (*Slot, error) {
	list, err := a.conn().Slots.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the slots: %w", err)
	}
	for i := range list.Items {
		l := &list.Items[i]
		if l.Name != a.rec.Slot || holderOf(l) != s.Holder.String() {
			continue
		}
		idx, _ := s.index(l.Name)
		return &Slot{Index: idx, Lease: l}, nil
	}
	return nil, nil
}

// unreachable says err is the API server not answering (a refused or
// cut connection, a timeout, 503 while it starts), not an answer about
// the node: a soak probe that got it judged nothing.
func unreachable(err error) bool {
	var se *StepError
	if errors.As(err, &se) {
		return false // the Host judged the node
	}
	var ne net.Error
	return errors.As(err, &ne) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err)
}

// noteConditionLost marks the Record unreported when its Node carries no
// FlexNodeRelease condition while the Record has a phase to show: the
// Node was deleted and registered again by the kubelet (a new object,
// without the conditions the old one had). Without this the node's
// phase (a Failed after its slot was lost with its Node, say) would never
// reach the rollout's status, which would then stall: neither Complete
// nor Paused. The e2e saw it (fleetrollout, a Node deleted mid-switch).
func (a *Agent) noteConditionLost(n *corev1.Node) {
	if a.rec.Phase == "" || a.rec.Unreported {
		return
	}
	if _, ok, _ := ReadNodeRelease(n); ok {
		return
	}
	a.rec.Unreported = true
	a.log().Info("rollout: the Node carries no report of this node's phase (it was registered again); reporting it anew", "phase", a.rec.Phase, "step", a.rec.Step)
}

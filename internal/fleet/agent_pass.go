package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// maxActions bounds one pass's chain of actions (start, then take a
// slot, then ...): each action moves the Record, so a chain is short; the
// bound only keeps a bug from spinning.
const maxActions = 6

// pass decides and acts until there is nothing to do but wait for the
// next change; it returns how long to wait at most before the next pass
// (0: only a change starts one). fired is a pass the retry timer started.
func (a *Agent) pass(ctx context.Context, fired bool) time.Duration {
	for range maxActions {
		n := a.cache.node(a)
		if n == nil {
			return 0 // its Node is not registered yet: its add is a change
		}
		r, others := Select(a.cache.allRollouts(), n)
		a.noteConditionLost(n)
		if a.rec.Unreported || a.rec.SlotAction != "" { // issue 30 item 8: tell what happened first (agent_pending.go)
			if err := a.settle(ctx, r, n); err != nil {
				a.log().Warn("rollout: the API server does not take the node's report yet; trying again", "error", err)
				return a.retryAfter()
			}
		}
		v := view{rollout: r, rec: a.rec, managedElsewhere: a.ManagedElsewhere}
		if r != nil {
			_, failed := peers(r, a.cache.allNodes())
			// Its own condition may be a moment behind its Record.
			v.failedPeers = slices.DeleteFunc(failed, func(name string) bool { return name == n.Name })
			v.x30 = a.view30(r, n) // issue 30 (plan_agent.go)
		}
		act, why := decide(v)
		if line := act.String() + ": " + why; line != a.lastLog {
			a.lastLog = line
			a.log().Info("rollout: "+why, "action", act.String(), "rollout", nameOf(r), "phase", a.rec.Phase)
		}
		if act == actWait {
			return v.x30.retry(a.now()) // issue 30: a window's opening wakes it (plan_agent.go)
		}
		again, wait, err := a.do(ctx, act, r, others, n, fired)
		if ctx.Err() != nil {
			return 0
		}
		if err != nil {
			a.log().Warn("rollout: will try again", "action", act.String(), "rollout", nameOf(r), "error", err)
			return a.retryAfter()
		}
		if !again {
			return wait
		}
	}
	return a.retryAfter()
}

func nameOf(r *v1alpha1.FlexNodeRollout) string {
	if r == nil {
		return ""
	}
	return r.Name
}

// do carries out act; again says decide once more at once, wait how long
// to wait otherwise.
func (a *Agent) do(ctx context.Context, act action, r *v1alpha1.FlexNodeRollout, others []string, n *corev1.Node, fired bool) (again bool, wait time.Duration, err error) {
	switch act {
	case actHeld, actRollback: // issue 30 (plan_agent.go)
		return a.do30(ctx, act, r, n)
	case actForget:
		a.rec = a.rec.kept()
		a.slot = nil
		a.metricsPhase("", "")
		return false, 0, a.save()
	case actManagedElsewhere:
		a.adopt(r)
		return false, 0, a.report(ctx, PhaseManagedElsewhere, "", "AKSMachine",
			"its config follows an AKS Machine (in ARM, or through the cluster): AKS drives its disruption; this rollout never takes it"+alsoSelected(r, others))
	case actStart:
		a.adopt(r)
		return a.start(ctx, r, others)
	case actTakeSlot:
		if !fired && !a.mayBeFree(ctx, r) {
			return false, a.retryAfter(), nil
		}
		sl, err := a.acquire(ctx, r, n)
		if errors.Is(err, ErrNoSlot) {
			return false, a.retryAfter(), nil
		}
		if err != nil {
			return false, 0, err
		}
		return true, 0, a.update(ctx, r, sl, n, "")
	case actResume:
		sl, err := a.acquire(ctx, r, n)
		if errors.Is(err, ErrNoSlot) {
			a.log().Warn("rollout: the slot this node held is gone and none is free; waiting for one to finish the "+a.rec.Step, "slot", a.rec.Slot)
			return false, a.retryAfter(), nil
		}
		if err != nil {
			return false, 0, err
		}
		return true, 0, a.update(ctx, r, sl, n, a.rec.Step)
	case actRetry:
		if held, err := a.stillFailed(ctx, n); err != nil || held {
			if held {
				a.log().Info("rollout: resumed, but this node's failed slot is not cleared yet", "slot", a.rec.Slot)
			}
			return false, a.retryAfter(), err
		}
		a.rec.Slot, a.rec.Phase, a.rec.ResumedAt = "", "", resumedAt(r)
		a.slot = nil
		return true, 0, a.save()
	}
	return false, 0, nil
}

// adopt makes r the Record's rollout, its progress dropped when r is
// another rollout (or the same name made anew).
func (a *Agent) adopt(r *v1alpha1.FlexNodeRollout) {
	if a.rec.UID != r.UID || a.rec.Rollout != r.Name {
		a.rec = a.rec.kept()
		a.rec.Rollout, a.rec.UID, a.rec.ResumedAt = r.Name, r.UID, resumedAt(r)
		a.slot, a.slots = nil, nil
	}
	a.rec.Generation = r.Generation
}

func alsoSelected(r *v1alpha1.FlexNodeRollout, others []string) string {
	if len(others) == 0 {
		return ""
	}
	return fmt.Sprintf("; also selected by %s: follows the oldest, %s", strings.Join(others, ", "), r.Name)
}

// start compares the release with what the node runs, and stages it
// when it does not: Updated, Staged, or Failed at stage (no slot taken).
func (a *Agent) start(ctx context.Context, r *v1alpha1.FlexNodeRollout, others []string) (bool, time.Duration, error) {
	rel := r.Spec.Release
	// Cluster data is input to validate (DESIGN decision 10): the API
	// server's schema is not the only gate a rollout passes.
	if errs := v1alpha1.Validate(r); len(errs) > 0 {
		a.rec.ResumedAt = resumedAt(r)
		return false, 0, a.report(ctx, PhaseFailed, StepStage, "InvalidRelease", errs.ToAggregate().Error())
	}
	if !sleep(ctx, a.stageWait(r)) {
		return false, a.retryAfter(), nil
	}
	running, err := a.Host.Running(ctx, rel)
	if err != nil {
		return false, 0, fmt.Errorf("compare the release with what the node runs: %w", err)
	}
	if running {
		a.rec.Slot, a.rec.Applied = "", a.applied(r)
		return false, 0, a.report(ctx, PhaseUpdated, "", "", "runs the release"+alsoSelected(r, others))
	}
	a.log().Info("rollout: staging the release on the inactive side", "rollout", r.Name, "generation", r.Generation)
	if err := a.Host.Stage(ctx, rel); err != nil {
		if errors.Is(err, ErrBusy) || ctx.Err() != nil {
			return false, a.retryAfter(), nil
		}
		step, reason := stepAndReason(err, StepStage, "StageFailed")
		a.rec.ResumedAt = resumedAt(r)
		return false, 0, a.report(ctx, PhaseFailed, step, reason, failMessage(err))
	}
	return true, 0, a.report(ctx, PhaseStaged, "", "", "staged on the inactive side"+alsoSelected(r, others))
}

func (a *Agent) applied(r *v1alpha1.FlexNodeRollout) *AppliedRelease {
	return &AppliedRelease{Rollout: r.Name, Generation: r.Generation, Release: r.Spec.Release, At: a.now()}
}

// stepAndReason is err's step and reason when the Host named them, else
// the defaults.
func stepAndReason(err error, step, reason string) (string, string) {
	var se *StepError
	if errors.As(err, &se) {
		if se.Step != "" {
			step = se.Step
		}
		if se.Reason != "" {
			reason = se.Reason
		}
	}
	return step, reason
}

// Staging starts spread over stageSpreadPerNode for each node the
// rollout selects, at most maxStageSpread: a new rollout reaches every
// agent within a second, and a thousand nodes that all pulled the
// release from one site registry and wrote their Staged condition at
// once (a Node write each, which the API server sends to every agent
// that watches the Nodes: N² events in seconds) made the fleet
// simulator's API server refuse the kubelets' heartbeats
// (docs/reference/fleet-scale.md). A few nodes wait a fraction of a
// second.
const (
	stageSpreadPerNode = 50 * time.Millisecond
	maxStageSpread     = time.Minute
)

// stageWait is this node's random wait before staging r (none when the
// agent's Spread is negative: tests that want no randomness).
func (a *Agent) stageWait(r *v1alpha1.FlexNodeRollout) time.Duration {
	if a.Spread < 0 {
		return 0
	}
	selected, _ := peers(r, a.cache.allNodes())
	d := min(time.Duration(selected)*stageSpreadPerNode, maxStageSpread)
	return rand.N(d + 1)
}

// failMessage is err for the condition's message: a Host's StepError
// without its step and reason, which the condition carries already.
func failMessage(err error) string {
	if se, ok := err.(*StepError); ok && se.Err != nil {
		return se.Err.Error()
	}
	return err.Error()
}

// maxSlots is r's maxUnavailable resolved against the Nodes r selects.
func (a *Agent) maxSlots(r *v1alpha1.FlexNodeRollout) (int, error) {
	selected, _ := peers(r, a.cache.allNodes())
	max, err := v1alpha1.ResolveMaxUnavailable(r.Spec.Strategy.MaxUnavailable, selected)
	if err != nil {
		return 0, fmt.Errorf("rollout %s: spec.strategy.maxUnavailable: %w", r.Name, err)
	}
	return max, nil
}

// mayBeFree says whether a change-started pass should ask for a slot of
// r: not while the Nodes show every slot in use (nodes Updating, or
// Failed past stage, in r); else after a random wait of up to Spread,
// if they still do not. The Nodes are a hint, never the judge (Acquire
// is): a node between its slot and its first report is not counted, and
// a holder that died still is, which is why the retry timer's passes ask
// regardless.
func (a *Agent) mayBeFree(ctx context.Context, r *v1alpha1.FlexNodeRollout) bool {
	max, err := a.maxSlots(r)
	if err != nil {
		return true // Acquire says why
	}
	if a.inUse(r) >= max {
		return false
	}
	spread := a.Spread
	if spread == 0 {
		spread = DefaultSpread
	}
	if spread <= 0 {
		return true
	}
	if !sleep(ctx, rand.N(spread)) {
		return false
	}
	return a.inUse(r) < max
}

// inUse counts the Nodes whose condition says they hold a slot of r.
func (a *Agent) inUse(r *v1alpha1.FlexNodeRollout) int {
	n := 0
	for _, node := range a.cache.allNodes() {
		nr, ok, err := ReadNodeRelease(node)
		if !ok || err != nil || nr.Rollout != r.Name {
			continue
		}
		if nr.Phase == PhaseUpdating || (nr.Phase == PhaseFailed && nr.Step != StepStage && nr.Reason != "SlotLost") {
			n++
		}
	}
	return n
}

// acquire takes (or re-adopts) a slot of r for this node, out of
// maxUnavailable resolved against the Nodes r selects.
func (a *Agent) acquire(ctx context.Context, r *v1alpha1.FlexNodeRollout, n *corev1.Node) (*Slot, error) {
	max, err := a.maxSlots(r)
	if err != nil {
		return nil, err
	}
	s := a.slotsFor(r, n)
	sl, err := s.Acquire(ctx, max)
	if errors.Is(err, ErrNoSlot) {
		for slot, why := range s.Kept {
			a.log().Info("rollout: waiting for a slot kept past its lease", "slot", slot, "why", why)
		}
	}
	if err != nil {
		return nil, err
	}
	if sl.Readopted {
		a.log().Info("rollout: re-adopted this node's slot", "slot", sl.Lease.Name, "previous-boot", sl.PreviousBootID)
	}
	return sl, nil
}

// slotsFor is r's slots as this node holds them; kept across passes, so
// expiry is judged from what this process saw (see Slots).
func (a *Agent) slotsFor(r *v1alpha1.FlexNodeRollout, n *corev1.Node) *Slots {
	boot := a.BootID
	if boot == "" {
		boot = n.Status.NodeInfo.BootID
	}
	h := Holder{Node: n.Name, UID: n.UID, BootID: boot}
	if a.slots == nil || a.slots.Rollout != r.Name || a.slots.Holder != h {
		a.slots = &Slots{Store: connStore{a}, Nodes: cachedNodes{a.Nodes, connNodes{a}}, Rollout: r.Name, Holder: h, TTL: a.ttl(),
			Now: a.Now, Owner: v1alpha1.OwnerReference(r)}
	}
	return a.slots
}

// stillFailed says whether the slot the Record names is still this
// node's (a resume clears it before it sets resumed-at, so this is a
// resume that has not finished).
func (a *Agent) stillFailed(ctx context.Context, n *corev1.Node) (bool, error) {
	if a.rec.Slot == "" {
		return false, nil
	}
	list, err := a.conn().Slots.List(ctx)
	if err != nil {
		return false, fmt.Errorf("list the slots: %w", err)
	}
	for _, l := range list.Items {
		if l.Name != a.rec.Slot {
			continue
		}
		h, _ := ParseHolder(holderOf(&l))
		return h.Node == n.Name && h.UID == n.UID, nil
	}
	return false, nil
}

// connStore and connNodes reach the API server through the agent's
// current clients (connNodes: only for a Node the informer does not
// hold, cachedNodes).
type connStore struct{ a *Agent }

func (s connStore) List(ctx context.Context) (*coordinationv1.LeaseList, error) {
	return s.a.conn().Slots.List(ctx)
}
func (s connStore) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return s.a.conn().Slots.Create(ctx, l)
}
func (s connStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return s.a.conn().Slots.Update(ctx, l)
}

type connNodes struct{ a *Agent }

func (n connNodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	return n.a.conn().Nodes.Get(ctx, name, opts)
}

// loadRecordOrEmpty is the Record at path, empty when there is none.
func loadRecordOrEmpty(path string) (Record, error) {
	rec, err := LoadRecord(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, nil
	}
	if err != nil {
		return Record{}, fmt.Errorf("the rollout record: %w", err)
	}
	return rec, nil
}

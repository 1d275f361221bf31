package fleet

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// StatusWriterComponent is the source of the writer's Events.
const StatusWriterComponent = "aks-flex-node-status-writer"

// followNodes starts a round when a Node is added or deleted or its
// labels or FlexNodeRelease condition change (not at a mere re-report,
// whose heartbeat alone moves), and queues a phase change for an Event
// when the node moved to another phase, rollout or generation, for as
// long as the term (ctx) lasts. A Node's first sight is no phase change:
// a writer that takes over must not repeat its predecessor's Events.
func (w *StatusWriter) followNodes(ctx context.Context, st *writerState) {
	changed := w.Nodes.Follow(ctx, func(o, n *corev1.Node) bool {
		oc, nc := releaseCondition(o), releaseCondition(n)
		if equality.Semantic.DeepEqual(o.Labels, n.Labels) && equality.Semantic.DeepEqual(oc, nc) {
			return false
		}
		from, _ := looseRelease(o)
		to, ok := looseRelease(n)
		if ok && (from.Phase != to.Phase || from.Rollout != to.Rollout || from.Generation != to.Generation) {
			st.mu.Lock()
			st.changes = append(st.changes, phaseChange{node: n.Name, from: from, to: to})
			st.mu.Unlock()
		}
		return true
	})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				st.signal()
			}
		}
	}()
}

// releaseCondition is n's FlexNodeRelease condition without its
// heartbeat, for comparing.
func releaseCondition(n *corev1.Node) *corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == ConditionType {
			c.LastHeartbeatTime = metav1.Time{}
			return &c
		}
	}
	return nil
}

// looseRelease is n's condition as ReadNodeRelease decodes it, or, for a
// condition it refuses (a phase this writer does not know yet, a message
// in another format), the phase as the condition's reason says it: an
// Event about it is still true.
func looseRelease(n *corev1.Node) (NodeRelease, bool) {
	r, ok, err := ReadNodeRelease(n)
	if err == nil {
		return r, ok
	}
	c := releaseCondition(n)
	r = NodeRelease{Phase: Phase(c.Reason), Message: c.Message, Since: c.LastTransitionTime.Time}
	if m := messageRE().FindStringSubmatch(c.Message); m != nil {
		r.Rollout, r.Step, r.Reason, r.Message = m[1], m[3], m[4], m[5]
		r.Generation, _ = strconv.ParseInt(m[2], 10, 64)
	}
	return r, true
}

// record queues an Event on each changed node's rollout for the term's
// sender (sendEvents), as far as the rate limit and the queue allow; the
// rest are dropped and counted. It never waits for the API server: a
// round that sent its Events itself spent as long as the client's own
// limit took for each (5 a second) and, with every change of a large
// rollout accepted while it sent, did not come back to write the status
// for minutes (the fleet simulator's 500-node rollout: the status stuck
// at "0 updated" while 400 nodes had updated).
func (w *StatusWriter) record(changes []phaseChange, rollouts map[string]*v1alpha1.FlexNodeRollout, queue chan<- *corev1.Event) {
	dropped := 0
	for i, c := range changes {
		r := rollouts[c.to.Rollout]
		if r == nil {
			continue // about a rollout deleted meanwhile, or none
		}
		if !w.events.TryAccept() {
			dropped++
			continue
		}
		select {
		case queue <- phaseEvent(r, c, w.Identity, time.Now(), i):
		default:
			dropped++
		}
	}
	if dropped > 0 {
		w.Log.Info("status writer: Events dropped by the rate limit", "dropped", dropped)
	}
}

// eventQueue is how many Events wait for the sender at most.
const eventQueue = 100

// sendEvents creates the queued Events one at a time until ctx ends; a
// failure is logged (an Event is never the failure of what it is about).
func (w *StatusWriter) sendEvents(ctx context.Context, queue <-chan *corev1.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-queue:
			ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := w.core.createEvent(ectx, ev)
			cancel()
			if err != nil && ctx.Err() == nil {
				w.Log.Warn("status writer: could not record an Event on the rollout", "rollout", ev.InvolvedObject.Name, "reason", ev.Reason, "error", err)
			}
		}
	}
}

// phaseEvent is the Event of one node's phase change on rollout r: the
// reason is the phase; the message names the node, the step and the
// reason. A cluster-scoped object's Events live in namespace default.
func phaseEvent(r *v1alpha1.FlexNodeRollout, c phaseChange, instance string, now time.Time, seq int) *corev1.Event {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s: %s", c.node, c.to.Phase)
	if c.to.Step != "" {
		fmt.Fprintf(&b, " at step %s", c.to.Step)
	}
	if c.to.Reason != "" {
		fmt.Fprintf(&b, " (%s)", c.to.Reason)
	}
	if c.from.Phase != "" {
		fmt.Fprintf(&b, ", was %s", c.from.Phase)
	}
	if c.to.Phase == PhaseFailed && c.to.Message != "" {
		b.WriteString(": " + c.to.Message)
	}
	typ := corev1.EventTypeNormal
	if c.to.Phase == PhaseFailed {
		typ = corev1.EventTypeWarning
	}
	t := metav1.NewTime(now)
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", r.Name, now.UnixNano()+int64(seq)), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind,
			Name: r.Name, UID: r.UID, ResourceVersion: r.ResourceVersion},
		Reason: string(c.to.Phase), Message: bound(b.String()), Type: typ,
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		Source:              corev1.EventSource{Component: StatusWriterComponent},
		ReportingController: StatusWriterComponent, ReportingInstance: instance,
	}
}

// Package fleet owns how flex nodes follow a FlexNodeRollout without a
// controller: the API (v1alpha1) and the Lease slots that bound how many
// nodes switch at once. Not yet wired into the agent.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotations on a slot Lease whose holder failed: the slot stays held so
// the rollout pauses by itself (DESIGN decision 12).
const (
	AnnotationFailedStep   = "flexnode.azure.com/failed-step"
	AnnotationFailedReason = "flexnode.azure.com/failed-reason"
)

// ErrNoSlot is Acquire finding every slot held.
var ErrNoSlot = errors.New("every slot is held")

// ErrSlotLost is Renew, Release or Fail finding the slot held by another
// holder (it expired and was taken over, or an operator cleared it): the
// caller must stop disrupting the node.
var ErrSlotLost = errors.New("the slot is no longer ours")

// Holder is who holds a slot: the Node (by name and UID, so a Node deleted
// and re-created under the same name is another holder) and the host's
// boot (so an agent knows a slot it re-adopts was taken before a reboot).
type Holder struct {
	Node   string
	UID    types.UID
	BootID string
}

// String is the Lease's holderIdentity: node/uid/bootID.
func (h Holder) String() string { return h.Node + "/" + string(h.UID) + "/" + h.BootID }

// ParseHolder reads a holderIdentity; ok is false for one not ours.
func ParseHolder(s string) (h Holder, ok bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return Holder{}, false
	}
	return Holder{Node: parts[0], UID: types.UID(parts[1]), BootID: parts[2]}, true
}

// NodeGetter reads a Node by name (kubeclient's Nodes has this method).
// The slots read a holder's UID, spec.unschedulable and Ready condition
// (HolderDown): a getter over an informer must keep those.
type NodeGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
}

// Slots are one rollout's slots as one holder sees them.
//
// Expiry is judged the way client-go's leaderelection judges it: by how
// long this process has seen a Lease unchanged (its resourceVersion), on
// its own monotonic clock, never by comparing the holder's renewTime with
// this host's wall clock, so clock skew between hosts cannot free a slot
// early. A process that has just started therefore waits one TTL before
// it takes over an expired slot.
type Slots struct {
	Store   Store
	Nodes   NodeGetter
	Rollout string
	Holder  Holder
	// TTL is the Lease's duration; a holder renews well within it.
	TTL time.Duration
	// Now is the clock (time.Now when nil); tests move it.
	Now func() time.Time
	// Owner, when set, is the rollout (its name and UID): slots are created
	// owned by it, so the garbage collector removes them with it.
	Owner *metav1.OwnerReference

	seen map[string]observed
	// Kept is, after Acquire, each expired slot kept by a holder that is
	// down (slot name to what an operator reads: HeldPastExpiry).
	Kept map[string]string
}

type observed struct {
	resourceVersion string
	at              time.Time
}

// Slot is a held slot.
type Slot struct {
	Index int
	Lease *coordinationv1.Lease
	// Readopted is true when the slot was already this node's (an agent
	// restarted, or the host rebooted: PreviousBootID says which).
	Readopted      bool
	PreviousBootID string
}

// SlotName is the Lease name of slot i of a rollout.
func SlotName(rollout string, i int) string { return rollout + "-slot-" + strconv.Itoa(i) }

func (s *Slots) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Acquire takes one of max slots: first this node's own (re-adopted under
// the current boot), else a missing slot (create), a released one, one
// whose holder's Node is gone, or one that expired; each take is a
// compare-and-swap on the Lease's resourceVersion, so two nodes never hold
// one slot. Slots at or above max (left from a larger maxUnavailable)
// count as held while they are, so at most max are held at once once the
// larger ones drain. ErrNoSlot when none is free.
func (s *Slots) Acquire(ctx context.Context, max int) (*Slot, error) {
	list, err := s.Store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the slots of rollout %s: %w", s.Rollout, err)
	}
	byIndex := map[int]*coordinationv1.Lease{}
	held := 0
	for i := range list.Items {
		l := &list.Items[i]
		idx, ok := s.index(l.Name)
		if !ok {
			continue
		}
		byIndex[idx] = l
		h, _ := ParseHolder(holderOf(l))
		if h.Node == s.Holder.Node && h.UID == s.Holder.UID {
			return s.readopt(ctx, idx, l, h)
		}
		if holderOf(l) != "" {
			held++
		}
	}
	s.forget(byIndex)
	s.Kept = nil
	// Each node starts at its own slot (by its name) and goes round: a
	// wave of nodes asking at once would otherwise all race for slot 0,
	// then all for slot 1, and so on (at 100 nodes, 955 creates for 10
	// slots). The compare-and-swap keeps it safe in any order.
	first := startSlot(s.Holder.Node, max)
	for k := range max {
		i := (first + k) % max
		l, exists := byIndex[i]
		if !exists {
			if held >= max {
				continue // a slot above max is still held
			}
			if sl, err := s.create(ctx, i); !errors.Is(err, errTaken) {
				return sl, err
			}
			continue
		}
		free, err := s.free(ctx, l)
		if err != nil {
			return nil, err
		}
		if !free {
			continue
		}
		if held >= max && holderOf(l) == "" {
			continue // only a takeover from a dead holder keeps the count
		}
		sl, err := s.take(ctx, i, l)
		if !errors.Is(err, errTaken) {
			return sl, err
		}
	}
	return nil, ErrNoSlot
}

// startSlot is where node n starts looking among max slots.
func startSlot(n string, max int) int {
	if max <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(n))
	return int(h.Sum32() % uint32(max))
}

// errTaken is a create or update that lost its race: try the next slot.
var errTaken = errors.New("taken")

func (s *Slots) index(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, s.Rollout+"-slot-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == rest
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// free says whether slot l may be taken: released, its holder's Node gone
// (deleted, or re-created with another UID), or unchanged for longer than
// one and a half times its duration while its holder's Node is Ready
// and schedulable (its agent died, the node serves). A holder whose Node
// is cordoned or not Ready keeps an expired slot (HolderDown) until it
// comes back (its agent re-adopts the slot under its new boot ID) or an
// operator deletes its Node. A failed holder's slot is never free while its Node exists,
// however long ago it last renewed: only an operator's resume frees it.
func (s *Slots) free(ctx context.Context, l *coordinationv1.Lease) (bool, error) {
	hi := holderOf(l)
	if hi == "" {
		return true, nil
	}
	var holder *corev1.Node
	if h, ok := ParseHolder(hi); ok {
		n, err := s.Nodes.Get(ctx, h.Node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("slot %s: read its holder's Node %s: %w", l.Name, h.Node, err)
		case n.UID != h.UID:
			return true, nil
		}
		holder = n
	}
	if l.Annotations[AnnotationFailedReason] != "" {
		return false, nil
	}
	if !s.expired(l) {
		return false, nil
	}
	if holder != nil {
		if down, why := HolderDown(holder); down {
			s.noteKept(l.Name, holder.Name, why)
			return false, nil
		}
		// Ready and schedulable: the agent died, or the node lost power
		// so recently that the node lifecycle controller has not marked
		// it NotReady yet (its grace, 50 s by default, can outlast what
		// is left of the lease after the last renewal). Half a lease more
		// tells the two apart.
		return s.unchangedFor(l) > s.ttlOf(l)+s.ttlOf(l)/2, nil
	}
	return true, nil
}

// expired is whether this process has seen l unchanged for longer than
// its duration.
func (s *Slots) expired(l *coordinationv1.Lease) bool {
	if s.seen == nil {
		s.seen = map[string]observed{}
	}
	o, ok := s.seen[l.Name]
	if !ok || o.resourceVersion != l.ResourceVersion {
		s.seen[l.Name] = observed{l.ResourceVersion, s.now()}
		return false
	}
	return s.now().Sub(o.at) > s.ttlOf(l)
}

// unchangedFor is how long this process has seen l unchanged (after
// expired noted it).
func (s *Slots) unchangedFor(l *coordinationv1.Lease) time.Duration {
	o, ok := s.seen[l.Name]
	if !ok || o.resourceVersion != l.ResourceVersion {
		return 0
	}
	return s.now().Sub(o.at)
}

// ttlOf is l's lease duration (the Slots' TTL when it names none).
func (s *Slots) ttlOf(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds != nil {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return s.TTL
}

func (s *Slots) noteKept(slot, holder, why string) {
	if s.Kept == nil {
		s.Kept = map[string]string{}
	}
	s.Kept[slot] = HeldPastExpiry(holder, why)
}

// forget drops what was seen of slots that no longer exist.
func (s *Slots) forget(present map[int]*coordinationv1.Lease) {
	for name := range s.seen {
		if i, ok := s.index(name); !ok || present[i] == nil {
			delete(s.seen, name)
		}
	}
}

func (s *Slots) spec(now time.Time) coordinationv1.LeaseSpec {
	id := s.Holder.String()
	secs := int32(max(s.TTL/time.Second, 1))
	t := metav1.NewMicroTime(now)
	return coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t}
}

func (s *Slots) create(ctx context.Context, i int) (*Slot, error) {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: SlotName(s.Rollout, i), Labels: map[string]string{"app.kubernetes.io/managed-by": "aks-flex-node"}},
		Spec:       s.spec(s.now()),
	}
	if s.Owner != nil {
		l.OwnerReferences = []metav1.OwnerReference{*s.Owner}
	}
	out, err := s.Store.Create(ctx, l)
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil, errTaken
	case err != nil:
		return nil, fmt.Errorf("create slot %s: %w", l.Name, err)
	}
	return &Slot{Index: i, Lease: out}, nil
}

func (s *Slots) take(ctx context.Context, i int, l *coordinationv1.Lease) (*Slot, error) {
	l = l.DeepCopy()
	transitions := int32(0)
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions + 1
	}
	l.Spec = s.spec(s.now())
	l.Spec.LeaseTransitions = &transitions
	delete(l.Annotations, AnnotationFailedStep)
	delete(l.Annotations, AnnotationFailedReason)
	out, err := s.Store.Update(ctx, l)
	switch {
	case apierrors.IsConflict(err):
		return nil, errTaken
	case err != nil:
		return nil, fmt.Errorf("take slot %s: %w", l.Name, err)
	}
	return &Slot{Index: i, Lease: out}, nil
}

// readopt makes this node's own slot this process's: the same Node UID
// under the current boot ID, renewed; a failure recorded on it stays.
func (s *Slots) readopt(ctx context.Context, i int, l *coordinationv1.Lease, prev Holder) (*Slot, error) {
	l = l.DeepCopy()
	id := s.Holder.String()
	now := metav1.NewMicroTime(s.now())
	l.Spec.HolderIdentity, l.Spec.RenewTime = &id, &now
	out, err := s.Store.Update(ctx, l)
	if err != nil {
		// A conflict means someone else wrote our slot in between: an
		// operator's clear, or a takeover after expiry. Either way the
		// next Acquire sees it.
		return nil, fmt.Errorf("re-adopt slot %s: %w", l.Name, err)
	}
	return &Slot{Index: i, Lease: out, Readopted: true, PreviousBootID: prev.BootID}, nil
}

package fleet

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Renew moves the slot's renewTime to now. ErrSlotLost when the Lease
// changed under us (a takeover after it expired, or an operator's clear):
// a compare-and-swap on the resourceVersion the holder last wrote, so a
// holder that was taken over can never overwrite its successor.
func (s *Slots) Renew(ctx context.Context, sl *Slot) error {
	return s.write(ctx, sl, "renew", func(l *coordinationv1.Lease) {
		now := metav1.NewMicroTime(s.now())
		l.Spec.RenewTime = &now
	})
}

// Fail records on the slot that its holder failed at step, with reason,
// and renews it: the slot stays held (and is not freed by expiry) so no
// other node starts: the rollout pauses by itself.
func (s *Slots) Fail(ctx context.Context, sl *Slot, step, reason string) error {
	return s.write(ctx, sl, "mark failed", func(l *coordinationv1.Lease) {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationFailedStep] = step
		l.Annotations[AnnotationFailedReason] = reason
		now := metav1.NewMicroTime(s.now())
		l.Spec.RenewTime = &now
	})
}

// Release frees the slot for the next node: the holder is cleared (the
// Lease stays, so the next taker updates rather than creates it). A
// failed slot is not released by its holder: Release refuses it, and
// only an operator's resume clears it.
func (s *Slots) Release(ctx context.Context, sl *Slot) error {
	if r := sl.Lease.Annotations[AnnotationFailedReason]; r != "" {
		return fmt.Errorf("slot %s is held by a failed node (%s): it is freed by resuming the rollout, not by its holder", sl.Lease.Name, r)
	}
	return s.write(ctx, sl, "release", func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity, l.Spec.RenewTime = nil, nil
	})
}

// write changes the slot as change says, if it is still ours at the
// resourceVersion last written; sl.Lease becomes what was stored.
func (s *Slots) write(ctx context.Context, sl *Slot, what string, change func(*coordinationv1.Lease)) error {
	if holderOf(sl.Lease) != s.Holder.String() {
		return fmt.Errorf("%s slot %s: %w", what, sl.Lease.Name, ErrSlotLost)
	}
	l := sl.Lease.DeepCopy()
	change(l)
	out, err := s.Store.Update(ctx, l)
	if apierrors.IsConflict(err) {
		// A conflict is not always a takeover: on a loaded API server our
		// last write can land after its client gave up on it (a request
		// timeout), and we hold an older resourceVersion of a Lease that
		// still names us. A quorum read tells the two apart; only another
		// holder (or none: an operator's clear, a release that landed) is
		// a lost slot, and a failed read is an error to try again, not a
		// loss.
		cur, rerr := s.stored(ctx, l.Name)
		switch {
		case rerr != nil:
			return fmt.Errorf("%s slot %s: %v; reading it back: %w", what, l.Name, err, rerr)
		case cur != nil && holderOf(cur) == s.Holder.String():
			l = cur.DeepCopy()
			change(l)
			out, err = s.Store.Update(ctx, l)
		}
	}
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return fmt.Errorf("%s slot %s: %w (%v)", what, l.Name, ErrSlotLost, err)
	case err != nil:
		return fmt.Errorf("%s slot %s: %w", what, l.Name, err)
	}
	sl.Lease = out
	return nil
}

// stored is slot name as the server has it now (a quorum list of the
// rollout's slots: a few Leases), nil when it is gone.
func (s *Slots) stored(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	list, err := s.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

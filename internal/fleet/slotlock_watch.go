package fleet

import (
	"context"
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// candidateWatch is how long the server keeps a candidate's watch on the
// lock open (its timeoutSeconds, jittered to 75-125 % so a fleet's
// watches do not end together) before the candidate opens the next from
// the version it reached: one request per candidate per this, at rest.
const candidateWatch = 10 * time.Minute

// watchSlot watches the lock's one object (field selector metadata.name)
// from rv, with bookmarks (they keep rv fresh, so the next watch does not
// start from an expired version).
func (l *SlotLock) watchSlot(ctx context.Context, rv string) (watch.Interface, error) {
	secs := int64((candidateWatch*3/4 + rand.N(candidateWatch/2)) / time.Second)
	opts := metav1.ListOptions{Watch: true, FieldSelector: "metadata.name=" + l.name, ResourceVersion: rv,
		AllowWatchBookmarks: true, TimeoutSeconds: &secs}
	return boundedWatch(ctx, opts, func(ctx context.Context) (watch.Interface, error) {
		return l.rc.Get().Namespace(l.ns).Resource(v1alpha1.SlotResource).VersionedParams(&opts, l.params).Watch(ctx)
	})
}

// free says how long until the slot as last seen may be taken on this
// process's clock: 0 when it is released (or ours), else what is left of
// its duration since this process first saw its current version.
func (l *SlotLock) free(now time.Time) time.Duration {
	if l.seen == nil {
		return 0
	}
	h := slotHolder(l.seen)
	if h == "" || h == l.identity {
		return 0
	}
	return max(0, l.observedAt.Add(slotDuration(l.seen, l.duration)).Sub(now))
}

// follow is a candidate's wait for the lock, through a watch on it
// rather than a read on a timer (issue 31: a candidate's steady cost is
// its open watch, a request per candidateWatch): every write of the
// holder reaches the candidate as an event, so the candidate judges
// expiry as TryAcquireOrRenew does, by its own clock since it saw the
// slot's current version, and tries (a compare-and-swap from the watched
// copy, no read) when that runs out or the holder releases it. It
// returns true once it holds the lock; false with no error when the
// watch cannot go on from where it was (its version expired, the slot
// was deleted, or the watched copy was not current): the caller reads
// the lock again; an error when a watch could not be opened or the try
// failed (the caller waits, jittered, and reads again).
func (e *Election) follow(ctx context.Context) (bool, error) {
	l := e.Lock
	rv := l.observedRV
	for ctx.Err() == nil {
		w, err := l.watchSlot(ctx, rv)
		if err != nil {
			return false, err
		}
		held, next, err := e.followWatch(ctx, w)
		w.Stop()
		if held || err != nil || next == "" {
			return held, err
		}
		rv = next // the server ended the watch: the next goes on from here
	}
	return false, nil
}

// followWatch follows one watch; next is the version to watch on from
// when the server ended it ("" when the caller must read again).
func (e *Election) followWatch(ctx context.Context, w watch.Interface) (held bool, next string, err error) {
	l := e.Lock
	next = l.observedRV
	// After a try that lost (a compare-and-swap conflict: someone wrote
	// the slot after the version we saw), the next try waits for that
	// write's event rather than trying again from the same copy; so does
	// the first with no copy yet (a create that lost its race: a watch
	// from no version starts with the slot as it is).
	lost := l.seen == nil
	for {
		var expiry <-chan time.Time
		timer := time.NewTimer(l.free(l.now()))
		if !lost {
			expiry = timer.C
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return false, "", nil
		case ev, ok := <-w.ResultChan():
			timer.Stop()
			if !ok {
				return false, next, nil
			}
			switch ev.Type {
			case watch.Error, watch.Deleted:
				// 410 Gone and the like, or no slot any more: read it
				// again (TryAcquireOrRenew creates an absent one).
				return false, "", nil
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil {
					next = m.GetResourceVersion()
				}
				continue
			}
			s, ok := ev.Object.(*v1alpha1.FlexNodeSlot)
			if !ok {
				return false, "", nil
			}
			l.observe(s, l.now())
			next, lost = s.ResourceVersion, false
			if l.free(l.now()) > 0 {
				continue
			}
		case <-expiry:
		}
		held, _, err := l.tryFrom(ctx, l.seen, false)
		if held || err != nil {
			return held, "", err
		}
		lost = true
	}
}

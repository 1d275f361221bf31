package fleet

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

func newLock(t *testing.T, cfg *rest.Config, node string, clock *time.Time) *SlotLock {
	t.Helper()
	l, err := NewSlotLock(cfg, nil, v1alpha1.Namespace, StatusWriterSlot, WriterIdentity(node), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if clock != nil {
		l.now = func() time.Time { return *clock }
	}
	return l
}

// TestSlotLockTakesOverOnlyAfterTheLeaseDuration: the first candidate
// creates the lock; the others do not take it while it is renewed, nor
// before they have seen it unchanged for its duration on their own
// clock; then one takes it over (a compare-and-swap: the old holder's
// next renew fails and it learns who holds it); a release hands it over
// at once.
func TestSlotLockTakesOverOnlyAfterTheLeaseDuration(t *testing.T) {
	f, cfg := newFakeAPI(t)
	ctx := context.Background()
	t0 := time.Now()
	ca, cb := t0, t0
	a, b := newLock(t, cfg, "a", &ca), newLock(t, cfg, "b", &cb)
	try := func(l *SlotLock) (bool, string) {
		held, holder, err := l.TryAcquireOrRenew(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return held, holder
	}
	if held, _ := try(a); !held {
		t.Fatal("a did not create the lock")
	}
	if held, holder := try(b); held || holder != a.Identity() {
		t.Fatalf("b: held %v by %q, want a's", held, holder)
	}
	for range 3 { // a renews every 6 s; b's clock moves as much
		ca, cb = ca.Add(6*time.Second), cb.Add(6*time.Second)
		if held, _ := try(a); !held {
			t.Fatal("a could not renew")
		}
		if held, _ := try(b); held {
			t.Fatal("b took a lock that a renews")
		}
	}
	cb = cb.Add(9 * time.Second) // a stopped renewing; b has seen it unchanged for 9 s
	if held, _ := try(b); held {
		t.Fatal("b took the lock before its duration")
	}
	cb = cb.Add(2 * time.Second)
	if held, _ := try(b); !held {
		t.Fatal("b did not take the expired lock")
	}
	if held, holder := try(a); held || holder != b.Identity() {
		t.Fatalf("a after the takeover: held %v by %q", held, holder)
	}
	s := f.slots[StatusWriterSlot]
	if *s.Spec.LeaseTransitions != 1 || *s.Spec.LeaseDurationSeconds != 10 || *s.Spec.HolderIdentity != b.Identity() {
		t.Errorf("slot spec %+v", s.Spec)
	}
	if err := a.Release(ctx); err != nil { // not a's: nothing to do
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held, _ := try(a); !held {
		t.Fatal("a did not take the released lock at once")
	}
	if _, err := NewSlotLock(cfg, nil, "ns", "x", "", time.Minute); err == nil {
		t.Error("a lock without an identity")
	}
}

// TestElectionOneLeaderAndTakeover: of three candidates one leads; when
// it stops (its context ends), it releases the lock and another leads;
// a leader whose lock is taken from under it stops leading (Lead's
// context ends) and Run says so.
func TestElectionOneLeaderAndTakeover(t *testing.T) {
	f, cfg := newFakeAPI(t)
	var leading atomic.Int32
	var maxLeading atomic.Int32
	type cand struct {
		e      *Election
		cancel context.CancelFunc
		done   chan error
	}
	var cands []*cand
	var mu sync.Mutex
	led := map[string]bool{}
	for _, n := range []string{"a", "b", "c"} {
		l, err := NewSlotLock(cfg, nil, v1alpha1.Namespace, StatusWriterSlot, WriterIdentity(n), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c := &cand{done: make(chan error, 1)}
		c.e = &Election{Lock: l, RenewPeriod: 50 * time.Millisecond, RenewDeadline: 600 * time.Millisecond, CandidatePeriod: 50 * time.Millisecond,
			Lead: func(ctx context.Context) error {
				now := leading.Add(1)
				if now > maxLeading.Load() {
					maxLeading.Store(now)
				}
				mu.Lock()
				led[n] = true
				mu.Unlock()
				<-ctx.Done()
				leading.Add(-1)
				return nil
			}}
		ctx, cancel := context.WithCancel(context.Background())
		c.cancel = cancel
		go func() { c.done <- c.e.Run(ctx) }()
		cands = append(cands, c)
	}
	defer func() {
		for _, c := range cands {
			c.cancel()
		}
	}()
	leader := func() *cand {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			f.mu.Lock()
			s := f.slots[StatusWriterSlot]
			f.mu.Unlock()
			if s != nil && leading.Load() == 1 {
				for _, c := range cands {
					if s.Spec.HolderIdentity != nil && *s.Spec.HolderIdentity == c.e.Lock.Identity() {
						return c
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("no leader within 5s")
		return nil
	}
	first := leader()
	time.Sleep(300 * time.Millisecond) // several renewals: still one leader
	first.cancel()
	if err := <-first.done; err != nil {
		t.Errorf("a leader stopped by its context: %v", err)
	}
	second := leader()
	if second == first {
		t.Fatal("the stopped leader leads")
	}
	// Someone else takes the lock from under the second leader.
	f.mu.Lock()
	s := f.slots[StatusWriterSlot].DeepCopy()
	other := "z/0"
	s.Spec.HolderIdentity = &other
	f.rv++
	s.ResourceVersion = "999999"
	f.slots[StatusWriterSlot] = s
	f.mu.Unlock()
	select {
	case err := <-second.done:
		if !errors.Is(err, ErrLeadershipLost) {
			t.Errorf("the leader whose lock was taken: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the leader did not notice its lock was taken")
	}
	if maxLeading.Load() != 1 {
		t.Errorf("%d leaders at once", maxLeading.Load())
	}
}

// TestElectionLeadFailing: a leader whose work fails steps down: Run
// returns the failure and the lock is released for the next candidate.
func TestElectionLeadFailing(t *testing.T) {
	f, cfg := newFakeAPI(t)
	l, err := NewSlotLock(cfg, nil, v1alpha1.Namespace, StatusWriterSlot, WriterIdentity("a"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var leading []bool
	e := &Election{Lock: l, RenewPeriod: 50 * time.Millisecond, CandidatePeriod: 50 * time.Millisecond,
		Lead:    func(context.Context) error { return errors.New("the Nodes were not listed") },
		Leading: func(b bool) { leading = append(leading, b) }}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Run(ctx); err == nil || !strings.Contains(err.Error(), "the Nodes were not listed") {
		t.Fatalf("Run: %v", err)
	}
	if s := f.slots[StatusWriterSlot]; s.Spec.HolderIdentity != nil {
		t.Errorf("the lock is still held by %s", *s.Spec.HolderIdentity)
	}
	if len(leading) != 2 || !leading[0] || leading[1] {
		t.Errorf("leading %v, want [true false]", leading)
	}
}

// deadHolder puts the lock in the fake as held by a writer that renews
// only when told (renew), as a dead or a live writer would look.
func deadHolder(f *fakeAPI, lease time.Duration) (renew func()) {
	secs, id, n := int32(lease/time.Second), "z/0", int32(0)
	f.mu.Lock()
	f.rv++
	s := &v1alpha1.FlexNodeSlot{ObjectMeta: metav1.ObjectMeta{Name: StatusWriterSlot, Namespace: v1alpha1.Namespace, ResourceVersion: strconv.Itoa(f.rv)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, LeaseTransitions: &n}}
	f.slots[StatusWriterSlot] = s
	f.publishSlot("ADDED", s)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		next := f.slots[StatusWriterSlot].DeepCopy()
		if next.Spec.HolderIdentity == nil || *next.Spec.HolderIdentity != id {
			return // taken over
		}
		f.rv++
		next.ResourceVersion = strconv.Itoa(f.rv)
		t := metav1.NewMicroTime(time.Now())
		next.Spec.RenewTime = &t
		f.slots[StatusWriterSlot] = next
		f.publishSlot("MODIFIED", next)
	}
}

// TestCandidateFollowsTheLockThroughAWatch: a candidate reads the lock
// once and then follows it through a watch, not a read on a timer (its
// CandidatePeriod here is far beyond the test): it does not take a lock
// whose holder keeps renewing, and takes it once the holder stopped
// renewing for the lease duration, judged on its own clock.
func TestCandidateFollowsTheLockThroughAWatch(t *testing.T) {
	f, cfg := newFakeAPI(t)
	const lease = 2 * time.Second
	renew := deadHolder(f, lease)
	led := make(chan time.Time, 1)
	e := &Election{Lock: newLock(t, cfg, "b", nil), CandidatePeriod: time.Hour, RenewPeriod: 100 * time.Millisecond, RenewDeadline: time.Second,
		Lead: func(ctx context.Context) error { led <- time.Now(); <-ctx.Done(); return nil }}
	e.Lock.duration = lease
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// The holder renews every 500 ms for 3 s (longer than the lease).
	for range 6 {
		select {
		case <-led:
			t.Fatal("the candidate took a lock its holder renews")
		case <-time.After(500 * time.Millisecond):
		}
		renew()
	}
	stopped := time.Now()
	select {
	case at := <-led:
		if d := at.Sub(stopped); d < lease {
			t.Errorf("took the lock %v after the holder's last renewal, before its lease duration %v", d, lease)
		}
	case <-time.After(3 * lease):
		t.Fatal("the candidate did not take the lock within 3 lease durations of the holder's last renewal")
	}
	if gets := f.count("GET " + slotsPath + "/" + StatusWriterSlot); gets != 1 {
		t.Errorf("the candidate read the lock %d times, want once (then the watch)", gets)
	}
}

// TestCandidateFallsBackWhenTheWatchFails: a candidate whose watch
// cannot be opened reads the lock again after its jittered
// CandidatePeriod, and still takes it over once it expired.
func TestCandidateFallsBackWhenTheWatchFails(t *testing.T) {
	f, cfg := newFakeAPI(t)
	f.failSlotWatches = true
	deadHolder(f, time.Second)
	led := make(chan struct{}, 1)
	e := &Election{Lock: newLock(t, cfg, "b", nil), CandidatePeriod: 100 * time.Millisecond, RenewPeriod: 100 * time.Millisecond, RenewDeadline: time.Second,
		Lead: func(ctx context.Context) error { led <- struct{}{}; <-ctx.Done(); return nil }}
	e.Lock.duration = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-led:
	case <-time.After(5 * time.Second):
		t.Fatal("the candidate did not take the expired lock with its watch failing")
	}
	if gets := f.count("GET " + slotsPath + "/" + StatusWriterSlot); gets < 2 {
		t.Errorf("the lock was read %d times: no fallback to reading", gets)
	}
}

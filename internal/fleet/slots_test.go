package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The slots' behaviour against a real API server is in test/e2e/rollout;
// these are the pure parts.

func TestHolderRoundTrip(t *testing.T) {
	h := Holder{Node: "edge-1", UID: "0b6d1c4e-1111-2222-3333-444455556666", BootID: "9f1c"}
	got, ok := ParseHolder(h.String())
	if !ok || got != h {
		t.Fatalf("ParseHolder(%q) = %+v, %v", h.String(), got, ok)
	}
	for _, bad := range []string{"", "edge-1", "edge-1/uid", "/uid/boot", "edge-1//boot", "a/b/c/d"} {
		if _, ok := ParseHolder(bad); ok {
			t.Errorf("ParseHolder(%q) accepted", bad)
		}
	}
}

func TestSlotIndex(t *testing.T) {
	s := &Slots{Rollout: "r"}
	for name, want := range map[string]int{"r-slot-0": 0, "r-slot-12": 12} {
		if i, ok := s.index(name); !ok || i != want {
			t.Errorf("index(%q) = %d, %v", name, i, ok)
		}
	}
	// Another rollout's slots, and names that only look like ours.
	for _, name := range []string{"rr-slot-0", "r-slot-", "r-slot-01", "r-slot--1", "r-slot-1-slot-0", "r-other"} {
		if i, ok := s.index(name); ok {
			t.Errorf("index(%q) = %d, want not ours", name, i)
		}
	}
	if SlotName("r", 3) != "r-slot-3" {
		t.Error(SlotName("r", 3))
	}
}

// Expiry is judged on this process's clock from when it first saw the
// Lease's resourceVersion, never from the holder's renewTime.
func TestExpiredByObservation(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s := &Slots{Rollout: "r", TTL: 10 * time.Second, Now: func() time.Time { return now }}
	secs := int32(10)
	longAgo := metav1.NewMicroTime(now.Add(-time.Hour)) // a holder's clock far behind
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "r-slot-0", ResourceVersion: "5"},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &secs, RenewTime: &longAgo}}
	if s.expired(l) {
		t.Fatal("expired at first sight")
	}
	now = now.Add(10 * time.Second)
	if s.expired(l) {
		t.Fatal("expired at exactly the TTL")
	}
	now = now.Add(time.Second)
	if !s.expired(l) {
		t.Fatal("not expired one second past the TTL")
	}
	l.ResourceVersion = "6" // renewed
	if s.expired(l) {
		t.Fatal("expired right after a renewal")
	}
	s.forget(map[int]*coordinationv1.Lease{})
	if len(s.seen) != 0 {
		t.Fatalf("forgot nothing: %v", s.seen)
	}
}

// memStore is a Store with the API server's compare-and-swap rules
// (create fails when the name exists, update when the resourceVersion
// moved), counting the creates that lost.
type memStore struct {
	leases     map[string]coordinationv1.Lease
	rv         int
	lostCreate int
	firstTries []string // the name of each Acquire's first create
	tried      bool
	// stale: List answers with no slots, as every node of a wave that
	// listed at the same moment sees them.
	stale bool
}

func (m *memStore) List(context.Context) (*coordinationv1.LeaseList, error) {
	m.tried = false
	out := &coordinationv1.LeaseList{}
	if m.stale {
		return out, nil
	}
	for _, l := range m.leases {
		out.Items = append(out.Items, l)
	}
	return out, nil
}

func (m *memStore) Create(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if !m.tried {
		m.tried = true
		m.firstTries = append(m.firstTries, l.Name)
	}
	if _, ok := m.leases[l.Name]; ok {
		m.lostCreate++
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "flexnodeslots"}, l.Name)
	}
	m.rv++
	c := *l.DeepCopy()
	c.ResourceVersion = strconv.Itoa(m.rv)
	m.leases[l.Name] = c
	return &c, nil
}

func (m *memStore) Update(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	old, ok := m.leases[l.Name]
	if !ok || old.ResourceVersion != l.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Resource: "flexnodeslots"}, l.Name, nil)
	}
	m.rv++
	c := *l.DeepCopy()
	c.ResourceVersion = strconv.Itoa(m.rv)
	m.leases[l.Name] = c
	return &c, nil
}

type aliveNodes map[string]types.UID

func (a aliveNodes) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Node, error) {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: a[name]}}, nil
}

// A wave of nodes that listed the slots at one moment (none yet) does
// not all begin at slot 0: each starts at its own slot and goes round,
// so ten nodes taking ten slots mostly create a missing one at the first
// try, and every slot ends held once.
func TestAcquireSpreadsTheFirstTry(t *testing.T) {
	st := &memStore{leases: map[string]coordinationv1.Lease{}, stale: true}
	nodes := aliveNodes{}
	for i := range 10 {
		name := fmt.Sprintf("edge-%d", i)
		nodes[name] = types.UID("uid-" + name)
		s := &Slots{Store: st, Nodes: nodes, Rollout: "r", TTL: time.Minute, Holder: Holder{Node: name, UID: nodes[name], BootID: "b"}}
		if _, err := s.Acquire(context.Background(), 10); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if len(st.leases) != 10 {
		t.Fatalf("%d slots, want 10", len(st.leases))
	}
	starts := map[string]bool{}
	for _, n := range st.firstTries {
		starts[n] = true
	}
	// All at slot 0, each node losing one create per node before it,
	// would be 45 lost creates from one start.
	if len(starts) < 4 || st.lostCreate >= 45 {
		t.Errorf("first tries %v (%d distinct), %d lost creates: the nodes still queue at one slot", st.firstTries, len(starts), st.lostCreate)
	}
	st.stale = false
	s := &Slots{Store: st, Nodes: nodes, Rollout: "r", TTL: time.Minute, Holder: Holder{Node: "edge-10", UID: "u", BootID: "b"}}
	if _, err := s.Acquire(context.Background(), 10); err != ErrNoSlot {
		t.Errorf("an eleventh node: %v, want ErrNoSlot", err)
	}
}

// nodeTable is a NodeGetter over Nodes by name; absent ones are NotFound.
type nodeTable map[string]*corev1.Node

func (nt nodeTable) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Node, error) {
	n, ok := nt[name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}
	return n.DeepCopy(), nil
}

func readyNode(name string, uid types.UID, ready corev1.ConditionStatus, since time.Time) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(since)}}}}
}

// The power-cut rule: an expired slot goes to another node only when
// its holder cannot be unavailable because of it (its Node gone or
// registered again, or Ready and schedulable); a holder whose Node is
// cordoned or not Ready keeps it past its lease, and Acquire says why.
func TestExpiredSlotTakeoverRule(t *testing.T) {
	since := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	cordoned := readyNode("edge-1", "uid-1", corev1.ConditionTrue, since)
	cordoned.Spec.Unschedulable = true
	cordonedOff := readyNode("edge-1", "uid-1", corev1.ConditionUnknown, since)
	cordonedOff.Spec.Unschedulable = true
	noReady := readyNode("edge-1", "uid-1", corev1.ConditionTrue, since)
	noReady.Status.Conditions = nil
	for _, c := range []struct {
		name   string
		holder *corev1.Node // nil: the Node is gone
		taken  bool
		why    string
	}{
		{"node deleted", nil, true, ""},
		{"node registered again", readyNode("edge-1", "uid-other", corev1.ConditionFalse, since), true, ""},
		{"agent died, node serves", readyNode("edge-1", "uid-1", corev1.ConditionTrue, since), true, ""},
		{"powered off (Ready Unknown)", readyNode("edge-1", "uid-1", corev1.ConditionUnknown, since), false, "Node NotReady (Ready Unknown: its kubelet stopped reporting) since 2026-12-06T10:00:00Z"},
		{"NotReady", readyNode("edge-1", "uid-1", corev1.ConditionFalse, since), false, "Node NotReady since 2026-12-06T10:00:00Z"},
		{"cordoned and Ready", cordoned, false, "Node cordoned"},
		{"cordoned and powered off", cordonedOff, false, "Node NotReady (Ready Unknown: its kubelet stopped reporting) since 2026-12-06T10:00:00Z, and cordoned"},
		{"no Ready condition", noReady, false, "Node reports no Ready condition"},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Unix(1_000_000, 0)
			clock := func() time.Time { return now }
			st := &memStore{leases: map[string]coordinationv1.Lease{}}
			nodes := nodeTable{"edge-2": readyNode("edge-2", "uid-2", corev1.ConditionTrue, since)}
			if c.holder != nil {
				nodes["edge-1"] = c.holder
			}
			holder := &Slots{Store: st, Nodes: nodes, Rollout: "r", TTL: time.Minute, Now: clock, Holder: Holder{Node: "edge-1", UID: "uid-1", BootID: "b1"}}
			if _, err := holder.Acquire(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			other := &Slots{Store: st, Nodes: nodes, Rollout: "r", TTL: time.Minute, Now: clock, Holder: Holder{Node: "edge-2", UID: "uid-2", BootID: "b2"}}
			_, err := other.Acquire(context.Background(), 1)
			if c.holder != nil && c.holder.UID == "uid-1" {
				// Within its lease a live holder's slot is never free.
				if err != ErrNoSlot {
					t.Fatalf("before expiry: %v, want ErrNoSlot", err)
				}
				now = now.Add(time.Minute + time.Second)
				_, err = other.Acquire(context.Background(), 1)
				if c.taken {
					// Ready and schedulable: half a lease more, so a node
					// that lost power just now is NotReady by then.
					if err != ErrNoSlot || len(other.Kept) != 0 {
						t.Fatalf("just past the lease: %v %v, want ErrNoSlot and nothing kept", err, other.Kept)
					}
					now = now.Add(30 * time.Second)
					_, err = other.Acquire(context.Background(), 1)
				}
			}
			switch {
			case c.taken && err != nil:
				t.Fatalf("expired slot of a holder that is not down: %v, want it taken", err)
			case !c.taken && err != ErrNoSlot:
				t.Fatalf("expired slot of a holder that is down (%s): %v, want ErrNoSlot", c.name, err)
			case !c.taken && other.Kept["r-slot-0"] != HeldPastExpiry("edge-1", c.why):
				t.Errorf("Kept = %q, want %q", other.Kept["r-slot-0"], HeldPastExpiry("edge-1", c.why))
			case c.taken && len(other.Kept) != 0:
				t.Errorf("Kept = %v after a takeover", other.Kept)
			}
		})
	}
}

// The powered-off holder comes back (same Node UID, a new boot ID): its
// agent re-adopts the slot it kept past the lease, finishes and releases
// it; only then does the next node take it. A holder that never comes
// back loses it when an operator deletes its Node.
func TestHolderDownKeepsSlotUntilBackOrDeleted(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	since := now.Add(-time.Hour)
	st := &memStore{leases: map[string]coordinationv1.Lease{}}
	nodes := nodeTable{
		"edge-1": readyNode("edge-1", "uid-1", corev1.ConditionUnknown, since),
		"edge-2": readyNode("edge-2", "uid-2", corev1.ConditionTrue, since),
		"edge-3": readyNode("edge-3", "uid-3", corev1.ConditionTrue, since),
	}
	slotsOf := func(n, boot string) *Slots {
		return &Slots{Store: st, Nodes: nodes, Rollout: "r", TTL: time.Minute, Now: clock, Holder: Holder{Node: n, UID: nodes[n].UID, BootID: boot}}
	}
	ctx := context.Background()
	if _, err := slotsOf("edge-1", "boot-a").Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	other := slotsOf("edge-2", "b")
	for range 5 { // ten lease lengths down
		if _, err := other.Acquire(ctx, 1); err != ErrNoSlot {
			t.Fatalf("+%v: %v, want ErrNoSlot while edge-1 is down", now.Sub(time.Unix(1_000_000, 0)), err)
		}
		now = now.Add(2 * time.Minute)
	}
	back := slotsOf("edge-1", "boot-b")
	sl, err := back.Acquire(ctx, 1)
	if err != nil || !sl.Readopted || sl.PreviousBootID != "boot-a" || holderOf(sl.Lease) != back.Holder.String() {
		t.Fatalf("edge-1 back under a new boot: %+v %v, want its slot re-adopted", sl, err)
	}
	if _, err := other.Acquire(ctx, 1); err != ErrNoSlot {
		t.Fatalf("right after the re-adoption: %v", err)
	}
	if err := back.Release(ctx, sl); err != nil {
		t.Fatal(err)
	}
	got, err := other.Acquire(ctx, 1)
	if err != nil || holderOf(got.Lease) != other.Holder.String() {
		t.Fatalf("after edge-1 released: %+v %v", got, err)
	}
	// edge-2 loses power holding it; edge-3 waits until its Node is deleted.
	nodes["edge-2"] = readyNode("edge-2", "uid-2", corev1.ConditionUnknown, now)
	third := slotsOf("edge-3", "b")
	for range 3 {
		if _, err := third.Acquire(ctx, 1); err != ErrNoSlot {
			t.Fatalf("edge-2 down: %v", err)
		}
		now = now.Add(time.Minute)
	}
	delete(nodes, "edge-2")
	if got, err := third.Acquire(ctx, 1); err != nil || holderOf(got.Lease) != third.Holder.String() {
		t.Fatalf("edge-2's Node deleted: %+v %v, want the slot taken", got, err)
	}
}

// lateStore is a memStore whose next Update lands and then answers with
// a timeout, as a write does whose client gave up on a loaded server.
type lateStore struct {
	*memStore
	late bool
}

func (s *lateStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out, err := s.memStore.Update(ctx, l)
	if err == nil && s.late {
		s.late = false
		return nil, apierrors.NewTimeoutError("the request did not complete in time", 1)
	}
	return out, err
}

// A renewal whose answer was lost leaves the holder an older
// resourceVersion; the next renewal's conflict is its own write, not a
// takeover, and the slot is kept. Another holder, or none, is still a
// lost slot.
func TestRenewAfterItsOwnLateWrite(t *testing.T) {
	st := &lateStore{memStore: &memStore{leases: map[string]coordinationv1.Lease{}}}
	nodes := aliveNodes{"edge-1": "uid-1"}
	s := &Slots{Store: st, Nodes: nodes, Rollout: "r", TTL: time.Minute, Holder: Holder{Node: "edge-1", UID: "uid-1", BootID: "b"}}
	sl, err := s.Acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	st.late = true
	if err := s.Renew(context.Background(), sl); err == nil || apierrors.IsConflict(err) || errors.Is(err, ErrSlotLost) {
		t.Fatalf("the late renewal: %v, want its timeout", err)
	}
	if err := s.Renew(context.Background(), sl); err != nil {
		t.Fatalf("the next renewal: %v, want the slot kept", err)
	}
	if got := st.leases[sl.Lease.Name].ResourceVersion; got != sl.Lease.ResourceVersion {
		t.Fatalf("holder has resourceVersion %s, the server %s", sl.Lease.ResourceVersion, got)
	}

	// Taken over (another holder wrote it): lost, and nothing written.
	other := st.leases[sl.Lease.Name]
	id := "edge-2/uid-2/b"
	other.Spec.HolderIdentity = &id
	if _, err := st.memStore.Update(context.Background(), &other); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(context.Background(), sl); !errors.Is(err, ErrSlotLost) {
		t.Fatalf("renewing a slot taken over: %v, want ErrSlotLost", err)
	}
	if h := holderOf(ptr(st.leases[sl.Lease.Name])); h != id {
		t.Fatalf("the slot's holder is %q after the lost renewal, want %q", h, id)
	}
}

// refusingStore is a memStore whose next refuse Updates fail as a loaded
// server's priority and fairness refuses them (429), each refusal noted.
type refusingStore struct {
	*memStore
	mu      sync.Mutex
	refuse  int
	refused []time.Time
}

func (s *refusingStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse > 0 {
		s.refuse--
		s.refused = append(s.refused, time.Now())
		return nil, apierrors.NewTooManyRequests("the server has received too many requests", 1)
	}
	return s.memStore.Update(ctx, l)
}

func (s *refusingStore) List(ctx context.Context) (*coordinationv1.LeaseList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memStore.List(ctx)
}

// A holder whose renewals the server refuses tries again within seconds,
// not a third of the TTL later, and keeps its slot once one lands.
func TestRenewRetriesSoonAfterARefusal(t *testing.T) {
	st := &refusingStore{memStore: &memStore{leases: map[string]coordinationv1.Lease{}}}
	a := &Agent{SlotTTL: 9 * time.Second} // renews every 3 s
	a.slots = &Slots{Store: st, Nodes: aliveNodes{"edge-1": "uid-1"}, Rollout: "r", TTL: a.SlotTTL, Holder: Holder{Node: "edge-1", UID: "uid-1", BootID: "b"}}
	sl, err := a.slots.Acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	rv, name := sl.Lease.ResourceVersion, sl.Lease.Name
	st.refuse = 2
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stop := a.renew(ctx, cancel, sl)
	// The first renewal at 3 s is refused, then 0.5-1 s later the second,
	// then 1-2 s later the third lands: at most 6 s, where a third of the
	// TTL between attempts would be 9 s.
	// The renewer owns sl until stop: the test watches the store.
	stored := func() string {
		st.mu.Lock()
		defer st.mu.Unlock()
		l := st.leases[name]
		return l.ResourceVersion
	}
	deadline := time.Now().Add(7 * time.Second)
	for time.Now().Before(deadline) && stored() == rv {
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.refused) != 2 || sl.Lease.ResourceVersion == rv {
		t.Fatalf("%d renewals refused, slot at resourceVersion %s (was %s): the renewal was not tried again soon", len(st.refused), sl.Lease.ResourceVersion, rv)
	}
	if gap := st.refused[1].Sub(st.refused[0]); gap > 1500*time.Millisecond {
		t.Errorf("the second attempt came %s after the first refusal, want 0.5-1 s", gap)
	}
	if context.Cause(ctx) != nil {
		t.Errorf("the work was cancelled: %v", context.Cause(ctx))
	}
}

func TestRenewRetryBounds(t *testing.T) {
	every := 20 * time.Second
	for failed, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second, 6: every, 40: every} {
		for range 50 {
			if d := renewRetry(failed, every); d < want/2 || d > want {
				t.Fatalf("renewRetry(%d) = %s, want %s-%s", failed, d, want/2, want)
			}
		}
	}
}

package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// TestSlotsNeverExceedMaxUnavailable runs six agents that each take a
// slot, hold it briefly (renewing), release it and come back, against
// maxUnavailable 2: the number of agents that believe they hold a slot,
// and the number of slots the server shows held, never exceed 2, and
// every agent gets its turns.
func TestSlotsNeverExceedMaxUnavailable(t *testing.T) {
	requireE2E(t)
	const rollout, agents, maxUnavailable, turns = "concurrent", 6, 2, 3
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var holding, peak atomic.Int32
	var serverPeak atomic.Int32
	var observeErr atomic.Pointer[error]
	stop := make(chan struct{})
	var observer sync.WaitGroup
	observer.Add(1)
	go func() { // the server's view, throughout
		defer observer.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			holders, err := listHolders(rollout)
			if err != nil {
				observeErr.Store(&err)
				return
			}
			n := int32(0)
			for _, names := range holders {
				n += int32(len(names))
			}
			if n > serverPeak.Load() {
				serverPeak.Store(n)
			}
		}
	}()
	errs := make(chan error, agents)
	var wg sync.WaitGroup
	for a := range agents {
		name := fmt.Sprintf("concurrent-%d", a)
		s := newSlots(t, rollout, name, newNode(t, name), "boot-1", 30*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- runAgent(ctx, s, maxUnavailable, turns, &holding, &peak)
		}()
	}
	wg.Wait()
	close(stop)
	observer.Wait()
	close(errs)
	if e := observeErr.Load(); e != nil {
		t.Errorf("the server's view: %v", *e)
	}
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("peak holders: %d by the agents' count, %d on the server", peak.Load(), serverPeak.Load())
	if peak.Load() > maxUnavailable || serverPeak.Load() > maxUnavailable {
		t.Fatalf("more than %d slots held at once: agents %d, server %d", maxUnavailable, peak.Load(), serverPeak.Load())
	}
}

// runAgent takes a slot turns times, each time holding it for a moment.
func runAgent(ctx context.Context, s *fleet.Slots, max, turns int, holding, peak *atomic.Int32) error {
	for turn := 0; turn < turns; {
		sl, err := s.Acquire(ctx, max)
		if errors.Is(err, fleet.ErrNoSlot) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: only %d of %d turns before the deadline", s.Holder.Node, turn, turns)
			case <-time.After(30 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.Holder.Node, err)
		}
		n := holding.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		for range 2 {
			time.Sleep(100 * time.Millisecond)
			if err := s.Renew(ctx, sl); err != nil {
				return fmt.Errorf("%s: %w", s.Holder.Node, err)
			}
		}
		holding.Add(-1) // before the release: no one else can hold it yet
		if err := s.Release(ctx, sl); err != nil {
			return fmt.Errorf("%s: %w", s.Holder.Node, err)
		}
		turn++
	}
	return nil
}

// pollAcquire tries to take a slot every 200 ms until it gets one or
// within runs out; it returns the slot (nil if none) and when it got it.
func pollAcquire(t *testing.T, s *fleet.Slots, max int, within time.Duration) (*fleet.Slot, time.Duration) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		sl, err := s.Acquire(context.Background(), max)
		if err == nil {
			return sl, time.Since(start)
		}
		if !errors.Is(err, fleet.ErrNoSlot) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil, time.Since(start)
}

// TestExpiredSlotIsTakenOver: while its holder renews, a slot is never
// taken; once the holder stops, the power-cut rule decides: a holder
// whose Node is NotReady (powered off) keeps it past its lease, for as
// long as it is down; one whose Node is Ready and schedulable (its agent
// died, the node serves) loses it to another node one and a half TTLs
// after that node last saw it change, and the old holder is fenced out.
func TestExpiredSlotIsTakenOver(t *testing.T) {
	requireE2E(t)
	const rollout, ttl = "expiry", 2 * time.Second
	a := newSlots(t, rollout, "expiry-a", newNode(t, "expiry-a"), "boot-a", ttl)
	b := newSlots(t, rollout, "expiry-b", newNode(t, "expiry-b"), "boot-b", ttl)
	setReady(t, "expiry-a", corev1.ConditionTrue)
	ctx := context.Background()
	held, err := a.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Renewed every 500 ms for 3 TTLs: b never gets it.
	renewing := make(chan error, 1)
	go func() {
		for range 12 {
			time.Sleep(500 * time.Millisecond)
			if err := a.Renew(ctx, held); err != nil {
				renewing <- err
				return
			}
		}
		renewing <- nil
	}()
	if sl, _ := pollAcquire(t, b, 1, 3*ttl); sl != nil {
		t.Fatalf("b took slot %s while a renewed it", sl.Lease.Name)
	}
	if err := <-renewing; err != nil {
		t.Fatal(err)
	}
	// a stops renewing, its Node NotReady (the node lifecycle
	// controller's Unknown after a power cut): kept past its lease.
	setReady(t, "expiry-a", corev1.ConditionUnknown)
	if sl, _ := pollAcquire(t, b, 1, 4*ttl); sl != nil {
		t.Fatalf("b took slot %s from a holder whose Node is NotReady", sl.Lease.Name)
	}
	if err := a.Renew(ctx, held); err != nil {
		t.Fatalf("a, back, renews its slot kept past the lease: %v", err)
	}
	// a stops again, its Node Ready and schedulable: taken over.
	setReady(t, "expiry-a", corev1.ConditionTrue)
	sl, after := pollAcquire(t, b, 1, 6*ttl)
	if sl == nil {
		t.Fatalf("b did not take the expired slot within %v", 6*ttl)
	}
	t.Logf("b took %s %v after a stopped renewing (TTL %v)", sl.Lease.Name, after.Round(time.Millisecond), ttl)
	if after < ttl+ttl/2 {
		t.Errorf("taken after %v, before one and a half TTLs (%v)", after, ttl+ttl/2)
	}
	if err := a.Renew(ctx, held); !errors.Is(err, fleet.ErrSlotLost) {
		t.Errorf("a's renew after the takeover: %v, want ErrSlotLost", err)
	}
	if h := heldBy(t, rollout); len(h) != 1 || len(h[b.Holder.String()]) != 1 {
		t.Errorf("holders %v, want only b", h)
	}
}

// setReady sets Node name's Ready condition, as its kubelet (True) or
// the node lifecycle controller (Unknown) would.
func setReady(t *testing.T, name string, status corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	// The controller-manager writes a new Node too (its pod CIDR, its
	// taints): read again on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test", LastHeartbeatTime: now, LastTransitionTime: now}}
		_, err = cp.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRestartedAgentReadoptsItsSlot: an agent restarted (same boot) or a
// host rebooted (new boot ID) finds its own slot and re-adopts it, never
// a second one, and the process of the old boot is fenced out.
func TestRestartedAgentReadoptsItsSlot(t *testing.T) {
	requireE2E(t)
	const rollout, ttl = "restart", 30 * time.Second
	uid := newNode(t, "restart-a")
	ctx := context.Background()
	first := newSlots(t, rollout, "restart-a", uid, "boot-1", ttl)
	held, err := first.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, boot := range []string{"boot-1", "boot-2", "boot-2"} {
		again := newSlots(t, rollout, "restart-a", uid, boot, ttl)
		sl, err := again.Acquire(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if sl.Index != held.Index || !sl.Readopted {
			t.Errorf("boot %s: slot %d (re-adopted %v), want slot %d re-adopted", boot, sl.Index, sl.Readopted, held.Index)
		}
		h := heldBy(t, rollout)
		if len(h) != 1 || len(h[again.Holder.String()]) != 1 {
			t.Errorf("boot %s: holders %v, want one slot held by %s", boot, h, again.Holder)
		}
	}
	if err := first.Renew(ctx, held); !errors.Is(err, fleet.ErrSlotLost) {
		t.Errorf("the old boot's renew: %v, want ErrSlotLost", err)
	}
}

// TestDeletedNodeFreesItsSlot: a slot whose holder's Node is deleted, or
// re-created under the same name (a new UID), is free at once, without
// waiting for the TTL.
func TestDeletedNodeFreesItsSlot(t *testing.T) {
	requireE2E(t)
	const rollout, ttl = "deleted", time.Hour
	ctx := context.Background()
	a := newSlots(t, rollout, "deleted-a", newNode(t, "deleted-a"), "boot-a", ttl)
	b := newSlots(t, rollout, "deleted-b", newNode(t, "deleted-b"), "boot-b", ttl)
	if _, err := a.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, 1); !errors.Is(err, fleet.ErrNoSlot) {
		t.Fatalf("b while a holds the only slot: %v, want ErrNoSlot", err)
	}
	if err := cp.Client.CoreV1().Nodes().Delete(ctx, "deleted-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, 1); err != nil {
		t.Fatalf("b after a's Node was deleted: %v", err)
	}
	// b's Node re-created: the same name, another UID, another node.
	if err := cp.Client.CoreV1().Nodes().Delete(ctx, "deleted-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newNode(t, "deleted-b")
	c := newSlots(t, rollout, "deleted-c", newNode(t, "deleted-c"), "boot-c", ttl)
	if _, err := c.Acquire(ctx, 1); err != nil {
		t.Fatalf("c after b's Node was re-created: %v", err)
	}
	if h := heldBy(t, rollout); len(h) != 1 || len(h[c.Holder.String()]) != 1 {
		t.Errorf("holders %v, want only c", h)
	}
}

// TestFailedNodeKeepsItsSlot: a node that failed keeps its slot with the
// step and reason on the Lease; it is not freed by expiry, its holder
// cannot release it, and a restart keeps the failure: the rollout stays
// paused until an operator resumes it.
func TestFailedNodeKeepsItsSlot(t *testing.T) {
	requireE2E(t)
	const rollout, ttl = "failed", 2 * time.Second
	ctx := context.Background()
	uid := newNode(t, "failed-a")
	a := newSlots(t, rollout, "failed-a", uid, "boot-a", ttl)
	b := newSlots(t, rollout, "failed-b", newNode(t, "failed-b"), "boot-b", ttl)
	held, err := a.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Fail(ctx, held, "switch", "RolledBack"); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, held); err == nil {
		t.Error("the failed holder released its slot")
	}
	if sl, _ := pollAcquire(t, b, 1, 3*ttl); sl != nil {
		t.Fatalf("b took the failed node's slot %s", sl.Lease.Name)
	}
	out, err := cp.Kubectl(ctx, nil, "get", "-n", v1alpha1.Namespace, "flexnodeslots", held.Lease.Name, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Metadata struct{ Annotations map[string]string }
	}
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatal(err)
	}
	if l.Metadata.Annotations[fleet.AnnotationFailedStep] != "switch" || l.Metadata.Annotations[fleet.AnnotationFailedReason] != "RolledBack" {
		t.Errorf("annotations %v", l.Metadata.Annotations)
	}
	again, err := newSlots(t, rollout, "failed-a", uid, "boot-a2", ttl).Acquire(ctx, 1)
	if err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	if !again.Readopted || again.Lease.Annotations[fleet.AnnotationFailedReason] != "RolledBack" {
		t.Errorf("after a restart: re-adopted %v, annotations %v", again.Readopted, again.Lease.Annotations)
	}
}

// TestSlotsGoWithTheirRollout: slots are owned by their rollout, so the
// garbage collector removes them when the rollout is deleted.
func TestSlotsGoWithTheirRollout(t *testing.T) {
	requireE2E(t)
	ctx := context.Background()
	r := `{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":"owned"},"spec":{"nodeSelector":{},"release":{"kubernetesVersion":"v1.35.4"}}}`
	out, err := cp.Kubectl(ctx, []byte(r), "create", "-f", "-", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rollout v1alpha1.FlexNodeRollout
	if err := json.Unmarshal(out, &rollout); err != nil {
		t.Fatal(err)
	}
	s := newSlots(t, "owned", "owned-a", newNode(t, "owned-a"), "boot", time.Minute)
	s.Owner = v1alpha1.OwnerReference(&rollout)
	if _, err := s.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kubectl(ctx, nil, "delete", "fnr", "owned"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		out, err := cp.Kubectl(ctx, nil, "get", "-n", v1alpha1.Namespace, v1alpha1.SlotResource, "owned-slot-0", "--ignore-not-found", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if len(out) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot owned-slot-0 still there 60 s after its rollout was deleted")
		}
	}
}

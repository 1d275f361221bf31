package fleet

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

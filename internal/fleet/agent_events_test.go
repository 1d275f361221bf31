package fleet

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// stubEvents records Events through the stub API server: refused while
// it is down, kept when it is up.
type stubEvents struct {
	api  *stubAPI
	mu   sync.Mutex
	sent []string // reason: message
	err  error    // when set, every write fails so (an answer, not a refusal)
}

func (s *stubEvents) Record(_ context.Context, _, reason, message string) error {
	if err := s.api.unreachable("POST events"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.sent = append(s.sent, reason+": "+message)
	return nil
}

func (s *stubEvents) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// Phase-change Events the API server refused while it was away are kept
// in the Record and sent once it is back, oldest first, each once, saying
// when they happened; nothing is sent twice.
func TestEventsLostWhileAwayAreSentOnceWhenBack(t *testing.T) {
	a, api, r, n, _ := cutAgent(t, nil)
	ev := &stubEvents{api: api}
	a.Events = ev
	api.down.Store(true)
	if err := a.report(t.Context(), PhaseUpdating, StepDrain, "", "cordon and drain"); err == nil {
		t.Fatal("report with the API server away: no error")
	}
	if err := a.report(t.Context(), PhaseUpdating, StepSwitch, "", "switch"); err == nil {
		t.Fatal("report with the API server away: no error")
	}
	rec, err := LoadRecord(a.RecordPath)
	if err != nil || len(rec.UnsentEvents) != 2 || rec.UnsentEvents[0].Reason != EventReason(PhaseUpdating) || !strings.Contains(rec.UnsentEvents[1].Message, "at switch") {
		t.Fatalf("record while away: %+v (%v)", rec.UnsentEvents, err)
	}
	if len(ev.got()) != 0 {
		t.Fatalf("sent while away: %v", ev.got())
	}
	// Still away: settle sends nothing and keeps them.
	if err := a.settle(t.Context(), r, n); err == nil {
		t.Fatal("settle while away: no error")
	}
	api.down.Store(false)
	if err := a.settle(t.Context(), r, n); err != nil {
		t.Fatalf("settle once back: %v", err)
	}
	got := ev.got()
	if len(got) != 2 || !strings.Contains(got[0], "at drain") || !strings.Contains(got[1], "at switch") || !strings.Contains(got[0], "sent late: the API server was away") {
		t.Fatalf("Events once back: %q, want the drain's then the switch's, each once", got)
	}
	rec, _ = LoadRecord(a.RecordPath)
	if len(rec.UnsentEvents) != 0 {
		t.Errorf("record once sent: %+v", rec.UnsentEvents)
	}
	if err := a.settle(t.Context(), r, n); err != nil {
		t.Fatal(err)
	}
	if err := a.report(t.Context(), PhaseUpdating, StepSoak, "", "soak"); err != nil {
		t.Fatal(err)
	}
	if got := ev.got(); len(got) != 3 || strings.Contains(got[2], "sent late") {
		t.Errorf("Events after another pass and a new phase: %q, want the two late ones once and the soak's", got)
	}
}

// The queue is bounded (the oldest go), and an Event the API server
// answered (refused it, or may have taken it: a timeout) is never kept:
// sent again it could show twice.
func TestUnsentEventsBoundedAndOnlyRefusedConnectionsKept(t *testing.T) {
	a, api, _, _, _ := cutAgent(t, nil)
	ev := &stubEvents{api: api}
	a.Events = ev
	api.down.Store(true)
	for i := range maxUnsentEvents + 4 {
		a.recordEvent(t.Context(), corev1.EventTypeNormal, "RolloutUpdating", strings.Repeat("x", i))
	}
	if q := a.rec.UnsentEvents; len(q) != maxUnsentEvents || len(q[0].Message) != 4 {
		t.Fatalf("%d kept, the first %q; want the newest %d", len(q), q[0].Message, maxUnsentEvents)
	}
	api.down.Store(false)
	a.rec.UnsentEvents = nil
	for _, err := range []error{apierrors.NewForbidden(corev1.Resource("events"), "e", errors.New("no")), context.DeadlineExceeded} {
		ev.err = err
		a.recordEvent(t.Context(), corev1.EventTypeNormal, "RolloutUpdating", "m")
		if len(a.rec.UnsentEvents) != 0 {
			t.Errorf("after %v: kept %+v", err, a.rec.UnsentEvents)
		}
	}
}

package fleet

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A probe that says the Host is still waiting (ErrSoakNotYet: the pods
// the drain evicted are not back yet) does not fail the soak: its window
// starts again after the last such answer. The Host's own verdict once
// its wait is over (a StepError) fails it.
func TestSoakWaitsWhileTheHostSaysNotYet(t *testing.T) {
	notYet := fmt.Errorf("%w: ReplicaSet default/web (1/2 ready)", ErrSoakNotYet)
	h := &host{healthy: []error{nil, notYet, notYet}}
	a := &Agent{Host: h, SoakProbe: 10 * time.Millisecond}
	began := time.Now()
	if err := a.soak(t.Context(), 100*time.Millisecond); err != nil {
		t.Fatalf("soak with pods coming back: %v", err)
	}
	if d := time.Since(began); d < 120*time.Millisecond {
		t.Errorf("soaked %v: the window did not start again after the last not-yet", d)
	}
	over := &StepError{Step: StepSoak, Reason: "PodsNotBack", Err: errors.New("ReplicaSet default/web (1/2 ready) for 5m0s")}
	a.Host = &host{healthy: []error{notYet, over}}
	if err := a.soak(t.Context(), time.Hour); !errors.Is(err, over) {
		t.Fatalf("the Host's verdict after its wait: %v", err)
	}
}

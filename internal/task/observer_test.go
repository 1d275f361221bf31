package task

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

type recorder struct{ events []string }

func (r *recorder) PhaseStarted(name string) { r.events = append(r.events, "phase "+name) }
func (r *recorder) TaskStarted(name string)  { r.events = append(r.events, "start "+name) }
func (r *recorder) TaskDone(name string, res Result, err error, _ time.Duration) {
	s := "done " + name
	if res.Changed {
		s += " changed"
	}
	if err != nil {
		s += " error"
	}
	r.events = append(r.events, s)
}
func (r *recorder) Waiting(what string) { r.events = append(r.events, "wait "+what) }

// The observer sees phases and tasks in order, and a task's waits reach
// it through the task's context.
func TestObserverSeesTasksAndWaits(t *testing.T) {
	rec, plain := &recorder{}, &recorder{}
	r := &Runner{Log: slog.New(slog.DiscardHandler), Observer: Observers(nil, rec, struct{ Observer }{plain})}
	_, err := r.Phases(context.Background(),
		Phase{Name: "one", Tasks: []Task{Func{N: "a", F: func(ctx context.Context) (Result, error) {
			Wait(ctx, "something")
			return Result{Changed: true}, nil
		}}}},
		Phase{Name: "two", Tasks: []Task{Func{N: "b", F: func(context.Context) (Result, error) { return Result{}, errors.New("no") }}}},
	)
	if err == nil {
		t.Fatal("b did not fail")
	}
	want := "phase one,start a,wait something,done a changed,phase two,start b,done b error"
	if got := strings.Join(rec.events, ","); got != want {
		t.Errorf("observer saw %s, want %s", got, want)
	}
	// An observer that does not show waits is not told of them.
	if got := strings.Join(plain.events, ","); strings.Contains(got, "wait") {
		t.Errorf("a non-Waiter was told of a wait: %s", got)
	}
	// Without an observer, Wait does nothing.
	Wait(context.Background(), "nothing")
}

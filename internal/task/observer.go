package task

import (
	"context"
	"time"
)

// Observer is told what a Runner does as it does it. The Runner calls it
// from the goroutine that runs the tasks, in order: PhaseStarted before a
// phase's tasks, TaskStarted and TaskDone around each task.
type Observer interface {
	PhaseStarted(name string)
	TaskStarted(name string)
	TaskDone(name string, res Result, err error, d time.Duration)
}

// Waiter is an Observer that shows what a running task waits for: a long
// wait (the kubelet's TLS bootstrap, the Node turning Ready, a drain)
// says what it waits for, and again whenever that changes.
type Waiter interface {
	Waiting(what string)
}

type observerKey struct{}

// WithObserver returns ctx carrying o, which Wait reports to. The Runner
// does this for each task it runs; code that waits outside a task (the end
// of agent-upgrade) does it itself.
func WithObserver(ctx context.Context, o Observer) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

// Wait tells the observer in ctx, if it shows waits, that the caller now
// waits for what ("the Node to be Ready: node registered, not Ready").
// Without one it does nothing: waits log what they need on their own.
func Wait(ctx context.Context, what string) {
	if w, ok := ctx.Value(observerKey{}).(Waiter); ok {
		w.Waiting(what)
	}
}

// Observers is one Observer telling each of os in turn; nil entries are
// skipped, and it is a Waiter when any of them is.
func Observers(os ...Observer) Observer {
	var m multi
	for _, o := range os {
		if o != nil {
			m = append(m, o)
		}
	}
	switch len(m) {
	case 0:
		return nil
	case 1:
		return m[0]
	}
	return m
}

type multi []Observer

func (m multi) PhaseStarted(name string) {
	for _, o := range m {
		o.PhaseStarted(name)
	}
}

func (m multi) TaskStarted(name string) {
	for _, o := range m {
		o.TaskStarted(name)
	}
}

func (m multi) TaskDone(name string, res Result, err error, d time.Duration) {
	for _, o := range m {
		o.TaskDone(name, res, err, d)
	}
}

func (m multi) Waiting(what string) {
	for _, o := range m {
		if w, ok := o.(Waiter); ok {
			w.Waiting(what)
		}
	}
}

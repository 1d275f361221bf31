// Package task owns the unit of work of start, reset and agent-upgrade:
// small, idempotent steps with a kebab-case name, grouped into named
// phases and run in order, each reporting in one log line what it did,
// and the typed outputs by which one task hands its result to the tasks
// after it.
package task

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/aks-flex-node/internal/failpoint"
)

// Result is what a task did. Changed is false on a converged host: that is
// how a re-run proves it touched nothing.
type Result struct {
	Changed bool
	Detail  string
}

// Task is one idempotent step.
type Task interface {
	Name() string
	Do(ctx context.Context) (Result, error)
}

// Func adapts a function to a Task.
type Func struct {
	N string
	F func(ctx context.Context) (Result, error)
}

func (f Func) Name() string                           { return f.N }
func (f Func) Do(ctx context.Context) (Result, error) { return f.F(ctx) }
func (f Func) String() string                         { return f.N }
func (r Result) String() string                       { return fmt.Sprintf("changed=%t %s", r.Changed, r.Detail) }

var _ Task = Func{}

// Runner runs tasks, logging one line each.
type Runner struct {
	Log *slog.Logger
	// Starting, when set, is told each task's name before it runs, so a
	// terminal shows which step is in progress during long waits.
	Starting func(name string)
	// Now is the clock durations are measured with; nil means time.Now.
	// Tests fix it so that output can be compared byte for byte.
	Now func() time.Time
	// Observer, when set, is told each phase and task as it starts and
	// ends (a display on a terminal, the metrics store); the tasks it
	// runs reach it through their context with Wait.
	Observer Observer
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Run runs one task, logs `task=<name> status=ok|failed changed=<bool>`,
// and wraps a failure with the task name so errors read outside in.
//
// A task that succeeded then hits the failpoint named after it (only in
// -tags failpoints builds; see internal/failpoint): the crash tests stop
// start, reset and agent-upgrade after every task the code has, by name,
// without a task having to remember to offer the point.
func (r *Runner) Run(ctx context.Context, t Task) (Result, error) {
	return r.run(ctx, "", t)
}

// run is Run for a task of phase ("" for none): it also offers the
// phase-qualified failpoint Step(phase, name) before the plain one.
func (r *Runner) run(ctx context.Context, phase string, t Task) (Result, error) {
	if r.Starting != nil {
		r.Starting(t.Name())
	}
	if r.Observer != nil {
		r.Observer.TaskStarted(t.Name())
		ctx = WithObserver(ctx, r.Observer)
	}
	start := r.now()
	res, err := t.Do(ctx)
	d := r.now().Sub(start)
	if r.Observer != nil {
		r.Observer.TaskDone(t.Name(), res, err, d)
	}
	status := "ok"
	if err != nil {
		status = "failed"
	}
	attrs := []any{"task", t.Name(), "status", status, "changed", res.Changed, "duration", d.Round(time.Millisecond)}
	if res.Detail != "" {
		attrs = append(attrs, "detail", res.Detail)
	}
	if err != nil {
		r.Log.Error("task", append(attrs, "error", err)...)
		return res, fmt.Errorf("%s: %w", t.Name(), err)
	}
	r.Log.Info("task", attrs...)
	if phase != "" {
		failpoint.Hit(Step(phase, t.Name()))
	}
	failpoint.Hit(t.Name())
	return res, nil
}

// Step is the phase-qualified failpoint name of a task of phase,
// "<phase>.<task>": a task that runs in two phases (the repave's
// start-machine in switch and in rollback) is a distinct crash point in
// each, where its plain name is only its first run's.
func Step(phase, task string) string { return phase + "." + task }

// Serial runs tasks in order and stops at the first failure.
func (r *Runner) Serial(ctx context.Context, tasks ...Task) (changed bool, err error) {
	return r.serial(ctx, "", tasks...)
}

func (r *Runner) serial(ctx context.Context, phase string, tasks ...Task) (changed bool, err error) {
	for _, t := range tasks {
		if err := ctx.Err(); err != nil {
			return changed, err
		}
		res, err := r.run(ctx, phase, t)
		changed = changed || res.Changed
		if err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// Phase is a named group of tasks, run in order. A command (start, reset)
// is a list of phases; each is reported by name, and can be run on its
// own when the tasks' inputs are there.
type Phase struct {
	Name  string
	Tasks []Task
}

// Names are the names of the phase's tasks, in order.
func (p Phase) Names() []string {
	out := make([]string, len(p.Tasks))
	for i, t := range p.Tasks {
		out[i] = t.Name()
	}
	return out
}

// Steps are the phase-qualified failpoint names of the phase's tasks,
// in order (Step).
func (p Phase) Steps() []string {
	out := make([]string, len(p.Tasks))
	for i, t := range p.Tasks {
		out[i] = Step(p.Name, t.Name())
	}
	return out
}

// Phases runs phases in order, each task as Serial does, and logs one
// line per phase after its tasks' lines; it stops at the first failure.
// A failure is wrapped with the task's name only, so an error reads the
// same whichever phase the task is in.
func (r *Runner) Phases(ctx context.Context, phases ...Phase) (changed bool, err error) {
	for _, p := range phases {
		if r.Observer != nil {
			r.Observer.PhaseStarted(p.Name)
		}
		start := r.now()
		c, err := r.serial(ctx, p.Name, p.Tasks...)
		changed = changed || c
		LogPhase(r.Log, p.Name, c, r.now().Sub(start), err)
		if err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// LogPhase writes a phase's line: `phase=<name> status=ok|failed
// changed=<bool> duration=...`. It is exported for phases that are not
// made of tasks (start's preflight, a report of checks).
func LogPhase(log *slog.Logger, name string, changed bool, d time.Duration, err error) {
	status := "ok"
	if err != nil {
		status = "failed"
	}
	attrs := []any{"phase", name, "status", status, "changed", changed, "duration", d.Round(time.Millisecond)}
	if err != nil {
		log.Error("phase", append(attrs, "error", err)...)
		return
	}
	log.Info("phase", attrs...)
}

// Output is a value one task hands to the tasks after it: the producer
// sets it, consumers take the same *Output in their constructors. The
// order tasks depend on is then written in their constructors' arguments
// rather than implied by shared fields, and reading an output its
// producer never set names the producer.
type Output[T any] struct {
	producer string
	v        T
	set      bool
}

// NewOutput makes an empty output that the task named producer sets.
func NewOutput[T any](producer string) *Output[T] { return &Output[T]{producer: producer} }

// Set records the producer's result.
func (o *Output[T]) Set(v T) { o.v, o.set = v, true }

// Get returns the result, or an error naming the producer when it has
// not run (or failed before setting it).
func (o *Output[T]) Get() (T, error) {
	if !o.set {
		var zero T
		return zero, fmt.Errorf("no %T: %s did not run", zero, o.producer)
	}
	return o.v, nil
}

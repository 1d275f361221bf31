// Package task owns the unit of work of the bootstrap pipeline: small,
// idempotent steps with a kebab-case name, composed serially or in
// parallel, each reporting in one log line what it did.
package task

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
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

// Record is one finished task, for summaries and benchmarks.
type Record struct {
	Name     string
	Changed  bool
	Duration time.Duration
	Err      error
}

// Runner runs tasks, logging one line each and keeping the records.
type Runner struct {
	Log *slog.Logger
	// Starting, when set, is told each task's name before it runs, so a
	// terminal shows which step is in progress during long waits.
	Starting func(name string)
	mu       sync.Mutex
	Rec      []Record
}

// Run runs one task, logs `task=<name> status=ok|failed changed=<bool>`,
// and wraps a failure with the task name so errors read outside in.
func (r *Runner) Run(ctx context.Context, t Task) (Result, error) {
	if r.Starting != nil {
		r.Starting(t.Name())
	}
	start := time.Now()
	res, err := t.Do(ctx)
	d := time.Since(start)
	r.mu.Lock()
	r.Rec = append(r.Rec, Record{Name: t.Name(), Changed: res.Changed, Duration: d, Err: err})
	r.mu.Unlock()
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
	return res, nil
}

// Serial runs tasks in order and stops at the first failure.
func (r *Runner) Serial(ctx context.Context, tasks ...Task) (changed bool, err error) {
	for _, t := range tasks {
		if err := ctx.Err(); err != nil {
			return changed, err
		}
		res, err := r.Run(ctx, t)
		changed = changed || res.Changed
		if err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// Parallel runs tasks concurrently and returns the first failure (in task
// order, so errors are stable) after all have finished.
func (r *Runner) Parallel(ctx context.Context, tasks ...Task) (changed bool, err error) {
	errs := make([]error, len(tasks))
	res := make([]Result, len(tasks))
	var wg sync.WaitGroup
	for i, t := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = r.Run(ctx, t)
		}()
	}
	wg.Wait()
	for i := range tasks {
		changed = changed || res[i].Changed
	}
	for _, e := range errs {
		if e != nil {
			return changed, e
		}
	}
	return changed, nil
}

// Changed reports whether any recorded task changed something.
func (r *Runner) Changed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.Rec {
		if rec.Changed {
			return true
		}
	}
	return false
}

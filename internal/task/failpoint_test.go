//go:build failpoints

package task

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/Azure/aks-flex-node/internal/failpoint"
)

// The runner offers every task's failpoint, by the task's name, once the
// task has succeeded; a failed task does not reach its point.
func TestRunnerHitsEachTasksFailpointAfterItSucceeds(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(failpoint.EnvPoints, "first:skip,broken:skip")
	t.Setenv(failpoint.EnvDir, dir)
	r := &Runner{Log: slog.New(slog.DiscardHandler)}
	ok := Func{N: "first", F: func(context.Context) (Result, error) { return Result{}, nil }}
	bad := Func{N: "broken", F: func(context.Context) (Result, error) { return Result{}, errors.New("no") }}
	if _, err := r.Serial(context.Background(), ok, bad); err == nil {
		t.Fatal("broken task succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "first.reached")); err != nil {
		t.Errorf("first's failpoint not hit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "broken.reached")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed task reached its failpoint: %v", err)
	}
}

// Issue 26 item 13b: a task run in a phase offers its failpoint by a
// phase-qualified name too, so a task that runs in two phases (the
// repave's start-machine, in switch and in rollback) has a distinct
// crash point in each; the plain name stays the first occurrence's.
func TestRunnerOffersPhaseQualifiedFailpoints(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(failpoint.EnvPoints, "rollback.start:skip")
	t.Setenv(failpoint.EnvDir, dir)
	r := &Runner{Log: slog.New(slog.DiscardHandler)}
	start := Func{N: "start", F: func(context.Context) (Result, error) { return Result{}, nil }}
	if _, err := r.Phases(context.Background(), Phase{Name: "switch", Tasks: []Task{start}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "rollback.start.reached")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the switch phase's task reached the rollback phase's point: %v", err)
	}
	rollback := Phase{Name: "rollback", Tasks: []Task{start}}
	if got := rollback.Steps(); len(got) != 1 || got[0] != "rollback.start" {
		t.Fatalf("Steps = %q", got)
	}
	if _, err := r.Phases(context.Background(), rollback); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "rollback.start.reached")); err != nil {
		t.Errorf("rollback.start not reached: %v", err)
	}
}

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

package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestWaitsWithBackoffThenReconciles(t *testing.T) {
	var buf syncBuf
	var calls int
	var delays []time.Duration
	reconciled := make(chan struct{}, 1)
	a := &Agent{
		Log:     slog.New(slog.NewTextHandler(&buf, nil)),
		WaitFor: "API server https://127.0.0.1:1",
		Ready: func(context.Context) error {
			calls++
			if calls < 4 {
				return errors.New("connection refused")
			}
			return nil
		},
		Loops: []Loop{{Name: "reconcile", Run: func(context.Context) error {
			select {
			case reconciled <- struct{}{}:
			default:
			}
			return nil
		}}},
		MinBackoff:  time.Millisecond,
		MaxBackoff:  4 * time.Millisecond,
		sleepJitter: func(d time.Duration) time.Duration { delays = append(delays, d); return d },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-reconciled:
	case <-time.After(5 * time.Second):
		t.Fatal("never reconciled")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}; len(delays) != 3 || delays[0] != want[0] || delays[1] != want[1] || delays[2] != want[2] {
		t.Errorf("backoff delays %v, want %v", delays, want)
	}
	if !strings.Contains(buf.String(), "for=\"API server https://127.0.0.1:1\"") {
		t.Errorf("log does not say what it waits for:\n%s", buf.String())
	}
}

func TestCancelWhileWaitingIsClean(t *testing.T) {
	var buf syncBuf
	a := &Agent{
		Log:     slog.New(slog.NewTextHandler(&buf, nil)),
		WaitFor: "x",
		Ready:   func(context.Context) error { return errors.New("no") },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil on stop", err)
	}
	if !strings.Contains(buf.String(), "agent stopping while waiting") {
		t.Errorf("no stop log:\n%s", buf.String())
	}
}

// TestLocalLoopRunsWhileWaiting: upkeep that needs nothing remote
// (starting the node's machine after a reboot) must not wait for the API
// server; a loop that needs the cluster does.
func TestLocalLoopRunsWhileWaiting(t *testing.T) {
	var buf syncBuf
	maintained := make(chan struct{}, 3)
	var remote atomic.Int32
	a := &Agent{
		Log:     slog.New(slog.NewTextHandler(&buf, nil)),
		WaitFor: "API server https://127.0.0.1:1",
		Ready:   func(context.Context) error { return errors.New("connection refused") },
		Loops: []Loop{
			{Name: "keep-machine", Local: true, Run: func(context.Context) error {
				select {
				case maintained <- struct{}{}:
				default:
				}
				return errors.New("machinectl failed")
			}},
			{Name: "drift", Run: func(context.Context) error { remote.Add(1); return nil }},
		},
		Interval: time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	for i := 0; i < 2; i++ {
		select {
		case <-maintained:
		case <-time.After(5 * time.Second):
			t.Fatal("the local loop did not run (again) while the agent waited for Ready")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if !strings.Contains(buf.String(), "keep-machine failed; retrying") {
		t.Errorf("a failed local loop is not logged:\n%s", buf.String())
	}
	if n := remote.Load(); n != 0 {
		t.Errorf("a loop that needs the cluster ran %d times before Ready", n)
	}
}

// The agent waits for its config file with backoff, stops cleanly while
// waiting, and gives up at once on an invalid one.
func TestWaitForConfig(t *testing.T) {
	var buf syncBuf
	log := slog.New(slog.NewTextHandler(&buf, nil))
	path := filepath.Join(t.TempDir(), "config.json")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if c, err := WaitForConfig(ctx, path, log); c != nil || err != nil {
		t.Fatalf("stopped while waiting: %v %v", c, err)
	}
	if !strings.Contains(buf.String(), `for="config file `+path+`"`) || !strings.Contains(buf.String(), "retry-in=1s") {
		t.Errorf("log does not say what it waits for and when it retries:\n%s", buf.String())
	}
	if err := os.WriteFile(path, []byte(`{"agent": {"hostprefix": "/opt/x"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var ie *config.InvalidError
	if _, err := WaitForConfig(context.Background(), path, log); !errors.As(err, &ie) {
		t.Fatalf("invalid config: %v", err)
	}
}

package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
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
		Reconcile:   func(context.Context) error { reconciled <- struct{}{}; return nil },
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

// TestMaintainRunsWhileWaiting: upkeep that needs nothing remote (starting
// the node's machine after a reboot) must not wait for the API server.
func TestMaintainRunsWhileWaiting(t *testing.T) {
	var buf syncBuf
	maintained := make(chan struct{}, 3)
	a := &Agent{
		Log:     slog.New(slog.NewTextHandler(&buf, nil)),
		WaitFor: "API server https://127.0.0.1:1",
		Ready:   func(context.Context) error { return errors.New("connection refused") },
		Maintain: func(context.Context) error {
			select {
			case maintained <- struct{}{}:
			default:
			}
			return errors.New("machinectl failed")
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
			t.Fatal("Maintain did not run (again) while the agent waited for Ready")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if !strings.Contains(buf.String(), "maintain failed; retrying") {
		t.Errorf("a failed Maintain is not logged:\n%s", buf.String())
	}
}

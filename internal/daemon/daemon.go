// Package daemon owns the long-running agent: the process systemd keeps up
// as aks-flex-node-agent.service. It waits for what it needs with backoff
// instead of crashing (a crash loop would run into systemd's start limit and
// leave the host without an agent), and it exits cleanly when stopped.
package daemon

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
)

// Probe checks one thing the agent depends on; nil means ready.
type Probe func(ctx context.Context) error

// Agent is the daemon's state.
type Agent struct {
	Config *config.Config
	Layout layout.Layout
	Log    *slog.Logger
	// WaitFor names what the agent waits for and how to check it; the
	// agent logs the name while it waits.
	WaitFor   string
	Ready     Probe
	Reconcile func(ctx context.Context) error
	// Maintain is host-local upkeep that needs nothing remote (keeping the
	// node's machine running after a reboot). It runs at once and every
	// Interval, also while the agent still waits for Ready: a kubelet that
	// is not running cannot make an unreachable API server reachable.
	Maintain    func(ctx context.Context) error
	Interval    time.Duration
	MinBackoff  time.Duration
	MaxBackoff  time.Duration
	AfterReady  func()
	sleepJitter func(time.Duration) time.Duration
}

// Run blocks until ctx is cancelled (SIGTERM from systemd) and returns nil
// then: a stop is not a failure.
func (a *Agent) Run(ctx context.Context) error {
	if a.MinBackoff == 0 {
		a.MinBackoff = time.Second
	}
	if a.MaxBackoff == 0 {
		a.MaxBackoff = time.Minute
	}
	if a.sleepJitter == nil {
		// Full jitter keeps a fleet of agents from retrying in lockstep
		// after an API server outage.
		a.sleepJitter = func(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
	}
	a.Log.Info("agent started", "prefix", a.Layout.Prefix, "binary", a.Layout.AgentBinary, "config", a.Layout.ConfigFile)
	interval := a.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	if a.Maintain != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			a.every(ctx, interval, "maintain", a.Maintain)
		}()
	}
	if a.Ready != nil {
		if err := a.waitReady(ctx); err != nil {
			return nil // cancelled while waiting
		}
	}
	if a.AfterReady != nil {
		a.AfterReady()
	}
	a.every(ctx, interval, "reconcile", a.Reconcile)
	a.Log.Info("agent stopping", "reason", context.Cause(ctx))
	return nil
}

// every runs f now and at each interval until ctx ends; a failure is logged
// and retried at the next interval, never fatal. A nil f just waits.
func (a *Agent) every(ctx context.Context, interval time.Duration, what string, f func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if f != nil {
			if err := f(ctx); err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
				a.Log.Warn(what+" failed; retrying at the next interval", "error", err, "interval", interval)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *Agent) waitReady(ctx context.Context) error {
	backoff := a.MinBackoff
	for attempt := 1; ; attempt++ {
		err := a.Ready(ctx)
		if err == nil {
			a.Log.Info("ready", "waited-for", a.WaitFor, "attempts", attempt)
			return nil
		}
		if ctx.Err() != nil {
			a.Log.Info("agent stopping while waiting", "waiting-for", a.WaitFor)
			return ctx.Err()
		}
		d := a.sleepJitter(backoff)
		a.Log.Info("waiting", "for", a.WaitFor, "attempt", attempt, "error", err, "retry-in", d.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			a.Log.Info("agent stopping while waiting", "waiting-for", a.WaitFor)
			return ctx.Err()
		case <-time.After(d):
		}
		backoff = min(backoff*2, a.MaxBackoff)
	}
}

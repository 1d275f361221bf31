// Package daemon owns the long-running agent: the process systemd keeps up
// as aks-flex-node-agent.service, what it waits for before it works (its
// config file, the API server), the loops it runs, and what it tells the
// outside about itself: /healthz and /metrics on its socket (serve.go,
// health.go). Each loop lives in the file named after it:
//   - keep-machine (keep_machine.go, keep_machine_drift.go) brings the
//     node's machine back after a reboot, repairs drift inside it against
//     the checksums start recorded and stops the inactive side;
//   - keep-node-object (keep_node_object.go) registers a deleted Node again
//     and resets a host whose Node carries the deletion taint;
//   - follow-machine (follow_machine*.go) follows the node's AKS Machine
//     as its goal (labels and taints in place, a repave once AKS deleted
//     the Node, the deletion reset) and retries a failed registration;
//   - follow-rollout (follow_rollout*.go) runs the node's part of the
//     fleet's FlexNodeRollouts (fleet.Agent) with the repave as its host:
//     stage, switch, the soak's probe;
//   - keep-pod-routes (keep_pod_routes.go) routes to the other Nodes' pod
//     CIDRs from a watch on the Nodes;
//   - keep-host-routes (keep_host_routes.go) keeps hostRouting's static
//     routes;
//   - finish-repave (finish_repave.go) finishes a repave whose process died
//     (internal/recovery's rule, which keep-machine follows too: the
//     applied state's side runs, the other is stopped first);
//   - report-upgrade-outcome (report_upgrade_outcome.go) records a rollback
//     of an agent upgrade as an Event on the Node;
//   - write-rollout-status (write_rollout_status.go) is the agent's
//     candidacy for writing the FlexNodeRollouts' status (one agent of
//     the cluster, elected, writes it).
//
// Every loop reports through the same metrics registry and event recorder.
// Loops that change the node hold the node lock (internal/nodelock) while
// they do, taken at once or not at all. The agent waits with backoff
// instead of crashing (a crash loop would run into systemd's start limit
// and leave the host without an agent), and it exits cleanly when stopped.
package daemon

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/metrics"
)

// Probe checks one thing the agent depends on; nil means ready.
type Probe func(ctx context.Context) error

// Loop is one kind of periodic work of the agent.
type Loop struct {
	// Name is kebab-case; the loop's failures are logged under it.
	Name string
	// Local loops need nothing remote: they start at once and run while
	// the agent still waits for Ready (a kubelet that is not running
	// cannot make an unreachable API server reachable). The others start
	// once Ready has passed.
	Local bool
	// Run is one pass. It runs at once and every Interval; an error is
	// logged and retried at the next interval, never fatal. Each pass is
	// timed into the metrics and its outcome kept for /healthz: a local
	// loop whose last pass failed makes the agent unhealthy (503). A pass
	// that changes the node takes the node lock around the change with
	// lockOrSkip, and skips (never queues) while a command holds it.
	Run func(ctx context.Context) error
}

// Agent is the daemon: what it waits for and the loops it runs.
type Agent struct {
	Layout layout.Layout
	Log    *slog.Logger
	// WaitFor names what Ready checks; the agent logs the name while it
	// waits. A nil Ready waits for nothing.
	WaitFor string
	Ready   Probe
	Loops   []Loop
	// Interval is how often each loop runs; 0 means a minute.
	Interval time.Duration
	// MinBackoff and MaxBackoff bound the waits between Ready attempts;
	// 0 means a second and a minute.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Metrics, when set, records each loop pass and is served on
	// /metrics.
	Metrics *metrics.Registry
	// Health is the verdict /healthz serves; Run makes one when nil.
	Health *Health
	// Socket is the Unix socket (as this process opens it) /healthz and
	// /metrics are served on; "" serves none. TCPAddress, when set, serves
	// them there too (agent.metricsAddress).
	Socket     string
	TCPAddress string
	// sleepJitter spreads each wait; tests replace it.
	sleepJitter func(time.Duration) time.Duration
}

func (a *Agent) setDefaults() {
	if a.MinBackoff == 0 {
		a.MinBackoff = time.Second
	}
	if a.MaxBackoff == 0 {
		a.MaxBackoff = time.Minute
	}
	if a.Interval <= 0 {
		a.Interval = time.Minute
	}
	if a.Health == nil {
		a.Health = NewHealth()
	}
	if a.sleepJitter == nil {
		// Each wait is drawn from the upper half of its backoff step, so a
		// fleet of agents does not retry in lockstep after an API server
		// outage.
		a.sleepJitter = func(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
	}
}

// Run blocks until ctx is cancelled (SIGTERM from systemd) and returns nil
// then: a stop is not a failure.
func (a *Agent) Run(ctx context.Context) error {
	a.setDefaults()
	a.Log.Info("agent started", "prefix", a.Layout.Prefix(), "binary", a.Layout.AgentBinary(), "config", a.Layout.ConfigFile())
	var loops wait.Group
	defer loops.Wait()
	a.serve(ctx, &loops)
	a.startLoops(ctx, &loops, true)
	if a.Ready != nil {
		a.Health.waiting(a.WaitFor)
		if err := a.waitReady(ctx); err != nil {
			return nil // cancelled while waiting
		}
		a.Health.waiting("")
	}
	a.startLoops(ctx, &loops, false)
	<-ctx.Done()
	a.Log.Info("agent stopping", "reason", context.Cause(ctx))
	return nil
}

// startLoops starts the loops that are (or are not) Local.
func (a *Agent) startLoops(ctx context.Context, g *wait.Group, local bool) {
	for _, l := range a.Loops {
		if l.Local != local {
			continue
		}
		g.StartWithContext(ctx, func(ctx context.Context) {
			wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
				began := time.Now()
				err := l.Run(ctx)
				if ctx.Err() != nil {
					return // stopped mid-pass: not a pass that failed
				}
				a.Health.loopDone(l, began, err)
				a.Metrics.LoopDone(l.Name, time.Since(began), err)
				if err != nil && !errors.Is(err, context.Canceled) {
					a.Log.Warn(l.Name+" failed; retrying at the next interval", "error", err, "interval", a.Interval)
				}
			}, a.Interval)
		})
	}
}

// waitReady retries Ready with exponential backoff from MinBackoff to
// MaxBackoff until it passes or ctx ends.
func (a *Agent) waitReady(ctx context.Context) error {
	attempt := 0
	var lastErr error
	b := wait.Backoff{Duration: a.MinBackoff, Factor: 2, Cap: a.MaxBackoff, Steps: math.MaxInt32}
	err := retry(ctx, b, a.sleepJitter, func(d time.Duration) {
		a.Log.Info("waiting", "for", a.WaitFor, "attempt", attempt, "error", lastErr, "retry-in", d.Round(time.Millisecond))
	}, func(ctx context.Context) (bool, error) {
		attempt++
		if lastErr = a.Ready(ctx); lastErr == nil {
			return true, nil
		}
		return false, ctx.Err()
	})
	if err != nil {
		a.Log.Info("agent stopping while waiting", "waiting-for", a.WaitFor)
		return err
	}
	a.Log.Info("ready", "waited-for", a.WaitFor, "attempts", attempt)
	return nil
}

// retry runs attempt at once and again after each delay of b (each passed
// through jitter) until it returns true or an error, or ctx ends (then
// ctx's error). waiting is told each delay before it starts, so a log line
// can say when the next attempt comes.
func retry(ctx context.Context, b wait.Backoff, jitter func(time.Duration) time.Duration, waiting func(time.Duration), attempt wait.ConditionWithContextFunc) error {
	next := b.DelayFunc()
	delay := func() time.Duration {
		d := jitter(next())
		waiting(d)
		return d
	}
	return wait.DelayFunc(delay).Until(ctx, true, true, attempt)
}

package fleetsim

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestFleetSimSteadyBench (issue 31, AKS_FLEX_NODE_BENCH=1; N from
// AKS_FLEX_NODE_BENCH_FLEETSIM_N, default 20) prints each agent's
// requests by loop, verb and resource in three windows: at rest before any
// rollout, during a rollout of all N (maxUnavailable 10 %, switches
// stubbed to 5 s), and at rest after it completed, when a rollout exists
// and every agent is a candidate for its status writer.
func TestFleetSimSteadyBench(t *testing.T) {
	if os.Getenv("AKS_FLEX_NODE_BENCH") == "" {
		t.Skip("a benchmark: AKS_FLEX_NODE_BENCH=1")
	}
	requireE2E(t)
	n := envInts(t, "AKS_FLEX_NODE_BENCH_FLEETSIM_N", "20")[0]
	rest := envDuration(t, "AKS_FLEX_NODE_BENCH_FLEETSIM_REST", time.Minute)
	cp := startControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	f, err := Start(ctx, cp, Options{N: n, Dir: t.TempDir(), Spread: 2 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}()
	sleep(ctx, 30*time.Second) // the start's lists over
	window := func(name string, w window) {
		agents := w.total(func(l string) bool { return l != "kubelet" })
		t.Logf("BENCH steady n=%d %s: %.0fs, agent requests %d = %.2f per agent per minute", n, name, w.seconds, agents, float64(agents)/float64(n)/(w.seconds/60))
		for _, l := range w.table() {
			t.Logf("BENCH steady n=%d %s %s", n, name, l)
		}
	}
	r, err := f.measureRest(ctx, rest)
	if err != nil {
		t.Fatal(err)
	}
	window("rest-before-rollout", r.requests)
	res, err := f.Rollout(ctx, "steady", "10%", "v1.35.1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	window("rollout", res.Requests)
	sleep(ctx, 20*time.Second) // the last writes of the rollout over
	r, err = f.measureRest(ctx, rest)
	if err != nil {
		t.Fatal(err)
	}
	window("rest-after-rollout", r.requests)
}

package fleetsim

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestFleetSim (in make test) runs 20 simulated nodes with the agent's
// loops against a real control plane: every agent lists the Nodes once,
// from the watch cache, and never asks etcd for them; each agent's pod
// routes come to the other 19 Nodes; a Node's new address reaches every
// agent through its watch; and a rollout of all 20 with maxUnavailable
// 10% never has more than 2 slots held, by the nodes' count or the
// server's, and completes: the status writer, elected among the agents,
// says Complete.
func TestFleetSim(t *testing.T) {
	requireE2E(t)
	const n = 20
	cp := startControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Two worker processes of 10 nodes each, as the benchmark's larger
	// fleets run.
	f, err := Start(ctx, cp, Options{N: n, Workers: 2, Dir: t.TempDir(), Spread: 2 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	// The controller-manager allocates the pod CIDRs; the routes follow.
	deadline := time.Now().Add(90 * time.Second)
	for {
		routes, err := f.Routes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := true
		for _, r := range routes {
			done = done && r == n-1
		}
		if done && len(routes) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("routes per agent %v, want %d each", routes, n-1)
		}
		time.Sleep(200 * time.Millisecond)
	}
	took, _, err := f.Propagation(ctx, 3, "10.1.200.3", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a Node's new address reached the %d agents: %s", len(took), quantiles(took))
	res, err := f.Rollout(ctx, "sim", "10%", "v1.35.1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	writer := res.Requests.total(func(l string) bool { return l == "status-writer" })
	t.Logf("rollout of %d, maxUnavailable %d: peak %d held by the nodes' count, %d on the server; every node Updated in %s, Complete by the status writer in %s; %d requests, %d of them the status writer's candidates and leader",
		n, res.Max, res.PeakAgents, res.PeakServer, res.Took.Round(time.Millisecond), res.Complete.Round(time.Millisecond), res.Requests.total(nil), writer)
	if res.Complete == 0 {
		t.Error("the elected status writer did not say Complete within a minute of the last node's Updated")
	}
	if res.Max != 2 || res.PeakAgents > int32(res.Max) || res.PeakServer > res.Max || res.PeakAgents < 1 {
		t.Errorf("slots: max %d, peak %d by the nodes, %d on the server", res.Max, res.PeakAgents, res.PeakServer)
	}
	etcd, lists, err := f.lists(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for node, n := range etcd {
		t.Errorf("%s listed the Nodes %d time(s) without a resourceVersion (from etcd)", node, n)
	}
	// The agent's one Node informer (its loops', fleet.Agent's and the
	// status writer's) lists once and then watches: no loop lists the
	// Nodes otherwise.
	for _, node := range f.names {
		if got := lists[node+" node-informer"]; got != 1 {
			t.Errorf("%s's Node informer listed the Nodes %d times, want once (then watch)", node, got)
		}
	}
	for key, n := range lists {
		if _, loop, _ := strings.Cut(key, " "); loop != "node-informer" {
			t.Errorf("%s listed the Nodes %d time(s) beside the node's one informer", key, n)
		}
	}
}

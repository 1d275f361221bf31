package daemon

import (
	"context"
	"testing"
)

// BenchmarkFollowMachineSteadyPass is the agent's steady cost per
// agent.machineReconcileInterval once the goal is applied: one pass of
// the follower against the fake ARM over TLS (tokens from the fake Entra
// tenant, held by the client while fresh) and the node's Node in a fake
// API server. It reports the requests each pass sends to ARM and to the
// API server, the figure a fleet's load is made of.
func BenchmarkFollowMachineSteadyPass(b *testing.B) {
	e := newFollowEnv(b)
	e.machine()
	ctx := context.Background()
	// The first pass adopts the Machine's eTag; the steady passes follow.
	if err := e.f.Follow(ctx); err != nil {
		b.Fatal(err)
	}
	arm0, api0 := len(e.arm.Requests()), len(e.cs.Actions())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := e.f.Follow(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(len(e.arm.Requests())-arm0)/float64(b.N), "ARM-requests/interval")
	b.ReportMetric(float64(len(e.cs.Actions())-api0)/float64(b.N), "API-requests/interval")
}

package fleetrollout

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/test/aclhost"
)

// TestRolloutBench is `make bench-rollout`: N = 3 ACL-like hosts join at
// release A, then a rollout to B with maxUnavailable 1 and one to C with
// maxUnavailable 2 (each a Kubernetes version or worker image change,
// 10 s soak). For each: apply to Complete, per node the staging time,
// the wait for a slot, the switch, the NotReady and cordoned windows,
// and the API server's requests per node from its audit log (the
// agents' and, apart, the kubelets'), in the rollout's window and in as
// long a window idle before it.
func TestRolloutBench(t *testing.T) {
	aclhost.RequireE2E(t)
	if os.Getenv("AKS_FLEX_NODE_BENCH") != "1" {
		t.Skip("set AKS_FLEX_NODE_BENCH=1 (make bench-rollout)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	e := setUp(ctx, t, specs[:3], auditPolicy)
	e.joinAll(t)
	for i, r := range []struct {
		name, rel      string
		maxUnavailable int
	}{{"bench-max1", "b", 1}, {"bench-max2", "c", 2}} {
		if i > 0 {
			e.deleteRollout(t, "bench-max1")
		}
		e.benchRollout(t, r.name, r.rel, r.maxUnavailable)
	}
}

func (e *env) benchRollout(t *testing.T, name, rel string, maxUnavailable int) {
	w := watchNodes(t, e.cp.Client)
	// The idle cost first: as long a window as a rollout takes, nothing
	// happening (bounded: the figure is per minute).
	idleFrom := time.Now()
	time.Sleep(time.Minute)
	idleTo := time.Now()
	began := time.Now()
	e.apply(t, rollout(name, e.rel.release(rel), maxUnavailable, soak))
	e.waitComplete(t, name, 15*time.Minute)
	took := time.Since(began)
	ro := e.get(t, name)
	e.logFigures(t, name, w, began, ro.Generation, took)
	peak, _, set := w.maxDisrupted()
	t.Logf("BENCH rollout=%s maxUnavailable=%d most-disrupted-at-once=%d %v", name, maxUnavailable, peak, set)
	if peak > maxUnavailable {
		t.Errorf("%d Nodes disrupted at once, maxUnavailable %d. Timeline:\n%s", peak, maxUnavailable, w.timeline(began))
	}
	// The audit log is written as requests complete; a second lets the
	// last ones of the window reach it.
	time.Sleep(time.Second)
	e.logRequests(t, name+" idle-1m", idleFrom, idleTo)
	e.logRequests(t, name, began, began.Add(took))
}

func (e *env) logRequests(t *testing.T, what string, from, to time.Time) {
	counts, err := countRequests(e.cp.AuditLog, from, to)
	must(t, err)
	var progs []string
	for p := range counts {
		progs = append(progs, p)
	}
	sort.Strings(progs)
	n := float64(len(e.hosts))
	for _, p := range progs {
		c := counts[p]
		t.Logf("BENCH requests window=%q seconds=%.0f program=%s total=%d per-node=%.1f per-node-per-minute=%.1f by=[%s]",
			what, to.Sub(from).Seconds(), p, c.Total, float64(c.Total)/n, float64(c.Total)/n/to.Sub(from).Minutes(), c)
	}
}

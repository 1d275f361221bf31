package fleetsim

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFleetSimBench (make bench-fleet-sim N=...; AKS_FLEX_NODE_BENCH=1)
// runs, for each N of AKS_FLEX_NODE_BENCH_FLEETSIM_N (default 100) and
// each mode of AKS_FLEX_NODE_BENCH_FLEETSIM_MODES (default
// "before,after": the agent as it was, with its per-pass list, and as it
// is), a fleet of N on a control plane of its own, and prints: the API
// server's and etcd's CPU and memory at rest, requests per second by
// loop and verb, the open watches, p50/p99 request latency, how long one
// Node's change takes to reach every agent, and a rollout of all N with
// maxUnavailable 10% (switches stubbed to AKS_FLEX_NODE_BENCH_FLEETSIM_SWITCH,
// default 5 s): the slot invariant, the time to complete, its requests.
func TestFleetSimBench(t *testing.T) {
	if os.Getenv("AKS_FLEX_NODE_BENCH") == "" {
		t.Skip("the fleet simulator's benchmark runs with AKS_FLEX_NODE_BENCH=1 (make bench-fleet-sim)")
	}
	requireE2E(t)
	sizes := envInts(t, "AKS_FLEX_NODE_BENCH_FLEETSIM_N", "100")
	modes := strings.Split(envOr("AKS_FLEX_NODE_BENCH_FLEETSIM_MODES", "before,after"), ",")
	rest := envDuration(t, "AKS_FLEX_NODE_BENCH_FLEETSIM_REST", 2*time.Minute)
	switchFor := envDuration(t, "AKS_FLEX_NODE_BENCH_FLEETSIM_SWITCH", 5*time.Second)
	var rows []string
	for _, n := range sizes {
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%s-%d", mode, n), func(t *testing.T) {
				rows = append(rows, benchRound(t, n, mode == "before", rest, switchFor)...)
			})
		}
	}
	for _, r := range rows {
		t.Log(r)
	}
}

func benchRound(t *testing.T, n int, legacy bool, rest, switchFor time.Duration) []string {
	mode := "after"
	if legacy {
		mode = "before"
	}
	cp := startControlPlane(t)
	var err error
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	// The agents start spread over this (AKS_FLEX_NODE_BENCH_FLEETSIM_SPREAD),
	// as hosts that boot at different moments: 1000 first lists at once
	// outgrow this machine (see docs/reference/fleet-scale.md).
	spread := envDuration(t, "AKS_FLEX_NODE_BENCH_FLEETSIM_SPREAD", min(time.Duration(n)*30*time.Millisecond, time.Minute))
	noRollout := os.Getenv("AKS_FLEX_NODE_BENCH_FLEETSIM_ROLLOUT") == "0"
	workers := 0
	if v := os.Getenv("AKS_FLEX_NODE_BENCH_FLEETSIM_WORKERS"); v != "" {
		if workers, err = strconv.Atoi(v); err != nil {
			t.Fatalf("AKS_FLEX_NODE_BENCH_FLEETSIM_WORKERS: %v", err)
		}
	}
	f, err := Start(ctx, cp, Options{N: n, Workers: workers, Legacy: legacy, Dir: t.TempDir(), Spread: spread, NoRollout: noRollout, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}()
	// Settle: the start's lists and the controllers' first passes over.
	sleep(ctx, 30*time.Second)
	atRest, err := f.measureRest(ctx, rest)
	if err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("AKS_FLEX_NODE_BENCH_FLEETSIM_PROFILES"); dir != "" {
		if err := f.profiles(ctx, dir); err != nil {
			t.Error(err)
		}
	}
	head := fmt.Sprintf("BENCH fleetsim mode=%s n=%d", mode, n)
	rows := []string{head + " rest " + atRest.String()}
	if b, err := cp.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + f.names[0]).DoRaw(ctx); err == nil {
		rows = append(rows, fmt.Sprintf("%s node-object=%dB (JSON, as a list or watch sends it)", head, len(b)))
	}
	for _, l := range atRest.requests.table() {
		rows = append(rows, head+" rest-requests "+l)
	}
	for _, r := range rows {
		t.Log(r) // at once: a large round's rollout takes long
	}
	// Ten changes, 5 s apart, each of another node: the p99 of 10 × N
	// arrivals is not one change's tail.
	var took, afterAnswer []time.Duration
	for k := range propagationChanges {
		if k > 0 {
			sleep(ctx, 5*time.Second)
		}
		d, post, err := f.Propagation(ctx, (k*97+1)%n, fmt.Sprintf("10.1.254.%d", k+1), 2*time.Minute)
		took = append(took, d...)
		for _, x := range d {
			afterAnswer = append(afterAnswer, x-post)
		}
		if err != nil {
			t.Error(err) // the next change would wait as long: enough
			break
		}
	}
	rows = append(rows, fmt.Sprintf("%s node-change-to-every-agent (%d changes x %d agents) from the post sent %s; from its answer %s", head, propagationChanges, n, quantiles(took), quantiles(afterAnswer)))
	t.Log(rows[len(rows)-1])
	if !noRollout {
		rows = append(rows, f.benchRollout(ctx, t, head, switchFor)...)
	}
	etcd, lists, err := f.lists(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total, fromEtcd := 0, 0
	for k, v := range lists {
		if !strings.HasSuffix(k, " kubelet") {
			total += v
		}
	}
	for _, node := range f.names {
		fromEtcd += etcd[node]
	}
	rows = append(rows, fmt.Sprintf("%s node-lists by the agents since start: %d (%.2f per agent), %d without resourceVersion (etcd)", head, total, float64(total)/float64(n), fromEtcd))
	return rows
}

func (f *Fleet) benchRollout(ctx context.Context, t *testing.T, head string, switchFor time.Duration) []string {
	pids := f.cp.PIDs()
	c0, err := cpuOf(map[string]int{"kube-apiserver": pids["kube-apiserver"], "etcd": pids["etcd"]})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Rollout(ctx, "bench", "10%", "v1.35.1", switchFor)
	if err != nil {
		t.Error(err)
	}
	c1, err := cpuOf(map[string]int{"kube-apiserver": pids["kube-apiserver"], "etcd": pids["etcd"]})
	if err != nil {
		t.Fatal(err)
	}
	secs := res.Took.Seconds()
	ok := res.PeakAgents <= int32(res.Max) && res.PeakServer <= res.Max
	if !ok {
		t.Errorf("slot invariant broken: max %d, peak %d by the nodes, %d on the server", res.Max, res.PeakAgents, res.PeakServer)
	}
	writer := res.Requests.total(func(l string) bool { return l == "status-writer" })
	rows := []string{fmt.Sprintf("%s rollout maxUnavailable=10%%(%d) switch=%s: invariant-held=%v peak-agents=%d peak-server=%d all-updated-in=%s complete-by-writer-in=%s status-writer-requests=%d (%.2f/s) requests=%d (%.1f/s) p50=%s p99=%s cpu apiserver=%.2f etcd=%.2f cores",
		head, res.Max, switchFor, ok, res.PeakAgents, res.PeakServer, res.Took.Round(time.Second), res.Complete.Round(time.Second), writer, float64(writer)/secs, res.Requests.total(nil), float64(res.Requests.total(nil))/secs,
		res.Requests.percentile(50).Round(time.Millisecond), res.Requests.percentile(99).Round(time.Millisecond),
		(c1["kube-apiserver"]-c0["kube-apiserver"])/secs, (c1["etcd"]-c0["etcd"])/secs)}
	for _, l := range res.Requests.table() {
		rows = append(rows, head+" rollout-requests "+l)
	}
	return rows
}

// propagationChanges is how many Node changes the benchmark sends to
// every agent, one after another.
const propagationChanges = 10

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInts(t *testing.T, name, def string) []int {
	var out []int
	for _, s := range strings.Split(envOr(name, def), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			t.Fatalf("%s: %q is not a list of node counts (2 or more)", name, os.Getenv(name))
		}
		out = append(out, n)
	}
	return out
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

// Package fleetsim simulates a fleet of flex nodes against the real
// control plane the e2e builds (test/e2e/controlplane): N Node objects,
// each with a client certificate of its own (system:node:NAME), a
// kubelet's heartbeat (its Lease, its status), and the agent's real
// cluster-facing loops (internal/daemon's keep-pod-routes with a
// recorder for ip and nft, keep-node-object, over one shared Node
// informer per node, the rollouts' status writer candidate) and the
// rollout's coordination (internal/fleet's Agent with a stub Host). No
// machines, no containers: what it measures is the API server's side,
// at rest and in a rollout, by loop (a RoundTripper in every client) and
// from the server's own /metrics and /proc. The nodes run in worker
// processes (worker.go), a share each; the test's process is the parent
// that starts, asks and measures them.
package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
)

// agentInterval is agent.machineReconcileInterval's default: how often
// each loop makes a pass.
const agentInterval = time.Minute

// nodesPerWorker is each worker's share when Options.Workers is 0: at
// 250 agents a worker's heap stays within a few GB at 1,000 Nodes.
const nodesPerWorker = 250

// Options are a fleet's.
type Options struct {
	N int
	// Workers is how many processes hold the nodes (0: one per 250, at
	// least 2, so the split is exercised at every size).
	Workers int
	// Legacy runs the agent as it was before the shared informer (its
	// per-pass list and get), for the before figures.
	Legacy bool
	// StatusEvery is the kubelet's nodeStatusReportFrequency (5 min).
	StatusEvery time.Duration
	// Spread is how long the agents' starts are spread over, as hosts
	// that booted at different moments are (0: at once).
	Spread time.Duration
	// NoRollout leaves out the rollout's coordination (fleet.Agent, one
	// more Node informer per node) and the status writer.
	NoRollout bool
	// Dir holds each node's state root.
	Dir  string
	Logf func(string, ...any)
}

// Fleet is a running simulated fleet: its workers, each a process
// holding a share of the nodes.
type Fleet struct {
	cp      *controlplane.ControlPlane
	opts    Options
	workers []*worker
	names   []string
}

// Start starts the workers, has them register their nodes and start the
// heartbeats, then the agents, and waits until every agent has listed
// the Nodes. Close ends them; on an error Start has ended them already.
func Start(ctx context.Context, cp *controlplane.ControlPlane, opts Options) (_ *Fleet, err error) {
	if opts.StatusEvery == 0 {
		opts.StatusEvery = 5 * time.Minute
	}
	k := opts.Workers
	if k <= 0 {
		k = max(2, (opts.N+nodesPerWorker-1)/nodesPerWorker)
	}
	k = min(k, opts.N)
	f := &Fleet{cp: cp, opts: opts}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
		}
	}()
	for i := range opts.N {
		f.names = append(f.names, nodeName(i))
	}
	// Each worker may use every core (GOMAXPROCS as the machine's): capped
	// at one, a worker behind on its watches cannot use a core another
	// left idle. So capped, 300 nodes lost 79 HTTP/2 connections to their
	// health check (a ping unanswered for 15 s closes the connection and
	// every watch on it); uncapped, 1,000 lost none.
	for j := range k {
		w, err := startWorker(j*opts.N/k, (j+1)*opts.N/k, opts.Logf)
		if err != nil {
			return f, err
		}
		f.workers = append(f.workers, w)
	}
	caPEM, err := os.ReadFile(cp.CAFile)
	if err != nil {
		return f, err
	}
	begin := time.Now()
	so := ShardOptions{Legacy: opts.Legacy, StatusEvery: opts.StatusEvery, Spread: opts.Spread, NoRollout: opts.NoRollout, Dir: opts.Dir}
	err = f.each(ctx, "Register", func(w *worker) (any, any) {
		return ShardSpec{Server: cp.LocalServer, CAPEM: caPEM, CAFile: cp.CAFile, CAKeyFile: cp.CAKeyFile, Lo: w.lo, Hi: w.hi, Opts: so}, new(int)
	}, nil)
	if err != nil {
		return f, err
	}
	opts.Logf("fleetsim: %d nodes registered as themselves by %d workers in %s", opts.N, k, time.Since(begin).Round(time.Millisecond))
	begin = time.Now()
	if err := f.each(ctx, "StartAgents", func(*worker) (any, any) { return 0, new(int) }, nil); err != nil {
		return f, err
	}
	opts.Logf("fleetsim: %d agents started and synced in %s", opts.N, time.Since(begin).Round(time.Millisecond))
	return f, nil
}

// Close ends every worker (its nodes' goroutines end with it).
func (f *Fleet) Close() error {
	var errs []error
	for _, w := range f.workers {
		errs = append(errs, w.stop(30*time.Second))
	}
	f.workers = nil
	return errors.Join(errs...)
}

// Propagation changes Node i's InternalIP (its kubelet posts a new
// address) and returns how long the change took to reach each agent's
// view of the Nodes, in order of arrival per worker; an agent that did
// not see it within timeout is an error; post is how long the post
// itself took to be answered (so took minus post is a lower bound of the
// way from the change's commit to each agent, took an upper one). The
// workers stamp arrivals with the wall clock, which the processes of one
// machine share.
func (f *Fleet) Propagation(ctx context.Context, i int, ip string, timeout time.Duration) (took []time.Duration, post time.Duration, err error) {
	if err := f.each(ctx, "Await", func(*worker) (any, any) { return AwaitArgs{Target: f.names[i], IP: ip}, new(int) }, nil); err != nil {
		return nil, 0, err
	}
	// From the moment the kubelet sends its post: on a server that queues
	// it (APF), the wait is part of the change's way to the agents; the
	// post's own time is logged beside.
	t0 := time.Now()
	for _, w := range f.workers {
		if i >= w.lo && i < w.hi {
			if err := w.call(ctx, "PostStatus", PostArgs{I: i, IP: ip}, new(int)); err != nil {
				return nil, 0, err
			}
		}
	}
	post = time.Since(t0)
	f.opts.Logf("fleetsim: Node %s's status post at %s took %s", f.names[i], ip, post.Round(time.Millisecond))
	missed := 0
	err = f.each(ctx, "Arrivals", func(*worker) (any, any) { return timeout, new(Arrivals) }, func(_ *worker, r any) {
		a := r.(*Arrivals)
		for _, at := range a.At {
			took = append(took, time.Unix(0, at).Sub(t0))
		}
		missed += a.Missed
	})
	if err != nil {
		return took, post, err
	}
	if missed > 0 {
		return took, post, fmt.Errorf("%d of %d agents did not see Node %s at %s within %s", missed, f.opts.N, f.names[i], ip, timeout)
	}
	return took, post, nil
}

// Routes is the routes each agent's host has (none in legacy mode).
func (f *Fleet) Routes(ctx context.Context) ([]int, error) {
	var out []int
	err := f.eachInOrder(ctx, "Routes", func() any { return new([]int) }, func(r any) { out = append(out, *r.(*[]int)...) })
	return out, err
}

// eachInOrder calls method on the workers one after another.
func (f *Fleet) eachInOrder(ctx context.Context, method string, reply func() any, done func(any)) error {
	for _, w := range f.workers {
		r := reply()
		if err := w.call(ctx, method, 0, r); err != nil {
			return err
		}
		done(r)
	}
	return nil
}

// resetMeters starts a new window of every worker's meter.
func (f *Fleet) resetMeters(ctx context.Context) error {
	return f.each(ctx, "Reset", func(*worker) (any, any) { return 0, new(int) }, nil)
}

// snapshot is the workers' windows as one, over seconds.
func (f *Fleet) snapshot(ctx context.Context, seconds float64) (window, error) {
	all := window{seconds: seconds, counts: map[string]int64{}}
	err := f.each(ctx, "Snapshot", func(*worker) (any, any) { return 0, new(Window) }, func(_ *worker, r any) {
		w := r.(*Window)
		for k, v := range w.Counts {
			all.counts[k] += v
		}
		all.latencies = append(all.latencies, w.Latencies...)
	})
	return all, err
}

// lists is every worker's Node lists since start: without a
// resourceVersion by node, and all by "node loop".
func (f *Fleet) lists(ctx context.Context) (etcd, all map[string]int, err error) {
	etcd, all = map[string]int{}, map[string]int{}
	err = f.eachInOrder(ctx, "Lists", func() any { return new(Lists) }, func(r any) {
		l := r.(*Lists)
		maps.Copy(etcd, l.Etcd)
		maps.Copy(all, l.All)
	})
	return etcd, all, err
}

// memory is the workers' resident memory (MiB, from /proc), their Go
// heaps in use (MiB) and goroutines, summed.
func (f *Fleet) memory(ctx context.Context) (rss, heap float64, goroutines int, err error) {
	for _, w := range f.workers {
		var m Mem
		if err := w.call(ctx, "Mem", 0, &m); err != nil {
			return 0, 0, 0, err
		}
		r, err := procRSS(w.cmd.Process.Pid)
		if err != nil {
			return 0, 0, 0, err
		}
		rss += r
		heap += float64(m.HeapInuse) / (1 << 20)
		goroutines += m.Goroutines
	}
	return rss, heap, goroutines, nil
}

// profiles writes each worker's heap profile under dir, then a CPU
// profile of each over the same 30 s.
func (f *Fleet) profiles(ctx context.Context, dir string) error {
	for _, w := range f.workers {
		p := fmt.Sprintf("%s/heap-%d-%d.pprof", dir, w.lo, w.hi-1)
		if err := w.call(ctx, "HeapProfile", p, new(int)); err != nil {
			return err
		}
	}
	return f.each(ctx, "CPUProfile", func(w *worker) (any, any) {
		return ProfileArgs{Path: fmt.Sprintf("%s/cpu-%d-%d.pprof", dir, w.lo, w.hi-1), For: 30 * time.Second}, new(int)
	}, nil)
}

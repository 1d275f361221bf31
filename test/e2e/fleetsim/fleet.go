// Package fleetsim simulates a fleet of flex nodes against the real
// control plane the e2e builds (test/e2e/controlplane): N Node objects,
// each with a client certificate of its own (system:node:NAME), a
// kubelet's heartbeat (its Lease, its status), and the agent's real
// cluster-facing loops (internal/daemon's keep-pod-routes with a
// recorder for ip and nft, keep-node-object, over one shared Node
// informer per node) and the rollout's slots (internal/fleet). No
// machines, no containers: what it measures is the API server's side,
// at rest and in a rollout, by loop (a RoundTripper in every client) and
// from the server's own /metrics and /proc.
package fleetsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/test/e2e/controlplane"
)

// agentInterval is agent.machineReconcileInterval's default: how often
// each loop makes a pass.
const agentInterval = time.Minute

// Options are a fleet's.
type Options struct {
	N int
	// Legacy runs the agent as it was before the shared informer (its
	// per-pass list and get), for the before figures.
	Legacy bool
	// StatusEvery is the kubelet's nodeStatusReportFrequency (5 min).
	StatusEvery time.Duration
	// Spread is how long the agents' starts are spread over, as hosts
	// that booted at different moments are (0: at once).
	Spread time.Duration
	// NoRollout leaves out the rollout's coordination (fleet.Agent, one
	// more Node informer per node) and the status writer: at 1,000 nodes
	// on a 2-core machine the simulator's own process cannot hold both.
	NoRollout bool
	// Dir holds each node's state root.
	Dir  string
	Logf func(string, ...any)
}

// Fleet is a running simulated fleet.
type Fleet struct {
	cp      *controlplane.ControlPlane
	opts    Options
	meter   *meter
	nodes   []*simNode
	kubelet []kubernetes.Interface
	agents  []awaiter
	sims    []*simAgent // nil entries in legacy mode
	hosts   *stubHosts  // what the rollout's agents switch
}

// awaiter is an agent's view of the Nodes: await is a channel that gets
// a token when its view holds Node target at InternalIP ip.
type awaiter interface {
	await(target, ip string) <-chan struct{}
}

// Start registers the nodes, starts their heartbeats and then their
// agents, and waits until every agent has listed the Nodes.
func Start(ctx context.Context, cp *controlplane.ControlPlane, opts Options) (*Fleet, error) {
	if opts.StatusEvery == 0 {
		opts.StatusEvery = 5 * time.Minute
	}
	is, err := newIssuer(cp.CAFile, cp.CAKeyFile)
	if err != nil {
		return nil, err
	}
	f := &Fleet{cp: cp, opts: opts, meter: newMeter(), nodes: make([]*simNode, opts.N), kubelet: make([]kubernetes.Interface, opts.N)}
	begin := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range opts.N {
		g.Go(func() error {
			n := &simNode{name: nodeName(i), ip: nodeIP(i)}
			if n.cfg, err = is.nodeConfig(cp.LocalServer, cp.CAPEM, n.name); err != nil {
				return err
			}
			cs, err := n.kubelet(f.meter)
			if err != nil {
				return err
			}
			f.nodes[i], f.kubelet[i] = n, cs
			return n.register(gctx, cs)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	opts.Logf("fleetsim: %d nodes registered as themselves in %s", opts.N, time.Since(begin).Round(time.Millisecond))
	for i, n := range f.nodes {
		go n.heartbeat(ctx, f.kubelet[i], opts.StatusEvery)
	}
	return f, f.startAgents(ctx)
}

func (f *Fleet) startAgents(ctx context.Context) error {
	begin := time.Now()
	f.sims = make([]*simAgent, len(f.nodes))
	f.hosts = &stubHosts{running: map[string]string{}}
	for i, n := range f.nodes {
		var delay time.Duration
		if f.opts.Spread > 0 {
			delay = rand.N(f.opts.Spread)
		}
		f.hosts.running[n.name] = "v1.35.0"
		// The rollout's coordination runs in either mode: it did not
		// exist before the informer, and is measured alike.
		ra := f.rolloutAgent(n, f.opts.Dir)
		runRollout := func() {
			if !f.opts.NoRollout && sleep(ctx, delay) {
				ra.Nodes.(*daemon.NodeInformer).Start(ctx)
				for ctx.Err() == nil {
					if err := ra.Run(ctx); err != nil && ctx.Err() == nil {
						f.opts.Logf("fleetsim: %s: rollout agent: %v (again in 5 s)", n.name, err)
						sleep(ctx, 5*time.Second)
					}
				}
			}
		}
		if f.opts.Legacy {
			go runRollout()
			a := newLegacyAgent(n, f.meter)
			f.agents = append(f.agents, a)
			go func() {
				if sleep(ctx, delay) {
					a.run(ctx)
				}
			}()
			continue
		}
		a, d, err := newAgent(f.opts.Dir, n, f.meter, !f.opts.NoRollout)
		if err != nil {
			return err
		}
		f.sims[i] = a
		f.agents = append(f.agents, a)
		ra.Nodes = a.nodes // the process's one Node informer
		go runRollout()
		go func() {
			if sleep(ctx, delay) {
				_ = d.Run(ctx)
			}
		}()
	}
	if f.opts.Legacy {
		sleep(ctx, f.opts.Spread)
		return ctx.Err()
	}
	for _, a := range f.sims {
		for {
			// The informer starts with the agent's first pass.
			if err := a.nodes.WaitSynced(ctx, "fleetsim", 10*time.Minute); err == nil {
				break
			} else if ctx.Err() != nil {
				return err
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
	f.opts.Logf("fleetsim: %d agents started and synced in %s", len(f.sims), time.Since(begin).Round(time.Millisecond))
	return nil
}

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// Propagation changes Node i's InternalIP (as its kubelet would post a new
// address) and returns how long the change took to reach each agent's
// view of the Nodes, in order of arrival; an agent that did not see it
// within timeout is an error.
func (f *Fleet) Propagation(ctx context.Context, i int, ip string, timeout time.Duration) ([]time.Duration, error) {
	target := f.nodes[i]
	chans := make([]<-chan struct{}, len(f.agents))
	for j, a := range f.agents {
		chans[j] = a.await(target.name, ip)
	}
	var mu sync.Mutex
	var took []time.Duration
	var wg sync.WaitGroup
	t0 := time.Now()
	missed := 0
	for _, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ch:
				mu.Lock()
				took = append(took, time.Since(t0))
				mu.Unlock()
			case <-time.After(timeout):
				mu.Lock()
				missed++
				mu.Unlock()
			case <-ctx.Done():
			}
		}()
	}
	target.ip = ip
	if err := target.postStatus(ctx, f.kubelet[i], ip); err != nil {
		return nil, err
	}
	wg.Wait()
	if missed > 0 {
		return took, fmt.Errorf("%d of %d agents did not see Node %s at %s within %s", missed, len(chans), target.name, ip, timeout)
	}
	return took, nil
}

// Routes is the routes each agent's host has (nil in legacy mode).
func (f *Fleet) Routes() []int {
	var out []int
	for _, a := range f.sims {
		if a != nil {
			out = append(out, a.routes.count())
		}
	}
	return out
}

// Informer is node i's shared Node informer (nil in legacy mode).
func (f *Fleet) Informer(i int) *daemon.NodeInformer {
	if f.sims[i] == nil {
		return nil
	}
	return f.sims[i].nodes
}

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
)

// shard is the nodes one worker process simulates, nodes lo..hi-1 of
// the fleet: their identities, kubelets' heartbeats and agents, one
// meter for all of them. Its methods are what the parent asks of the
// worker over RPC (worker.go).
type shard struct {
	ctx     context.Context // the worker's: ends when the parent goes
	spec    ShardSpec
	meter   *meter
	nodes   []*simNode
	kubelet []kubernetes.Interface
	agents  []awaiter
	sims    []*simAgent // nil entries in legacy mode
	hosts   *stubHosts  // what the rollout's agents switch

	mu      sync.Mutex
	waiting []<-chan struct{} // the agents' channels for the change awaited
	since   time.Time
}

// ShardSpec is what a worker is told to simulate.
type ShardSpec struct {
	Server    string // the API server's URL
	CAPEM     []byte
	CAFile    string // the cluster CA that signs the nodes' certificates
	CAKeyFile string
	Lo, Hi    int // node indexes [Lo, Hi) of the fleet
	Opts      ShardOptions
}

// ShardOptions are the fleet's Options as a worker needs them.
type ShardOptions struct {
	Legacy      bool
	StatusEvery time.Duration
	Spread      time.Duration
	NoRollout   bool
	Dir         string
}

// awaiter is an agent's view of the Nodes: await is a channel that gets
// a token when its view holds Node target at InternalIP ip.
type awaiter interface {
	await(target, ip string) <-chan struct{}
}

func (s *shard) logf(format string, args ...any) {
	logf(fmt.Sprintf("worker %d-%d: ", s.spec.Lo, s.spec.Hi-1)+format, args...)
}

// register gives each node its certificate, registers its Node as the
// node itself and starts its kubelet's heartbeat.
func (s *shard) register() error {
	is, err := newIssuer(s.spec.CAFile, s.spec.CAKeyFile)
	if err != nil {
		return err
	}
	n := s.spec.Hi - s.spec.Lo
	s.nodes, s.kubelet = make([]*simNode, n), make([]kubernetes.Interface, n)
	begin := time.Now()
	g, gctx := errgroup.WithContext(s.ctx)
	g.SetLimit(4)
	for j := range n {
		g.Go(func() error {
			i := s.spec.Lo + j
			node := &simNode{name: nodeName(i), ip: nodeIP(i)}
			var err error
			if node.cfg, err = is.nodeConfig(s.spec.Server, s.spec.CAPEM, node.name); err != nil {
				return err
			}
			cs, err := node.kubelet(s.meter)
			if err != nil {
				return err
			}
			s.nodes[j], s.kubelet[j] = node, cs
			return node.register(gctx, cs)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	s.logf("%d nodes registered as themselves in %s", n, time.Since(begin).Round(time.Millisecond))
	for j, node := range s.nodes {
		go node.heartbeat(s.ctx, s.kubelet[j], s.spec.Opts.StatusEvery)
	}
	return nil
}

// startAgents starts each node's agent at a random moment within the
// spread and waits until every agent's informer has listed the Nodes.
func (s *shard) startAgents() error {
	ctx, o := s.ctx, s.spec.Opts
	begin := time.Now()
	s.sims = make([]*simAgent, len(s.nodes))
	s.hosts = &stubHosts{running: map[string]string{}}
	for i, n := range s.nodes {
		var delay time.Duration
		if o.Spread > 0 {
			delay = rand.N(o.Spread)
		}
		s.hosts.running[n.name] = "v1.35.0"
		// The rollout's coordination runs in either mode: it did not
		// exist before the informer, and is measured alike.
		ra := s.rolloutAgent(n, o.Dir)
		runRollout := func() {
			if !o.NoRollout && sleep(ctx, delay) {
				ra.Nodes.(*daemon.NodeInformer).Start(ctx)
				for ctx.Err() == nil {
					if err := ra.Run(ctx); err != nil && ctx.Err() == nil {
						s.logf("%s: rollout agent: %v (again in 5 s)", n.name, err)
						sleep(ctx, 5*time.Second)
					}
				}
			}
		}
		if o.Legacy {
			go runRollout()
			a := newLegacyAgent(n, s.meter)
			s.agents = append(s.agents, a)
			go func() {
				if sleep(ctx, delay) {
					a.run(ctx)
				}
			}()
			continue
		}
		a, d, err := newAgent(o.Dir, n, s.meter, !o.NoRollout)
		if err != nil {
			return err
		}
		s.sims[i] = a
		s.agents = append(s.agents, a)
		ra.Nodes = a.nodes // the process's one Node informer
		go runRollout()
		go func() {
			if sleep(ctx, delay) {
				_ = d.Run(ctx)
			}
		}()
	}
	if o.Legacy {
		sleep(ctx, o.Spread)
		return ctx.Err()
	}
	for _, a := range s.sims {
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
	s.logf("%d agents started and synced in %s", len(s.sims), time.Since(begin).Round(time.Millisecond))
	return nil
}

// await makes every agent of the shard wait for Node target at ip.
func (s *shard) await(target, ip string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = s.waiting[:0]
	for _, a := range s.agents {
		s.waiting = append(s.waiting, a.await(target, ip))
	}
}

// arrivals is when (Unix ns) each agent saw the change awaited, in order
// of arrival, and how many did not within timeout.
func (s *shard) arrivals(timeout time.Duration) Arrivals {
	s.mu.Lock()
	chans := s.waiting
	s.waiting = nil
	s.mu.Unlock()
	var mu sync.Mutex
	var out Arrivals
	var wg sync.WaitGroup
	deadline := time.After(timeout)
	done := make(chan struct{})
	for _, ch := range chans {
		wg.Go(func() {
			select {
			case <-ch:
				at := time.Now().UnixNano()
				mu.Lock()
				out.At = append(out.At, at)
				mu.Unlock()
			case <-done:
				mu.Lock()
				out.Missed++
				mu.Unlock()
			}
		})
	}
	go func() {
		select {
		case <-deadline:
		case <-s.ctx.Done():
		}
		close(done)
	}()
	wg.Wait()
	return out
}

// postStatus posts node i's status with address ip, as its kubelet.
func (s *shard) postStatus(i int, ip string) error {
	j := i - s.spec.Lo
	if j < 0 || j >= len(s.nodes) {
		return fmt.Errorf("node %d is not in worker %d-%d", i, s.spec.Lo, s.spec.Hi-1)
	}
	s.nodes[j].ip = ip
	return s.nodes[j].postStatus(s.ctx, s.kubelet[j], ip)
}

// routes is the routes each agent's host has (none in legacy mode).
func (s *shard) routes() []int {
	var out []int
	for _, a := range s.sims {
		if a != nil {
			out = append(out, a.routes.count())
		}
	}
	return out
}

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

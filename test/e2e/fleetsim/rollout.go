package fleetsim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

// RolloutResult is one simulated rollout's figures.
type RolloutResult struct {
	Max        int           // maxUnavailable resolved against N
	PeakAgents int32         // most hosts switching at once (each inside Switch only while its agent holds a slot)
	PeakServer int           // most slots the server showed held at once
	Took       time.Duration // until every node reported Updated
	Complete   time.Duration // until the status writer said Complete (0: it did not within a minute after)
	Requests   window        // what the fleet sent meanwhile
}

// Rollout rolls every node through a FlexNodeRollout named name with
// maxUnavailable pct: each node's fleet.Agent (the product's coordination,
// started with the fleet) sees it, stages, takes a slot, switches (its
// stub Host waits switchFor), soaks (0 s) and releases, reporting each
// phase on its Node; the elected status writer says Complete. The slots
// held are watched throughout, by the hosts' count (a host is inside
// Switch only while its agent holds a slot: every worker's switches, by
// the wall clock, overlaid) and by the server's (an admin's list every
// 100 ms).
func (f *Fleet) Rollout(ctx context.Context, name, pct, version string, switchFor time.Duration) (RolloutResult, error) {
	mu := intstr.FromString(pct)
	max, err := v1alpha1.ResolveMaxUnavailable(&mu, f.opts.N)
	if err != nil {
		return RolloutResult{}, err
	}
	res := RolloutResult{Max: max}
	if err := f.each(ctx, "BeginRollout", func(*worker) (any, any) { return switchFor, new(int) }, nil); err != nil {
		return res, err
	}
	stop := make(chan struct{})
	serverPeak := make(chan int, 1)
	go func() { serverPeak <- f.watchSlots(ctx, name, stop) }()
	if err := f.resetMeters(ctx); err != nil {
		close(stop)
		return res, err
	}
	begin := time.Now()
	if err := f.createRollout(ctx, name, pct, version); err != nil {
		close(stop)
		return res, err
	}
	updated := 0
	for updated < f.opts.N && sleep(ctx, 250*time.Millisecond) {
		updated = 0
		err = f.each(ctx, "Updated", func(*worker) (any, any) { return version, new(int) }, func(_ *worker, r any) { updated += *r.(*int) })
		if err != nil {
			break
		}
	}
	res.Took = time.Since(begin)
	if err == nil {
		res.Complete = f.awaitComplete(ctx, name, begin, time.Minute)
	}
	res.Requests, _ = f.snapshot(ctx, time.Since(begin).Seconds())
	close(stop)
	res.PeakServer = <-serverPeak
	var sw []Interval
	if e := f.eachInOrder(ctx, "Switches", func() any { return new([]Interval) }, func(r any) { sw = append(sw, *r.(*[]Interval)...) }); e != nil {
		return res, e
	}
	res.PeakAgents = int32(peakOverlap(sw))
	if err != nil {
		return res, fmt.Errorf("rollout %s: %d of %d nodes updated: %w", name, updated, f.opts.N, err)
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("rollout %s: %d of %d nodes updated before the deadline", name, updated, f.opts.N)
	}
	return res, nil
}

// Interval is one host's switch, from its start to its end (Unix ns).
type Interval struct{ Begin, End int64 }

// peakOverlap is the most intervals that overlap at one moment; an end
// and a begin at the same nanosecond do not overlap.
func peakOverlap(iv []Interval) int {
	type edge struct {
		at int64
		d  int
	}
	var es []edge
	for _, i := range iv {
		es = append(es, edge{i.Begin, 1}, edge{i.End, -1})
	}
	sort.Slice(es, func(a, b int) bool {
		if es[a].at != es[b].at {
			return es[a].at < es[b].at
		}
		return es[a].d < es[b].d
	})
	cur, most := 0, 0
	for _, e := range es {
		cur += e.d
		most = max(most, cur)
	}
	return most
}

// stubHosts are a worker's simulated hosts as the rollout sees them:
// which release each runs, and each switch's start and end.
type stubHosts struct {
	mu        sync.Mutex
	running   map[string]string // node -> Kubernetes version
	switchFor time.Duration
	switched  []Interval
}

func (h *stubHosts) begin(switchFor time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.switchFor = switchFor
	h.switched = nil
}

func (h *stubHosts) updated(version string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.running {
		if v == version {
			n++
		}
	}
	return n
}

func (h *stubHosts) switches() []Interval {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.switched)
}

// stubHost is node's fleet.Host: staging is instant, a switch waits
// switchFor, the soak's probe passes.
type stubHost struct {
	node  string
	hosts *stubHosts
}

func (s stubHost) Running(_ context.Context, rel v1alpha1.Release) (bool, error) {
	s.hosts.mu.Lock()
	defer s.hosts.mu.Unlock()
	return s.hosts.running[s.node] == rel.KubernetesVersion, nil
}

func (s stubHost) Stage(context.Context, v1alpha1.Release) error { return nil }

func (s stubHost) Switch(ctx context.Context, rel v1alpha1.Release, _ time.Duration) error {
	// Stamped inside the call: the agent holds its slot before the call
	// and until after it returns, so these intervals lie within the holds.
	begin := time.Now().UnixNano()
	s.hosts.mu.Lock()
	d := s.hosts.switchFor
	s.hosts.mu.Unlock()
	fleet.Progress(ctx, fleet.StepSwitch)
	if !sleep(ctx, d) {
		return ctx.Err()
	}
	s.hosts.mu.Lock()
	defer s.hosts.mu.Unlock()
	s.hosts.running[s.node] = rel.KubernetesVersion
	s.hosts.switched = append(s.hosts.switched, Interval{Begin: begin, End: time.Now().UnixNano()})
	return nil
}

func (s stubHost) Healthy(context.Context) error { return nil }

// rolloutAgent is node's fleet.Agent with a stub Host, its clients
// counted as "rollout-agent", its Record under dir. Its Nodes are an
// informer of its own (counted as its); startAgents gives it the node's
// shared one where there is one (not in legacy mode).
func (s *shard) rolloutAgent(n *simNode, dir string) *fleet.Agent {
	connect := func() (fleet.Clients, error) {
		kc, err := n.client(s.meter, "rollout-agent", kubeclient.Follow)()
		if err != nil {
			return fleet.Clients{}, err
		}
		cfg := rest.CopyConfig(n.cfg)
		cfg.WrapTransport = s.meter.wrap(n.name, "rollout-agent")
		ro, err := fleet.NewRollouts(cfg, nil)
		if err != nil {
			return fleet.Clients{}, err
		}
		sc := rest.CopyConfig(cfg)
		sc.Timeout = kubeclient.AgentLoop.Timeout
		st, err := fleet.NewSlotStore(sc, nil, v1alpha1.Namespace)
		if err != nil {
			return fleet.Clients{}, err
		}
		return fleet.Clients{Nodes: kc.CoreV1().Nodes(), Rollouts: ro, Slots: st}, nil
	}
	_ = os.MkdirAll(filepath.Join(dir, n.name), 0o755) // SaveRecord's, at the first phase, says if it failed
	nodes := daemon.NewNodeInformer(n.client(s.meter, "rollout-agent", kubeclient.Follow), n.name)
	return &fleet.Agent{NodeName: n.name, Host: stubHost{node: n.name, hosts: s.hosts}, Connect: connect, Nodes: nodes,
		RecordPath: filepath.Join(dir, n.name, "rollout.json"), BootID: "boot-1"}
}

// watchSlots counts the slots of rollout held, from an admin's list every
// 100 ms until stop, and returns the most it saw at once.
func (f *Fleet) watchSlots(ctx context.Context, rollout string, stop <-chan struct{}) int {
	store, err := fleet.NewSlotStore(f.cp.AdminConfig, nil, v1alpha1.Namespace)
	if err != nil {
		return -1
	}
	most := 0
	for {
		select {
		case <-stop:
			return most
		case <-ctx.Done():
			return most
		case <-time.After(100 * time.Millisecond):
		}
		list, err := store.List(ctx)
		if err != nil {
			continue
		}
		held := 0
		for _, l := range list.Items {
			if strings.HasPrefix(l.Name, rollout+"-slot-") && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				held++
			}
		}
		most = max(most, held)
	}
}

// createRollout creates FlexNodeRollout name over the simulated nodes'
// pool, as an admin would; the nodes report against its generation 1.
func (f *Fleet) createRollout(ctx context.Context, name, pct, version string) error {
	yaml := fmt.Sprintf(`apiVersion: %s
kind: FlexNodeRollout
metadata:
  name: %s
spec:
  nodeSelector:
    matchLabels:
      flexnode.azure.com/pool: sim
  release:
    kubernetesVersion: %s
  strategy:
    maxUnavailable: %q
    soak: 0s
`, v1alpha1.SchemeGroupVersion.String(), name, version, pct)
	if out, err := f.cp.Kubectl(ctx, []byte(yaml), "create", "-f", "-"); err != nil {
		return fmt.Errorf("create FlexNodeRollout %s: %w: %s", name, err, out)
	}
	return nil
}

// awaitComplete is how long after begin the rollout's status (the elected
// writer's) said Complete, read by an admin every 250 ms, for up to
// grace more; 0 when it did not.
func (f *Fleet) awaitComplete(ctx context.Context, name string, begin time.Time, grace time.Duration) time.Duration {
	ro, err := fleet.NewRollouts(f.cp.AdminConfig, nil)
	if err != nil {
		return 0
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if r, err := ro.Get(ctx, name); err == nil && meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionComplete) {
			return time.Since(begin)
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return 0
		}
	}
	return 0
}

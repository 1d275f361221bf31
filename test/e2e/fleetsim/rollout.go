package fleetsim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
// Switch only while its agent holds a slot) and by the server's (an
// admin's list every 100 ms).
func (f *Fleet) Rollout(ctx context.Context, name, pct, version string, switchFor time.Duration) (RolloutResult, error) {
	mu := intstr.FromString(pct)
	max, err := v1alpha1.ResolveMaxUnavailable(&mu, len(f.nodes))
	if err != nil {
		return RolloutResult{}, err
	}
	res := RolloutResult{Max: max}
	f.hosts.begin(switchFor)
	stop := make(chan struct{})
	serverPeak := make(chan int, 1)
	go func() { serverPeak <- f.watchSlots(ctx, name, stop) }()
	f.meter.reset()
	begin := time.Now()
	if err := f.createRollout(ctx, name, pct, version); err != nil {
		close(stop)
		return res, err
	}
	for f.hosts.updated(version) < len(f.nodes) {
		if !sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	res.Took = time.Since(begin)
	res.Complete = f.awaitComplete(ctx, name, begin, time.Minute)
	res.Requests = f.meter.snapshot()
	close(stop)
	res.PeakServer = <-serverPeak
	res.PeakAgents = f.hosts.peak.Load()
	if ctx.Err() != nil {
		return res, fmt.Errorf("rollout %s: %d of %d nodes updated before the deadline", name, f.hosts.updated(version), len(f.nodes))
	}
	return res, nil
}

// stubHosts are the simulated hosts as the rollout sees them: which
// release each runs, how many are switching now and at most.
type stubHosts struct {
	mu        sync.Mutex
	running   map[string]string // node -> Kubernetes version
	switchFor time.Duration
	holding   atomic.Int32
	peak      atomic.Int32
}

func (h *stubHosts) begin(switchFor time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.switchFor = switchFor
	h.peak.Store(0)
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
	h := s.hosts.holding.Add(1)
	defer s.hosts.holding.Add(-1)
	for p := s.hosts.peak.Load(); h > p && !s.hosts.peak.CompareAndSwap(p, h); p = s.hosts.peak.Load() {
	}
	s.hosts.mu.Lock()
	d := s.hosts.switchFor
	s.hosts.mu.Unlock()
	fleet.Progress(ctx, fleet.StepSwitch)
	if !sleep(ctx, d) {
		return ctx.Err()
	}
	s.hosts.mu.Lock()
	s.hosts.running[s.node] = rel.KubernetesVersion
	s.hosts.mu.Unlock()
	return nil
}

func (s stubHost) Healthy(context.Context) error { return nil }

// rolloutAgent is node's fleet.Agent with a stub Host, its clients
// counted as "rollout-agent", its Record under dir. Its Nodes are an
// informer of its own (counted as its); startAgents gives it the node's
// shared one where there is one (not in legacy mode).
func (f *Fleet) rolloutAgent(n *simNode, dir string) *fleet.Agent {
	connect := func() (fleet.Clients, error) {
		kc, err := n.client(f.meter, "rollout-agent", kubeclient.Follow)()
		if err != nil {
			return fleet.Clients{}, err
		}
		cfg := rest.CopyConfig(n.cfg)
		cfg.WrapTransport = f.meter.wrap(n.name, "rollout-agent")
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
	nodes := daemon.NewNodeInformer(n.client(f.meter, "rollout-agent", kubeclient.Follow), n.name)
	return &fleet.Agent{NodeName: n.name, Host: stubHost{node: n.name, hosts: f.hosts}, Connect: connect, Nodes: nodes,
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

package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

// RolloutResult is one simulated rollout's figures.
type RolloutResult struct {
	Max        int           // maxUnavailable resolved against N
	PeakAgents int32         // most nodes that believed they held a slot at once
	PeakServer int           // most slots the server showed held at once
	Took       time.Duration // until every node reported Updated
	Complete   time.Duration // until the status writer said Complete (0: it did not within a minute after)
	Requests   window        // what the fleet sent meanwhile
}

// rolloutTTL is the slots' lease duration; a holder renews at a third.
const rolloutTTL = 30 * time.Second

// Rollout rolls every node through a rollout named name with
// maxUnavailable pct, each switch stubbed to switchFor: a node takes a
// slot (fleet.Slots, as itself; the slots judge other holders' Nodes
// from the node's shared informer), reports Updating on its Node's
// FlexNodeRelease condition, "switches", reports Updated and releases.
// A node with no slot free tries again after retry (jittered). The
// slots held are watched throughout, by the nodes' own count and by the
// server's (an admin's list every 100 ms).
func (f *Fleet) Rollout(ctx context.Context, name, pct string, switchFor, retry time.Duration) (RolloutResult, error) {
	mu := intstr.FromString(pct)
	max, err := v1alpha1.ResolveMaxUnavailable(&mu, len(f.nodes))
	if err != nil {
		return RolloutResult{}, err
	}
	res := RolloutResult{Max: max}
	if err := f.createRollout(ctx, name, pct); err != nil {
		return res, err
	}
	var holding, peak atomic.Int32
	stop := make(chan struct{})
	serverPeak := make(chan int, 1)
	go func() { serverPeak <- f.watchSlots(ctx, name, stop) }()
	f.meter.reset()
	begin := time.Now()
	errs := make(chan error, len(f.nodes))
	var wg sync.WaitGroup
	for i := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f.rollNode(ctx, i, name, max, switchFor, retry, &holding, &peak)
		}()
	}
	wg.Wait()
	res.Took = time.Since(begin)
	res.Complete = f.awaitComplete(ctx, name, begin, time.Minute)
	res.Requests = f.meter.snapshot()
	close(stop)
	res.PeakServer = <-serverPeak
	res.PeakAgents = peak.Load()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return res, errors.Join(all...)
}

func (f *Fleet) rollNode(ctx context.Context, i int, rollout string, max int, switchFor, retry time.Duration, holding, peak *atomic.Int32) error {
	n := f.nodes[i]
	cfg := rest.CopyConfig(n.cfg)
	cfg.WrapTransport = f.meter.wrap(n.name, "rollout")
	store, err := fleet.NewSlotStore(cfg, nil, v1alpha1.Namespace)
	if err != nil {
		return err
	}
	nodes := n.client(f.meter, "rollout", kubeclient.AgentLoop)
	cs, err := nodes()
	if err != nil {
		return err
	}
	var getter fleet.NodeGetter = cs.CoreV1().Nodes()
	if inf := f.Informer(i); inf != nil {
		getter = inf
	}
	s := &fleet.Slots{Store: store, Nodes: getter, Rollout: rollout, TTL: rolloutTTL,
		Holder: fleet.Holder{Node: n.name, UID: n.uid, BootID: "boot-1"}}
	var sl *fleet.Slot
	for {
		sl, err = s.Acquire(ctx, max)
		if err == nil {
			break
		}
		if !errors.Is(err, fleet.ErrNoSlot) {
			return fmt.Errorf("%s: %w", n.name, err)
		}
		if !sleep(ctx, retry/2+rand.N(retry)) {
			return ctx.Err()
		}
	}
	h := holding.Add(1)
	for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
	}
	if err := report(ctx, cs, n.name, rollout, fleet.PhaseUpdating, "switch"); err != nil {
		return err
	}
	for left := switchFor; left > 0; left -= rolloutTTL / 3 {
		sleep(ctx, min(left, rolloutTTL/3))
		if left > rolloutTTL/3 {
			if err := s.Renew(ctx, sl); err != nil {
				return fmt.Errorf("%s: %w", n.name, err)
			}
		}
	}
	if err := report(ctx, cs, n.name, rollout, fleet.PhaseUpdated, "soak"); err != nil {
		return err
	}
	holding.Add(-1) // before the release: nobody else can hold it yet
	if err := s.Release(ctx, sl); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	return nil
}

// report patches the node's FlexNodeRelease condition as the node.
func report(ctx context.Context, cs kubeclient.Interface, node, rollout string, phase fleet.Phase, step string) error {
	now := time.Now()
	c := fleet.NodeRelease{Rollout: rollout, Generation: 1, Phase: phase, Step: step, Since: now}.Condition(now)
	patch, err := fleet.ConditionPatch(c)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("%s: report %s: %w", node, phase, err)
	}
	return nil
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
func (f *Fleet) createRollout(ctx context.Context, name, pct string) error {
	yaml := fmt.Sprintf(`apiVersion: %s
kind: FlexNodeRollout
metadata:
  name: %s
spec:
  nodeSelector:
    matchLabels:
      flexnode.azure.com/pool: sim
  release:
    kubernetesVersion: v1.35.1
  strategy:
    maxUnavailable: %q
`, v1alpha1.SchemeGroupVersion.String(), name, pct)
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

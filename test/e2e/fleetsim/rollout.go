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

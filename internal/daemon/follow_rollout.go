package daemon

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// followRolloutLoop names the loop in logs.
const followRolloutLoop = "follow-rollout"

// RolloutFollower runs the node's part of the fleet's rollouts
// (fleet.Agent, DESIGN decision 12) with this host's repave as its Host
// (rolloutHost). A pass lasts as long as the agent runs: it watches, it
// does not poll. A cluster without the fleet's CRD (cluster prepare
// --fleet not run) or without its RBAC is looked at again after a
// doubling wait (up to noFleetMaxWait), not every interval.
type RolloutFollower struct {
	Keeper *MachineKeeper
	// Config is the config the agent loaded.
	Config *config.Config
	// Nodes is the process's Node informer, which the rollout agent
	// reads (started here with the loop's context unless another loop
	// did).
	Nodes  *NodeInformer
	Events *events.Recorder
	// Evidence gathers a failed node's evidence (issue 30,
	// follow_rollout_evidence.go).
	Evidence Evidence

	noFleet noFleet
}

// FollowRollout is the loop; it needs the API server.
func FollowRollout(f *RolloutFollower) Loop {
	return Loop{Name: followRolloutLoop, Run: f.Follow}
}

// Follow runs the agent until ctx ends (nil then), once the host has
// joined and the cluster serves the rollouts to this node.
func (f *RolloutFollower) Follow(ctx context.Context) error {
	k := f.Keeper
	if f.Nodes == nil {
		return fmt.Errorf("%s: no Node informer (RolloutFollower.Nodes)", followRolloutLoop)
	}
	nodeName, err := f.joinedNode(ctx)
	if err != nil || nodeName == "" {
		return err
	}
	if !f.noFleet.due(time.Now()) {
		return nil
	}
	connect := rolloutClients(f.Config, k.Layout)
	cl, err := connect()
	if err != nil {
		return fmt.Errorf("%s: %w", followRolloutLoop, err)
	}
	// Whether the cluster serves the rollouts to this node, asked of the
	// API server's watch cache (resourceVersion 0, as the agent's
	// informer lists them next), never of etcd: a fleet restarting at
	// once must not cost etcd a read per agent.
	lctx, cancel := context.WithTimeout(ctx, kubeclient.AgentLoop.Timeout)
	_, err = cl.Rollouts.List(lctx, metav1.ListOptions{ResourceVersion: "0"})
	cancel()
	if notServed(err) {
		wait := f.noFleet.absent(time.Now())
		k.Log.Info(followRolloutLoop+": the cluster does not serve FlexNodeRollouts to this node; looking again later",
			"fix", "aks-flex-node cluster prepare --fleet", "error", err, "next-look-in", wait)
		return nil
	} else if err != nil {
		return fmt.Errorf("%s: list the rollouts: %w", followRolloutLoop, err)
	}
	f.noFleet.present()
	f.Nodes.Start(ctx)
	// A node that follows an AKS Machine (in ARM, or through the
	// cluster) is AKS's to disrupt: it never takes a slot.
	managed := f.Config.HasMachine()
	agent := &fleet.Agent{
		NodeName: nodeName,
		Host: &rolloutHost{layout: k.Layout, config: f.Config, log: k.Log, control: k.Control,
			client: nodeClientFor(f.Config, k.Layout, kubeclient.AgentLoop), nodeName: nodeName, nodes: f.Nodes,
			evidence: f.Evidence}, // issue 30
		Connect:          connect,
		Nodes:            f.Nodes,
		RecordPath:       k.Layout.OnRoot(k.Layout.RolloutRecord()),
		ManagedElsewhere: managed,
		Events:           f.Events,
		Metrics:          k.Metrics,
		Log:              k.Log,
	}
	err = agent.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("%s: %w", followRolloutLoop, err)
}

// joinPoll is how often a follower on a host that has not joined yet
// looks for the join (a stat and a read of local state, no request): a
// rollout applied just after a join must not wait for the loop's next
// interval (a minute) before this node follows it.
const joinPoll = 2 * time.Second

// joinedNode waits until the host has joined and returns its node's name;
// "" with a nil error when ctx ends first.
func (f *RolloutFollower) joinedNode(ctx context.Context) (string, error) {
	k := f.Keeper
	tick := time.NewTicker(joinPoll)
	defer tick.Stop()
	for {
		joined, err := k.joined()
		if err != nil {
			return "", err
		}
		if joined {
			a, err := state.Open(k.Layout).Applied()
			if err != nil {
				return "", err
			}
			if a != nil && a.NodeName != "" {
				return a.NodeName, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", nil
		case <-tick.C:
		}
	}
}

// rolloutClients makes the agent's clients with the node's credential
// from the machine that serves at each call: the Nodes and the rollouts
// as informers follow them (no client-side bound that would cut a
// watch), the slots with the agent loops' bound on each request.
func rolloutClients(c *config.Config, l layout.Layout) func() (fleet.Clients, error) {
	return func() (fleet.Clients, error) {
		cfg, err := node.ClientConfig(c, l, l.OnRoot(l.MachineDir(state.Open(l).ActiveMachine())))
		if err != nil {
			return fleet.Clients{}, fmt.Errorf("the node's credential: %w", err)
		}
		kc, err := kubeclient.New(cfg, kubeclient.Follow)
		if err != nil {
			return fleet.Clients{}, err
		}
		ro, err := fleet.NewRollouts(cfg, nil)
		if err != nil {
			return fleet.Clients{}, err
		}
		sc := *cfg
		sc.Timeout = kubeclient.AgentLoop.Timeout
		st, err := fleet.NewSlotStore(&sc, nil, v1alpha1.Namespace)
		if err != nil {
			return fleet.Clients{}, err
		}
		return fleet.Clients{Nodes: kc.CoreV1().Nodes(), Rollouts: ro, Slots: st}, nil
	}
}

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/apiprobe"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/hostos"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/metrics"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// New is the agent for config c on layout l: on a joined host it keeps
// the node's machine running, every agent.machineReconcileInterval and
// without waiting for the cluster; when the config names an API server,
// it waits for it, with backoff, before any loop that needs the cluster.
// It serves /healthz and /metrics on its socket in the state dir (and on
// agent.metricsAddress when set), and records what it does to the node as
// Events on the Node. An error is the config's. opts add what the
// command passes in (WithEvidence).
func New(c *config.Config, l layout.Layout, log *slog.Logger, opts ...Option) (*Agent, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	interval, _ := time.ParseDuration(c.Agent.MachineReconcileInterval)
	reg := metrics.NewRegistry(l)
	rec := events.ForMachine(c, l, func() string { return l.OnRoot(l.MachineDir(state.Open(l).ActiveMachine())) }, c.Agent.NodeName, log)
	a := &Agent{Layout: l, Log: log, Interval: interval, Metrics: reg,
		Socket: l.OnRoot(l.AgentSocket()), TCPAddress: c.Agent.MetricsAddress}
	keeper := &MachineKeeper{Layout: l, Control: &machine.Control{}, Log: log, Metrics: reg, Events: rec, ConfigFile: l.OnRoot(l.ConfigFile())}
	a.Loops = append(a.Loops, KeepMachine(keeper), ReportUpgradeOutcome(l, rec))
	if loop := KeepHostRoutes(l, c, log); loop != nil {
		a.Loops = append(a.Loops, *loop)
	}
	if srv := c.Node.Kubelet.ClusterFQDN; srv != "" {
		client, err := apiprobe.New(srv, c.CAPEM(), 10*time.Second)
		if err != nil {
			return nil, fmt.Errorf("node.kubelet.caCertData: %w", err)
		}
		a.WaitFor = "API server " + srv
		a.Ready = client.Reachable
		nodeClient := func() (kubeclient.Interface, error) {
			cfg, err := node.ClientConfig(c, l, l.OnRoot(l.MachineDir(state.Open(l).ActiveMachine())))
			if err != nil {
				return nil, err
			}
			return kubeclient.New(cfg, kubeclient.AgentLoop)
		}
		// One Node informer for the process: every loop that reads Nodes
		// reads this cache (one list, one watch), none asks on a timer.
		nodes := NewNodeInformer(nodeClientFor(c, l, kubeclient.Follow), c.Agent.NodeName)
		a.Loops = append(a.Loops, FinishRepave(keeper, nodeClient, c.Agent.NodeName))
		follower := newMachineFollower(c, l, log, keeper, nodeClient, nodes, interval)
		a.Loops = append(a.Loops, KeepNodeObject(&NodeObjectKeeper{Keeper: keeper, Client: nodeClient, Nodes: nodes,
			Reset:                  func(ctx context.Context) error { return startDeletionReset(ctx, l) },
			DeletionFollowsMachine: follower != nil,
		}))
		if follower != nil {
			a.Loops = append(a.Loops, FollowMachine(follower))
		}
		// The fleet's rollouts (a node whose AKS Machine is its goal
		// reports ManagedElsewhere and never takes a slot).
		a.Loops = append(a.Loops, FollowRollout(&RolloutFollower{Keeper: keeper, Config: c, Nodes: nodes, Events: rec, Evidence: o.evidence}))
		// Every agent is a candidate for writing the rollouts' status.
		a.Loops = append(a.Loops, WriteRolloutStatus(&RolloutStatusWriter{NodeName: c.Agent.NodeName, Nodes: nodes, Log: log, Metrics: reg,
			Config: func() (*rest.Config, error) {
				return node.ClientConfig(c, l, l.OnRoot(l.MachineDir(state.Open(l).ActiveMachine())))
			}}))
		// The node's bridge network reaches the other nodes' pods; in
		// networking.mode cluster the cluster's CNI routes them.
		if !c.Networking.ClusterCNI() {
			a.Loops = append(a.Loops, KeepPodRoutes(&PodRouteKeeper{Layout: l, Log: log, Nodes: nodes,
				PodCIDR: c.Networking.PodCIDR, ClusterPodCIDR: c.Networking.ClusterPodCIDR, Events: rec, Window: interval}))
		}
		spec, ok, err := identity.FromConfig(c, identity.ReadSecretFile(l.Root()))
		if err != nil {
			return nil, err
		}
		if ok {
			src := &identity.Source{Spec: spec, Cache: identity.DirCache(l.OnRoot(l.IdentityDir()))}
			a.WaitFor += " as " + spec.String()
			a.Ready = func(ctx context.Context) error { return authenticated(ctx, client, src) }
		}
	}
	return a, nil
}

// deletionResetUnit is the transient unit the deletion reset runs in.
const deletionResetUnit = "aks-flex-node-deletion-reset"

// startDeletionReset runs `aks-flex-node reset` in a transient unit of its
// own: reset stops the agent's service, and a reset in the agent's cgroup
// would be stopped with it.
func startDeletionReset(ctx context.Context, l layout.Layout) error {
	_, err := hostos.Exec(ctx, "systemd-run", "--unit="+deletionResetUnit, "--collect", "--quiet",
		"--description=aks-flex-node reset: the Node carries "+DeletingTaint,
		l.AgentBinary(), "reset", "--config", l.ConfigFile())
	return err
}

// authenticated is the agent's readiness with an Azure identity: the API
// server answers and accepts a token for the identity the kubelet uses,
// from the cache the kubelet's plugin shares (so the agent's own client
// uses the same credential, and asks the endpoint only when it is due).
func authenticated(ctx context.Context, client *apiprobe.Client, src *identity.Source) error {
	tok, _, err := src.Token(ctx, identity.AKSServerID)
	if err != nil {
		return err
	}
	code, user, err := client.SelfSubjectReview(ctx, tok.AccessToken)
	switch {
	case err != nil:
		return err
	case code == http.StatusUnauthorized:
		return fmt.Errorf("%s rejected the token of %s (401)", client.Server, src.Spec)
	case code/100 != 2:
		return fmt.Errorf("%s answered %d to a SelfSubjectReview", client.Server, code)
	case user.Username == "":
		return fmt.Errorf("%s did not say who the token is", client.Server)
	}
	return nil
}

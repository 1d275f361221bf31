package lifecycle

import (
	"context"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/metrics"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/systemd"
	"github.com/Azure/aks-flex-node/internal/task"
)

// ResetPhases are reset's phases: the agent service first (so nothing
// restarts the machines or puts routes back), then both machines of the
// blue/green pair, then the Node is told its kubelet stopped
// (mark-node-stopped), then the layer cache the machines were made from
// (unless o.KeepImageCache), then what the node left in the host's network
// namespace (owned routes, the bridge, netfilter state), then what start
// changed on the host to keep swap off, then every path start tracked
// (the network phase reads start's record of the host before this
// removes it) but, with o.KeepImageCache, the staged bundles and the
// bundles' verification records.
func ResetPhases(o Options) []task.Phase { return resetPhases(o, joinedNode{}) }

// joinedNode is the Node a joined host's reset tells that its kubelet
// stopped, and the client to tell it with, made while the machine that
// holds its credential is there.
type joinedNode struct {
	name   string
	client *NodeClient
}

func resetPhases(o Options, n joinedNode) []task.Phase {
	o.setDefaults()
	l := o.Layout
	mgr := systemd.NewManager(l.Root())
	var machines []task.Task
	for _, name := range l.Machines() {
		machines = append(machines, RemoveMachine(NewMachine(l, name, o.Exec), mgr))
	}
	machines = append(machines, MarkNodeStopped(n.client, n.name, resetEventTimeout), RemoveLayerCache(l, o.KeepImageCache))
	h := Host{Layout: l, ProcDir: o.ProcDir, Exec: o.Exec}
	return []task.Phase{
		{Name: "agent", Tasks: []task.Task{RemoveAgentService(l, mgr, o.Log)}},
		{Name: "machines", Tasks: machines},
		{Name: "network", Tasks: []task.Task{RemoveHostRoutes(h), RemoveBridgeNetwork(h)}},
		{Name: "host", Tasks: []task.Task{RestoreSwap(l, o.Exec)}},
		{Name: "files", Tasks: []task.Task{RemoveTrackedPaths(l, o.Log, o.KeepImageCache)}},
	}
}

// Reset undoes start, under the node lock: it stops and removes the agent
// service and the machines, then removes every path start tracked
// (deepest first). It is safe to run twice and after a half-finished
// start. The agent binary stays; uninstall.sh removes it.
func Reset(ctx context.Context, o Options) (bool, error) {
	o.setDefaults()
	lock, err := nodelock.Acquire(ctx, o.Layout, "reset", o.Lock)
	if err != nil {
		return false, err
	}
	defer lock.Release()
	n := recordReset(ctx, o)
	r := &task.Runner{Log: o.Log, Now: o.Now, Observer: task.Observers(o.Observer, metrics.TaskErrors(metrics.OpenStore(o.Layout)))}
	changed, err := r.Phases(ctx, resetPhases(o, n)...)
	if mgr := systemd.NewManager(o.Layout.Root()); err == nil && changed && mgr.Live() {
		err = mgr.DaemonReload(ctx)
	}
	return changed, err
}

// recordReset records a Reset Event on the Node of a joined host, as the
// node, before the machine that holds its credential is removed, and
// returns the Node with a client made now, for mark-node-stopped once the
// machines stopped. The Node object itself stays: deleting it is the
// cluster's decision.
func recordReset(ctx context.Context, o Options) joinedNode {
	a, err := state.Open(o.Layout).Applied()
	if err != nil || a == nil || a.NodeName == "" || a.Machine == "" {
		return joinedNode{}
	}
	m := NewMachine(o.Layout, a.Machine, o.Exec)
	ctx, cancel := context.WithTimeout(ctx, resetEventTimeout)
	defer cancel()
	// The node's client is the config's server and CA with the kubelet's
	// certificate, whatever it bootstrapped with; without a config (gone,
	// or invalid) there is no client: the machine's kubeconfig is not
	// trusted.
	var c *config.Config
	if o.ConfigFile != "" {
		c, _ = config.Load(o.Layout.OnRoot(o.ConfigFile))
	}
	_ = events.ForMachine(c, o.Layout, m.Root, a.NodeName, o.Log).Normal(ctx, events.ReasonReset,
		"aks-flex-node reset: stopping machine %s and removing the node's files from this host; the Node object stays until it is deleted", a.Machine)
	n := joinedNode{name: a.NodeName, client: nodeClientFor(c, o.Layout, m.Root)}
	_, _ = n.client.Get() // its credential is read now; a failure is mark-node-stopped's to tell
	return n
}

// resetEventTimeout bounds the Reset Event: a reset must not wait long on
// a cluster that is gone.
const resetEventTimeout = 3 * time.Second

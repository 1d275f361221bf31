package daemon

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
)

// DeletingTaint is upstream's deletion taint: a Node carrying it
// (value "true", effect NoSchedule) is being removed from the cluster,
// and its agent drains and resets the host, which stops the agent.
const DeletingTaint = "kubernetes.azure.com/flex-node-deleting"

// Repair kinds of the Node object's keeper.
const (
	RepairNodeReregistered = "node-reregistered"
	RepairDeletionReset    = "deletion-reset"
)

// keepNodeObjectLoop names the loop in logs and as the node lock's holder.
const keepNodeObjectLoop = "keep-node-object"

// reregisterGrace is how long after restarting the kubelet for a missing
// Node the keeper waits before it would restart it again: registration
// takes seconds, and the interval may be shorter.
const reregisterGrace = time.Minute

// deletionDrainTimeout bounds the drain before the reset of a Node being
// deleted: the Node goes either way; pods still there are named.
const deletionDrainTimeout = 2 * time.Minute

// NodeObjectKeeper keeps the Node object that the node registered: a Node
// deleted without the deletion taint is registered again (the 1.35 kubelet
// mostly does it itself within seconds; one that has not is restarted, and
// registers at its start), and a Node that
// carries the taint makes the agent drain it and reset the host. The
// agent never deletes the Node: that is the cluster's decision.
type NodeObjectKeeper struct {
	Keeper *MachineKeeper
	// Nodes is the agent's shared Node informer: the keeper reads its
	// Node from it at each pass, never from the API server (a watch
	// delivers the deletion and the taint; a Get per pass and node would
	// be the fleet's cost on a timer). nil makes one of the keeper's own
	// over Client.
	Nodes *NodeInformer
	// Client is the node's own client (its credential): the drain's.
	Client func() (kubeclient.Interface, error)
	// Reset starts `aks-flex-node reset` outside the agent's unit (reset
	// stops the agent, which must not end the reset with it).
	Reset func(ctx context.Context) error
	// DeletionFollowsMachine leaves the deletion taint to follow-machine:
	// with an AKS Machine, upstream's table resets the host only once the
	// Machine is gone too.
	DeletionFollowsMachine bool

	lastRestart time.Time
	resetting   bool
}

// KeepNodeObject is the loop; it needs the API server.
func KeepNodeObject(k *NodeObjectKeeper) Loop {
	return Loop{Name: keepNodeObjectLoop, Run: k.Keep}
}

// Keep is one pass: the Node looked up in the informer's cache; missing,
// the kubelet restarted; tainted for deletion, drained and reset.
func (k *NodeObjectKeeper) Keep(ctx context.Context) error {
	mk := k.Keeper
	if joined, err := mk.joined(); err != nil || !joined || k.resetting {
		return err
	}
	a, err := state.Open(mk.Layout).Applied()
	if err != nil || a == nil || a.NodeName == "" || a.Machine == "" {
		return err
	}
	if k.Nodes == nil {
		k.Nodes = NewNodeInformer(k.Client, a.NodeName)
	}
	k.Nodes.Start(ctx)
	if err := k.Nodes.WaitSynced(ctx, keepNodeObjectLoop, nodeSyncWait); err != nil {
		return err
	}
	n, ok := k.Nodes.Node(a.NodeName)
	switch {
	case !ok:
		return k.reregister(ctx, a)
	case deleting(n) && !k.DeletionFollowsMachine:
		cs, err := k.Client()
		if err != nil {
			return fmt.Errorf("keep node object: the node's credential: %w", err)
		}
		return k.deletion(ctx, cs, a)
	}
	return nil
}

// nodeSyncWait bounds how long a pass waits for the informer's first
// list; a pass that gives up is retried at the next interval.
const nodeSyncWait = 30 * time.Second

func deleting(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == DeletingTaint && t.Value == "true" && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// reregister restarts the kubelet in the active machine, under the node
// lock, at most once per reregisterGrace.
func (k *NodeObjectKeeper) reregister(ctx context.Context, a *state.Applied) error {
	mk := k.Keeper
	if since := time.Since(k.lastRestart); since < reregisterGrace {
		mk.Log.Info("Node "+a.NodeName+" not registered yet after the kubelet's restart", "since", since.Round(time.Second))
		return nil
	}
	release, ok, err := lockOrSkip(mk.Layout, mk.Log, keepNodeObjectLoop)
	if err != nil || !ok {
		return err
	}
	defer release()
	if st, err := mk.Control.State(ctx, a.Machine); err != nil || st != "active" {
		return err // keep-machine brings the machine up; its kubelet registers
	}
	k.lastRestart = time.Now()
	if _, err := mk.Control.Exec(ctx, a.Machine, "systemctl", "restart", node.KubeletUnitName); err != nil {
		return fmt.Errorf("keep node object: restart the kubelet to register Node %s: %w", a.NodeName, err)
	}
	mk.repaired(ctx, RepairNodeReregistered, fmt.Sprintf("Node %s was deleted without the %s taint; aks-flex-node restarted the kubelet in machine %s, which registers it again", a.NodeName, DeletingTaint, a.Machine))
	return nil
}

// deletionDrain are the deletion drain's opt-ins: all of kubectl drain's.
// The reset that follows ends every pod on this host whatever the drain
// does, so a pod kubectl would refuse is better evicted (its graceful
// end, its budget respected) than refused and then killed; a DaemonSet's
// pods are left, as they are in any node deletion.
var deletionDrain = drain.Options{IgnoreDaemonSets: true, Force: true, DeleteEmptyDirData: true}

// deletion drains the Node (bounded; what stays is named), records it,
// and starts the reset, which stops this agent for good.
func (k *NodeObjectKeeper) deletion(ctx context.Context, cs kubeclient.Interface, a *state.Applied) error {
	mk := k.Keeper
	mk.Log.Info("Node carries the deletion taint; draining it, then resetting this host", "node", a.NodeName, "taint", DeletingTaint)
	evicted, derr := drain.Drain(ctx, cs, a.NodeName, deletionDrainTimeout, deletionDrain)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	msg := fmt.Sprintf("Node %s carries %s=true:NoSchedule: aks-flex-node drained it (%d pod(s) evicted) and resets this host; the agent stops, the Node object is the cluster's to delete", a.NodeName, DeletingTaint, evicted)
	if derr != nil {
		mk.Log.Warn("drain before the deletion reset did not finish; resetting anyway", "error", derr)
		msg += "; " + derr.Error()
	}
	mk.Log.Info(msg)
	mk.Metrics.Repaired(RepairDeletionReset)
	mk.Events.Normal(ctx, events.ReasonReset, "%s", msg)
	if err := k.Reset(ctx); err != nil {
		mk.Events.Warning(ctx, events.ReasonRepairFailed, "Node %s carries %s but the reset could not be started: %v", a.NodeName, DeletingTaint, err)
		return fmt.Errorf("keep node object: start the deletion reset: %w", err)
	}
	k.resetting = true
	return nil
}

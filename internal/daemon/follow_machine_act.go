package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/state"
)

// ConditionMachine is the Node condition the follower reports on: the
// applied settings version (the Machine's eTag), the last decision and
// the last error. The node may patch its own Node's status; ARM's
// Machine status is not the node's to write.
const ConditionMachine = "FlexNodeMachine"

// act carries out decision d; rec is updated with what the node runs
// afterwards. acted is false when the pass was skipped because another
// command holds the node lock (nothing to report then).
func (f *MachineFollower) act(ctx context.Context, d machineapi.Decision, cs kubeclient.Interface, a *state.Applied, n *corev1.Node, rec *machineapi.GoalRecord) (acted bool, err error) {
	adopt := func() { rec.Applied, rec.ETag = d.Goal, d.ETag }
	switch d.Action {
	case machineapi.ActionNone:
		adopt()
	case machineapi.ActionApplyInPlace:
		release, ok, err := lockOrSkip(f.Keeper.Layout, f.Keeper.Log, followMachineLoop)
		if err != nil || !ok {
			return false, err
		}
		defer release()
		if err := f.applyInPlace(ctx, cs, a, n, rec.Applied, d.Goal); err != nil {
			return true, fmt.Errorf("apply the AKS Machine's labels and taints in place: %w", err)
		}
		adopt()
	case machineapi.ActionRepave:
		err := f.Repave(ctx, d.Goal.Overlay(f.Config))
		var held *nodelock.HeldError
		if errors.As(err, &held) {
			f.Keeper.Log.Info(followMachineLoop+": skipped this pass; another command is changing the node", "holder", held.Holder.String())
			return false, nil
		}
		if err != nil {
			return true, fmt.Errorf("repave to the AKS Machine's goal (Kubernetes %s): %w", d.Goal.Version, err)
		}
		adopt()
		rec.NodeUID = "" // the new side's kubelet registers the Node anew
		return true, nil
	case machineapi.ActionReset:
		k := &NodeObjectKeeper{Keeper: f.Keeper, Client: f.Client, Reset: f.Reset}
		if err := k.deletion(ctx, cs, a); err != nil {
			return true, err
		}
		f.resetting = true
	}
	return true, nil
}

// applyInPlace sets the goal's labels on the Node (those NodeRestriction
// lets a node set on itself) and writes the kubelet's registration
// settings (node labels, registerWithTaints) into the active machine, so
// a registration again keeps them; the kubelet is not restarted. A
// registered Node's taints are not the node's to change (NodeRestriction
// refuses it): AKS sets them; the kubelet registers with them.
func (f *MachineFollower) applyInPlace(ctx context.Context, cs kubeclient.Interface, a *state.Applied, n *corev1.Node, old, goal machineapi.Settings) error {
	if n != nil {
		if err := patchLabels(ctx, cs, n, old.Labels, goal.Labels); err != nil {
			return err
		}
	}
	if !sameTaints(old.Taints, goal.Taints) {
		f.Keeper.Log.Info(followMachineLoop+": taints changed; the kubelet registers with them, and AKS sets them on the registered Node (NodeRestriction keeps a node from changing its own taints)", "taints", goal.Taints)
	}
	return f.Keeper.writeNodeFiles(a, goal)
}

func sameTaints(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// patchLabels sets the goal's labels on Node n and removes those the
// previous goal set that the new one drops, as the node; labels a node
// may not set on itself are left to AKS.
func patchLabels(ctx context.Context, cs kubeclient.Interface, n *corev1.Node, old, goal map[string]string) error {
	labels := map[string]any{}
	for k, v := range goal {
		if machineapi.NodeMaySetLabel(k) && n.Labels[k] != v {
			labels[k] = v
		}
	}
	for k := range old {
		if _, kept := goal[k]; !kept && machineapi.NodeMaySetLabel(k) {
			if _, on := n.Labels[k]; on {
				labels[k] = nil
			}
		}
	}
	if len(labels) == 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch Node %s's labels %v: %w", n.Name, slices.Sorted(maps.Keys(labels)), err)
	}
	return nil
}

// writeNodeFiles renders the node files with goal over the config file
// into machine a.Machine and records their checksums in the applied
// state, so drift repair keeps the goal's files, not the file's.
func (k *MachineKeeper) writeNodeFiles(a *state.Applied, goal machineapi.Settings) error {
	c, opts, err := k.nodeConfig(&goal)
	if err != nil {
		return err
	}
	if _, _, err := node.Write(machine.Dir(k.Layout, a.Machine), c, opts); err != nil {
		return err
	}
	rendered, err := node.Render(c, opts)
	if err != nil {
		return err
	}
	a.NodeFiles = node.Checksums(rendered)
	if _, err := state.Open(k.Layout).SaveApplied(*a); err != nil {
		return fmt.Errorf("record the node files' checksums: %w", err)
	}
	return nil
}

// report keeps what the pass decided and its error in the goal record,
// counts the decision and sets the Node's condition (when there is a
// Node, and it is not being reset).
func (f *MachineFollower) report(ctx context.Context, cs kubeclient.Interface, n *corev1.Node, d machineapi.Decision, rec *machineapi.GoalRecord, err error) {
	mk := f.Keeper
	rec.Decision, rec.Reason, rec.Error, rec.At = d.Action, d.Reason, "", f.now()
	if err != nil {
		rec.Error = err.Error()
	}
	setCondition := n != nil && d.Action != machineapi.ActionReset
	if setCondition {
		rec.NodeUID = string(n.UID)
	}
	if _, werr := fsutil.WriteJSON(mk.Layout.OnRoot(mk.Layout.MachineGoal()), rec); werr != nil {
		mk.Log.Warn(followMachineLoop+": record the decision", "error", werr)
	}
	mk.Metrics.MachineDecision(string(d.Action))
	if !setCondition {
		return
	}
	if cerr := setMachineCondition(ctx, cs, n, machineCondition(*rec, f.now())); cerr != nil {
		mk.Log.Warn(followMachineLoop+": set the Node's "+ConditionMachine+" condition", "error", cerr)
	}
}

// machineCondition is the Node condition for rec: True while the node
// runs the Machine's goal (or moved to it), False while it waits or ARM
// fails.
func machineCondition(rec machineapi.GoalRecord, now time.Time) corev1.NodeCondition {
	status := corev1.ConditionFalse
	switch rec.Decision {
	case machineapi.ActionNone, machineapi.ActionApplyInPlace, machineapi.ActionRepave:
		if rec.Error == "" {
			status = corev1.ConditionTrue
		}
	}
	msg := "applied eTag " + rec.ETag + ": " + rec.Reason
	if rec.Error != "" {
		msg += "; last error: " + rec.Error
	}
	if len(msg) > maxConditionMessage {
		msg = msg[:maxConditionMessage]
	}
	t := metav1.NewTime(now)
	return corev1.NodeCondition{Type: ConditionMachine, Status: status, Reason: conditionReason(rec.Decision),
		Message: msg, LastHeartbeatTime: t, LastTransitionTime: t}
}

// maxConditionMessage bounds the condition's message (an ARM error can
// be long).
const maxConditionMessage = 1024

// conditionReason is the decision in CamelCase, as condition reasons are.
func conditionReason(a machineapi.Action) string {
	out := make([]byte, 0, len(a))
	up := true
	for i := 0; i < len(a); i++ {
		c := a[i]
		if c == '-' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}

// setMachineCondition patches the condition onto Node n's status,
// keeping its transition time while its status stays.
func setMachineCondition(ctx context.Context, cs kubeclient.Interface, n *corev1.Node, c corev1.NodeCondition) error {
	for _, old := range n.Status.Conditions {
		if old.Type == c.Type && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch Node %s's status: %w", n.Name, err)
	}
	return nil
}

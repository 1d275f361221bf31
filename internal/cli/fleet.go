package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// AnnotationResumedAt is set on a rollout by `fleet resume` (RFC 3339): a
// Failed agent that sees a value it has not acted on retries from stage
// (fleet protocol 5).
const AnnotationResumedAt = "flexnode.azure.com/resumed-at"

const fleetLong = `Show and steer FlexNodeRollouts (flexnode.azure.com/v1alpha1, short name fnr)
with an admin's kubeconfig: --kubeconfig, else $KUBECONFIG, else
~/.kube/config, its current context. The rollouts themselves are applied with
kubectl; the nodes' agents follow them, with no controller in the cluster.

The cluster needs what ` + "`aks-flex-node cluster prepare --fleet`" + ` prints, applied
once; without it these commands say so.`

func newFleetCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Show, pause and resume the cluster's FlexNodeRollouts (an admin's kubeconfig)",
		Long:  fleetLong,
	}
	var kubeconfig string
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default $KUBECONFIG, then ~/.kube/config)")
	cmd.AddCommand(newFleetStatusCommand(&kubeconfig), newFleetPauseCommand(&kubeconfig), newFleetResumeCommand(&kubeconfig))
	return cmd
}

func newFleetPauseCommand(kubeconfig *string) *cobra.Command {
	return &cobra.Command{
		Use:   "pause NAME",
		Short: "Stop rollout NAME from starting more nodes (spec.paused=true)",
		Long: `Set spec.paused on rollout NAME: no node takes a slot while it is set. Nodes
already switching finish (or roll back) and release their slots as usual;
nothing is interrupted. ` + "`fleet resume NAME`" + ` undoes it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newFleetClient(*kubeconfig)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			if _, err := c.rollouts.Patch(ctx, args[0], types.MergePatchType, []byte(`{"spec":{"paused":true}}`)); err != nil {
				return rolloutErr("pause", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rollout %s paused: no node starts until `aks-flex-node fleet resume %s`\n", args[0], args[0])
			return nil
		},
	}
}

func newFleetResumeCommand(kubeconfig *string) *cobra.Command {
	return &cobra.Command{
		Use:   "resume NAME",
		Short: "Continue rollout NAME after a failure or a pause: free the failed nodes' slots, unpause",
		Long: `Resume rollout NAME, the one way a rollout continues after a node failed or
after fleet pause. Fix what made the nodes fail first (fleet status NAME names
them, with their step and reason). Then resume:

  1. frees every slot of the rollout that a failed node keeps (its holder
     cleared, the failed-step and failed-reason annotations removed), so
     other nodes can take them;
  2. sets spec.paused to false;
  3. sets the annotation ` + AnnotationResumedAt + ` (RFC 3339, now) on the rollout:
     each failed node's agent sees a value it has not acted on and retries
     the release from its first step (stage).

Resuming a rollout that is neither paused nor failed changes only the
annotation.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newFleetClient(*kubeconfig)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			return resumeRollout(ctx, c, args[0], time.Now(), cmd.OutOrStdout())
		},
	}
}

// fleetClient is what the fleet commands read and write, with the
// admin's credential.
type fleetClient struct {
	cfg      *rest.Config
	rollouts *fleet.Rollouts
	slots    fleet.Store
}

// newFleetClient loads the kubeconfig as kubectl does: path when given,
// else $KUBECONFIG (a list, merged), else ~/.kube/config.
func newFleetClient(path string) (*fleetClient, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		where := path
		if where == "" {
			where = "$KUBECONFIG or ~/.kube/config"
		}
		return nil, invalidf("--kubeconfig %s: %v (give an admin's kubeconfig with --kubeconfig)", where, err)
	}
	ro, err := fleet.NewRollouts(cfg, nil)
	if err != nil {
		return nil, err
	}
	slots, err := fleet.NewSlotStore(cfg, nil, v1alpha1.Namespace)
	if err != nil {
		return nil, err
	}
	return &fleetClient{cfg: cfg, rollouts: ro, slots: slots}, nil
}

// resumeRollout is fleet resume (fleet protocol 5): the failed slots
// first, so that a node acting on the rollout's change finds them free.
func resumeRollout(ctx context.Context, c *fleetClient, name string, now time.Time, out interface{ Write([]byte) (int, error) }) error {
	if _, err := c.rollouts.Get(ctx, name); err != nil {
		return rolloutErr("resume", name, err)
	}
	freed, err := clearFailedSlots(ctx, c.slots, name)
	if err != nil {
		return fmt.Errorf("resume %s: %w (nothing else was changed; run it again)", name, err)
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{AnnotationResumedAt: now.UTC().Format(time.RFC3339)}},
		"spec":     map[string]any{"paused": false},
	})
	if err != nil {
		return err
	}
	if _, err := c.rollouts.Patch(ctx, name, types.MergePatchType, patch); err != nil {
		return rolloutErr("resume", name, err)
	}
	for _, f := range freed {
		fmt.Fprintf(out, "freed slot %s (held by failed node %s)\n", f[0], f[1])
	}
	fmt.Fprintf(out, "rollout %s resumed: spec.paused=false, %s=%s; failed nodes retry from stage\n", name, AnnotationResumedAt, now.UTC().Format(time.RFC3339))
	return nil
}

// clearFailedSlots frees each slot of rollout that a failed node keeps
// (a compare-and-swap each; a slot that changed meanwhile is read again),
// returning each freed slot's name and former holder.
func clearFailedSlots(ctx context.Context, store fleet.Store, rollout string) ([][2]string, error) {
	var freed [][2]string
	for attempt := 0; ; attempt++ {
		list, err := store.List(ctx)
		if err != nil {
			return freed, fmt.Errorf("list the slots in %s: %w", v1alpha1.Namespace, err)
		}
		conflict := false
		for i := range list.Items {
			l := &list.Items[i]
			if !slotOf(l.Name, rollout) || l.Annotations[fleet.AnnotationFailedReason] == "" {
				continue
			}
			holder := ""
			if l.Spec.HolderIdentity != nil {
				holder, _, _ = strings.Cut(*l.Spec.HolderIdentity, "/")
			}
			next := l.DeepCopy()
			delete(next.Annotations, fleet.AnnotationFailedReason)
			delete(next.Annotations, fleet.AnnotationFailedStep)
			next.Spec.HolderIdentity, next.Spec.RenewTime = nil, nil
			if _, err := store.Update(ctx, next); apierrors.IsConflict(err) {
				conflict = true
				continue
			} else if err != nil {
				return freed, fmt.Errorf("free slot %s: %w", l.Name, err)
			}
			freed = append(freed, [2]string{l.Name, holder})
		}
		if !conflict {
			return freed, nil
		}
		if attempt == 4 {
			return freed, errors.New("the slots kept changing while they were freed")
		}
	}
}

// slotOf says whether name is one of rollout's slots (<rollout>-slot-<i>).
func slotOf(name, rollout string) bool {
	rest, ok := strings.CutPrefix(name, rollout+"-slot-")
	if !ok {
		return false
	}
	i, err := strconv.Atoi(rest)
	return err == nil && i >= 0 && strconv.Itoa(i) == rest
}

// slotsByNode is each node's slot of rollout: its name, and whether its
// holder failed.
func slotsByNode(leases []coordinationv1.Lease, rollout string) map[string]string {
	out := map[string]string{}
	for _, l := range leases {
		if !slotOf(l.Name, rollout) || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			continue
		}
		node, _, _ := strings.Cut(*l.Spec.HolderIdentity, "/")
		s := l.Name
		if r := l.Annotations[fleet.AnnotationFailedReason]; r != "" {
			s += " (failed: " + r + ")"
		}
		out[node] = s
	}
	return out
}

// rolloutErr says what failed about rollout name and what to do.
func rolloutErr(verb, name string, err error) error {
	var se apierrors.APIStatus
	switch {
	case crdMissing(err):
		return fmt.Errorf("%s %s: the cluster does not serve %s.%s: run `aks-flex-node cluster prepare --fleet | kubectl apply -f -` first", verb, name, v1alpha1.Resource, v1alpha1.Group)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s %s: no rollout %s in the cluster (kubectl get fnr lists them)", verb, name, name)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s %s: %w (the kubeconfig's user needs an admin's rights on %s)", verb, name, err, v1alpha1.Resource)
	case errors.As(err, &se):
		return fmt.Errorf("%s %s: %w", verb, name, err)
	}
	return fmt.Errorf("%s %s: %w (is the kubeconfig's API server reachable?)", verb, name, err)
}

// crdMissing is a 404 about the resource itself, not an object of it:
// the API server does not serve the group (the CRD is not installed).
func crdMissing(err error) bool {
	var se apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &se) {
		return false
	}
	d := se.Status().Details
	return d == nil || d.Name == ""
}

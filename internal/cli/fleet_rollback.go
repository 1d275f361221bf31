package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

const fleetRollbackLong = `Roll a FlexNodeRollout back: every selected node already on its release
switches back to its retained side (kube1/kube2: no download, no
provisioning), bounded by the rollout's maxUnavailable and soak; nodes that
had not switched stay as they are. Maintenance windows and the canary do not
hold a rollback back; spec.paused does. The release's agent binary
(spec.release.agent) stays: a rollback switches machines, and the agent
that took the node forward understands the rollout; a release of the agent
alone has nothing to switch back (RolledBack, NotSwitched). To move agents
back, apply a rollout whose release names the earlier binary.

It sets spec.rollback (reason, when, by whom) on the rollout: the one way an
operator asks for a rollback (onFailure: Rollback starts the same rollback
by itself on a node's failure). The rollout's
status records it (status.rollback) and its condition RolledBack turns True
when every node is back; Complete stays False. A rollback cannot be undone:
to move forward again, apply a new rollout.

  aks-flex-node fleet rollback edge-b --reason "pods crash-loop on 1.35.4"
  kubectl wait --for=condition=RolledBack fnr/edge-b`

// newFleetRollbackCommand is `fleet rollback`; the fleet group (fleet.go)
// adds it and owns --kubeconfig.
func newFleetRollbackCommand(kubeconfig *string) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "rollback NAME --reason TEXT",
		Short: "Switch every node on a rollout's release back to its previous side",
		Long:  fleetRollbackLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" || len(reason) > 1024 {
				return invalidf("--reason: say why in 1 to 1024 bytes (it is recorded in the rollout's status)")
			}
			c, err := newFleetClient(*kubeconfig)
			if err != nil {
				return err
			}
			rs := c.rollouts
			ctx, cancel := context.WithTimeout(cmd.Context(), fleetTimeout)
			defer cancel()
			name := args[0]
			ro, err := rs.Get(ctx, name)
			if err != nil {
				return rolloutErr("rollback", name, err)
			}
			w := cmd.OutOrStdout()
			if ro.Spec.Rollback != nil {
				return printRollback(w, ro, "already rolling back")
			}
			patch, err := rollbackPatch(ro.ResourceVersion, reason, rollbackBy(), time.Now())
			if err != nil {
				return err
			}
			out, err := rs.Patch(ctx, name, types.MergePatchType, patch)
			if apierrors.IsConflict(err) {
				return fmt.Errorf("rollback %s: the rollout changed while this ran; run it again: %w", name, err)
			}
			if err != nil {
				return rolloutErr("rollback", name, err)
			}
			return printRollback(w, out, "rolling back")
		},
	}
	f := cmd.Flags()
	f.StringVar(&reason, "reason", "", "why, recorded in the rollout's status (required)")
	return cmd
}

// rollbackPatch is the merge patch that sets spec.rollback, conditional
// on the rollout's resourceVersion (a merge patch carrying one is a
// compare-and-swap): two operators cannot both believe they set it.
func rollbackPatch(resourceVersion, reason, by string, now time.Time) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"spec": map[string]any{"rollback": map[string]any{
			"reason": reason, "requestedAt": now.UTC().Format(time.RFC3339), "requestedBy": by,
		}},
	})
}

// rollbackBy names who asked, as far as this host knows.
func rollbackBy() string {
	by := "fleet rollback"
	if h, err := os.Hostname(); err == nil && h != "" {
		by += " on " + h
	}
	if len(by) > 256 {
		by = by[:256]
	}
	return by
}

func printRollback(w io.Writer, ro *v1alpha1.FlexNodeRollout, what string) error {
	rb := ro.Spec.Rollback
	at := ""
	if rb.RequestedAt != nil {
		at = " since " + rb.RequestedAt.UTC().Format(time.RFC3339)
	}
	_, err := fmt.Fprintf(w, "rollout %s: %s%s (%s; by %s)\n  watch: kubectl wait --for=condition=RolledBack fnr/%s\n",
		ro.Name, what, at, rb.Reason, rb.RequestedBy, ro.Name)
	return err
}

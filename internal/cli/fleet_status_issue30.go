package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

// What fleet status shows of issue 30 (fleet_status.go calls these at
// marked lines): the mode, the order and waves, held nodes, the plan's
// verdicts, a rollback, the windows, and with --node a node's failure
// evidence.

// status30 is issue 30's part of a rollout's view.
type status30 struct {
	Mode  string           `json:"mode,omitempty"`
	Order []fleet.OrderRow `json:"order,omitempty"`
}

func statusExtrasOf(r *v1alpha1.FlexNodeRollout, nodes []corev1.Node) status30 {
	s := status30{Mode: string(r.Spec.Strategy.Mode)}
	if rows, err := fleet.RolloutOrder(r, nodes); err == nil {
		s.Order = rows
	}
	return s
}

// writeStatus30 prints issue 30's lines of one rollout.
func writeStatus30(out io.Writer, v rolloutView) {
	s := v.Status
	if v.Mode == string(v1alpha1.ModePlan) {
		fmt.Fprintln(out, "  mode Plan: each node stages and reports a verdict; nothing drains")
	}
	if p := s.Plan; p != nil {
		fmt.Fprintf(out, "  plan: %d ready, %d not ready, %d without a verdict\n", p.Ready, p.NotReady, p.Pending)
	}
	if s.Held > 0 {
		fmt.Fprintf(out, "  held (%s=true): %s\n", fleet.HoldLabel, strings.Join(s.HeldNodes, ", "))
	}
	if rb := s.Rollback; rb != nil {
		fmt.Fprintf(out, "  rollback (%s, by %s): %d back", rb.Reason, dash(rb.RequestedBy), rb.RolledBack)
		if rb.RequestedAt != nil {
			fmt.Fprintf(out, ", asked %s", rb.RequestedAt.UTC().Format(time.RFC3339))
		}
		if rb.CompletedAt != nil {
			fmt.Fprintf(out, ", done %s", rb.CompletedAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprintln(out)
	}
	if w := s.Window; w != nil {
		switch {
		case w.Open && w.Closes != nil:
			fmt.Fprintf(out, "  maintenance window open until %s\n", w.Closes.UTC().Format(time.RFC3339))
		case w.NextOpen != nil:
			fmt.Fprintf(out, "  maintenance windows closed: the next opens %s (each node judges on its own clock)\n", w.NextOpen.UTC().Format(time.RFC3339))
		}
	}
	if len(v.Order) > 0 {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ORDER\tNODE\tWAVE")
		for _, o := range v.Order {
			wave := fmt.Sprint(o.Wave)
			if o.Canary {
				wave = "canary"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\n", o.Position+1, o.Node, wave)
		}
		_ = tw.Flush()
	}
}

// writeNodeEvidence is fleet status --node NAME: the node's own report
// and the evidence of its last failure, as it put them on its Node.
func writeNodeEvidence(ctx context.Context, c *fleetClient, out io.Writer, name string) error {
	kc, err := kubeclient.New(c.cfg, kubeclient.AgentLoop)
	if err != nil {
		return err
	}
	n, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return invalidf("status --node %s: no such Node", name)
	}
	if err != nil {
		return fmt.Errorf("status --node %s: %w", name, err)
	}
	if rel, ok, err := fleet.ReadNodeRelease(n); err != nil {
		fmt.Fprintf(out, "node %s: %v\n", name, err)
	} else if ok {
		fmt.Fprintf(out, "node %s: rollout %s generation %d: %s\n", name, rel.Rollout, rel.Generation, rel)
		if rel.Message != "" {
			fmt.Fprintf(out, "  %s\n", rel.Message)
		}
	} else {
		fmt.Fprintf(out, "node %s: no rollout has reported on it\n", name)
	}
	e, err := fleet.ReadEvidence(n)
	switch {
	case err != nil:
		fmt.Fprintf(out, "evidence: %v\n", err)
	case e == nil:
		fmt.Fprintln(out, "no failure evidence on this Node")
	default:
		fmt.Fprintf(out, "evidence of its failure at %s (rollout %s generation %d):\n%s", e.At.UTC().Format(time.RFC3339), e.Rollout, e.Generation, e.Text())
	}
	return nil
}

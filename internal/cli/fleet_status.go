package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

func newFleetStatusCommand(kubeconfig *string) *cobra.Command {
	var output, node string
	cmd := &cobra.Command{
		Use:   "status [NAME] [-o text|json]",
		Short: "Show each rollout (or NAME): its counts, conditions and nodes",
		Long: `Show each FlexNodeRollout, or rollout NAME: the counts of its status
(selected, staged, updating, updated, failed), its conditions (Progressing,
Paused, Complete) and the nodes it selects, each with its phase, step, since
when and why, as the node itself reports it on its Node (the condition
FlexNodeRelease), the slot it holds, if any (failed: the slot it keeps;
kept past its lease by a node that is cordoned or NotReady, e.g. powered off
mid-switch: which, since when, and what to do: bring the node back, or
delete its Node, which frees the slot), and the version of its agent (the
Node's flexnode.azure.com/agent-version, which each agent writes when it
starts: a release's agent binary moves it).

The counts and conditions are the status the elected agent wrote; the node
rows are read now. A node reporting an older generation of the rollout shows
that generation; one reporting nothing for this rollout shows "-".

-o json prints the same as one JSON document.

With issue 30's strategy it shows the mode, the plan's verdicts, the held
nodes, a rollback, when the next maintenance window opens and the order (and
wave) in which the nodes go. --node NAME shows that Node's own report and the
evidence it attached to its last failure (the step, the error, the timings,
the end of the failed side's kubelet and containerd journals, redacted, and
the path of the debug bundle on the host).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return invalidf("--output %q: want text or json", output)
			}
			c, err := newFleetClient(*kubeconfig)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			if node != "" { // issue 30 (fleet_status_issue30.go)
				return writeNodeEvidence(ctx, c, cmd.OutOrStdout(), node)
			}
			views, err := readFleet(ctx, c, args)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(views)
			}
			writeFleet(cmd.OutOrStdout(), views)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().StringVar(&node, "node", "", "show Node NAME's own report and the evidence of its last failure")
	return cmd
}

// rolloutView is one rollout as fleet status shows it.
type rolloutView struct {
	Name       string                 `json:"name"`
	Generation int64                  `json:"generation"`
	Paused     bool                   `json:"paused"`
	ResumedAt  string                 `json:"resumedAt,omitempty"`
	Status     v1alpha1.RolloutStatus `json:"status"`
	Nodes      []nodeView             `json:"nodes"`
	status30                          // issue 30: mode and order (fleet_status_issue30.go)
}

// nodeView is one selected node's own report.
type nodeView struct {
	Name       string    `json:"name"`
	Phase      string    `json:"phase,omitempty"`
	Generation int64     `json:"generation,omitempty"`
	Step       string    `json:"step,omitempty"`
	Since      time.Time `json:"since,omitzero"`
	Reason     string    `json:"reason,omitempty"`
	Message    string    `json:"message,omitempty"`
	Slot       string    `json:"slot,omitempty"`
	// Agent is the version of the node's agent (its Node's
	// fleet.AgentVersionAnnotation).
	Agent string `json:"agent,omitempty"`
}

func readFleet(ctx context.Context, c *fleetClient, args []string) ([]rolloutView, error) {
	var rollouts []v1alpha1.FlexNodeRollout
	if len(args) == 1 {
		r, err := c.rollouts.Get(ctx, args[0])
		if err != nil {
			return nil, rolloutErr("status", args[0], err)
		}
		rollouts = append(rollouts, *r)
	} else {
		list, err := c.rollouts.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, rolloutErr("status", "(all rollouts)", err)
		}
		rollouts = list.Items
	}
	kc, err := kubeclient.New(c.cfg, kubeclient.AgentLoop)
	if err != nil {
		return nil, err
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("status: list the Nodes: %w", err)
	}
	slots, err := c.slots.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("status: list the slots in %s: %w", v1alpha1.Namespace, err)
	}
	sort.Slice(rollouts, func(i, j int) bool { return rollouts[i].Name < rollouts[j].Name })
	views := []rolloutView{}
	for i := range rollouts {
		held := slotsByNode(slots.Items, rollouts[i].Name)
		noteKeptSlots(held, slots.Items, rollouts[i].Name, nodes.Items, time.Now())
		v, err := viewOf(&rollouts[i], nodes.Items, held)
		if err != nil {
			return nil, err
		}
		views = append(views, v)
	}
	return views, nil
}

func viewOf(r *v1alpha1.FlexNodeRollout, nodes []corev1.Node, slots map[string]string) (rolloutView, error) {
	v := rolloutView{Name: r.Name, Generation: r.Generation, Paused: r.Spec.Paused, ResumedAt: r.Annotations[AnnotationResumedAt], Status: r.Status, Nodes: []nodeView{}}
	if r.Spec.NodeSelector == nil {
		return v, fmt.Errorf("status %s: spec.nodeSelector is missing", r.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(r.Spec.NodeSelector)
	if err != nil {
		return v, fmt.Errorf("status %s: spec.nodeSelector: %w", r.Name, err)
	}
	for i := range nodes {
		n := &nodes[i]
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		nv := nodeView{Name: n.Name, Slot: slots[n.Name], Agent: n.Annotations[fleet.AgentVersionAnnotation]}
		rel, ok, err := fleet.ReadNodeRelease(n)
		switch {
		case err != nil:
			nv.Phase, nv.Message = "?", err.Error()
		case ok && rel.Rollout == r.Name:
			nv.Phase, nv.Generation, nv.Step, nv.Since, nv.Reason = string(rel.Phase), rel.Generation, rel.Step, rel.Since, rel.Reason
			nv.Message = strings.Join(strings.Fields(rel.Message), " ") // one table line
		}
		for _, c := range n.Status.Conditions { // a phase this build does not know yet
			if err != nil && c.Type == fleet.ConditionType {
				nv.Phase, nv.Since = c.Reason, c.LastTransitionTime.Time
			}
		}
		v.Nodes = append(v.Nodes, nv)
	}
	sort.Slice(v.Nodes, func(i, j int) bool { return v.Nodes[i].Name < v.Nodes[j].Name })
	v.status30 = statusExtrasOf(r, nodes) // issue 30 (fleet_status_issue30.go)
	return v, nil
}

func writeFleet(out io.Writer, views []rolloutView) {
	if len(views) == 0 {
		fmt.Fprintln(out, "no FlexNodeRollouts in the cluster")
		return
	}
	for i, v := range views {
		if i > 0 {
			fmt.Fprintln(out)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		s := v.Status
		fmt.Fprintln(tw, "ROLLOUT\tGENERATION\tSELECTED\tSTAGED\tUPDATING\tUPDATED\tFAILED\tPAUSED")
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\n", v.Name, v.Generation, s.Selected, s.Staged, s.Updating, s.Updated, s.Failed, v.Paused)
		_ = tw.Flush()
		if s.ObservedGeneration != v.Generation {
			fmt.Fprintf(out, "  the status is about generation %d (no agent has written generation %d's yet)\n", s.ObservedGeneration, v.Generation)
		}
		for _, c := range s.Conditions {
			fmt.Fprintf(out, "  %s=%s %s", c.Type, c.Status, c.Reason)
			if c.Message != "" {
				fmt.Fprintf(out, ": %s", c.Message)
			}
			fmt.Fprintln(out)
		}
		if len(s.ManagedElsewhere) > 0 {
			fmt.Fprintf(out, "  managed elsewhere (AKS through ARM): %s\n", strings.Join(s.ManagedElsewhere, ", "))
		}
		if v.ResumedAt != "" {
			fmt.Fprintf(out, "  last resumed at %s\n", v.ResumedAt)
		}
		writeStatus30(out, v) // issue 30 (fleet_status_issue30.go)
		writeNodes(out, v)
	}
}

func writeNodes(out io.Writer, v rolloutView) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tPHASE\tSTEP\tSINCE\tREASON\tSLOT\tAGENT")
	for _, n := range v.Nodes {
		phase, since := dash(n.Phase), "-"
		if n.Generation != 0 && n.Generation != v.Generation {
			phase += fmt.Sprintf(" (generation %d)", n.Generation)
		}
		if !n.Since.IsZero() {
			since = n.Since.UTC().Format(time.RFC3339)
		}
		reason := dash(n.Reason)
		if n.Phase == string(fleet.PhaseFailed) && n.Message != "" {
			reason += ": " + n.Message
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, phase, dash(n.Step), since, reason, dash(n.Slot), dash(n.Agent))
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

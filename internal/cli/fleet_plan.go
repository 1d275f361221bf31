package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// planFieldManager owns what fleet plan applies (server-side apply).
const planFieldManager = "aks-flex-node-fleet-plan"

// maxRolloutFile bounds -f: a rollout is a few hundred bytes.
const maxRolloutFile = 1 << 20

// fleetTimeout bounds one fleet command's requests.
const fleetTimeout = 30 * time.Second

const fleetPlanLong = `Apply a FlexNodeRollout with spec.strategy.mode Plan: every node it selects
runs the repave's preflight against the release on its own host (cgroups,
kernel modules, disk space for another side, room for the release's bundle
from its manifests before any pull, the bundle's verification, the worker
image and its contract through the node's own proxy and mirror, the new
kubelet's skew against the API server), stages the release and reports its
verdict on its FlexNodeRelease condition; nothing drains.
The rollout's status then says how many are ready ("staged 198/200: 2
failed (names, reasons)"): see aks-flex-node fleet status NAME, or
kubectl get fnr NAME -o yaml.

The file (YAML or JSON, one FlexNodeRollout) is checked here first with the
same validation the agents apply (every violation with its field path), so a
bad rollout never reaches the cluster. Whatever its spec.strategy.mode, it is
applied with mode Plan. It is created, or updated when it exists
(server-side apply as ` + planFieldManager + `).

When the verdicts are good, roll out from the staged state:

  kubectl patch fnr NAME --type merge -p '{"spec":{"strategy":{"mode":"Rollout"}}}'

  aks-flex-node fleet plan -f rollout.yaml
  aks-flex-node fleet plan -f rollout.yaml --validate-only`

// newFleetPlanCommand is `fleet plan`; the fleet group (fleet.go) adds it
// and owns --kubeconfig.
func newFleetPlanCommand(kubeconfig *string) *cobra.Command {
	var file string
	var validateOnly bool
	cmd := &cobra.Command{
		Use:   "plan -f ROLLOUT",
		Short: "Stage a release on every selected node and report each node's verdict, draining nothing",
		Long:  fleetPlanLong,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return invalidf("-f: name the rollout file (YAML or JSON)")
			}
			ro, err := loadPlan(file)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if validateOnly {
				fmt.Fprintf(w, "rollout %s in %s is valid (mode Plan)\n", ro.Name, file)
				return nil
			}
			c, err := newFleetClient(*kubeconfig)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), fleetTimeout)
			defer cancel()
			out, err := c.rollouts.Apply(ctx, ro, planFieldManager, true)
			if err != nil {
				return rolloutErr("plan", ro.Name, err)
			}
			return printPlanned(w, out)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "filename", "f", "", "the FlexNodeRollout to plan (YAML or JSON)")
	f.BoolVar(&validateOnly, "validate-only", false, "check the file and stop; nothing is sent")
	return cmd
}

// loadPlan reads one FlexNodeRollout strictly (an unknown field is an
// error, as kubectl's server-side field validation would make it), sets
// mode Plan and validates it.
func loadPlan(path string) (*v1alpha1.FlexNodeRollout, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, invalidf("-f: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRolloutFile+1))
	if err != nil {
		return nil, invalidf("-f: read %s: %v", path, err)
	}
	if len(data) > maxRolloutFile {
		return nil, invalidf("-f: %s is over %d bytes: not one rollout", path, maxRolloutFile)
	}
	ro := &v1alpha1.FlexNodeRollout{}
	if err := yaml.UnmarshalStrict(data, ro); err != nil {
		return nil, invalidf("%s: %v", path, err)
	}
	if want := v1alpha1.SchemeGroupVersion.String(); ro.APIVersion != want || ro.Kind != "FlexNodeRollout" {
		return nil, invalidf("%s: apiVersion %q, kind %q: want %s, FlexNodeRollout", path, ro.APIVersion, ro.Kind, want)
	}
	if ro.Name == "" {
		return nil, invalidf("%s: metadata.name: required", path)
	}
	ro.Spec.Strategy.Mode = v1alpha1.ModePlan
	if errs := v1alpha1.Validate(ro); len(errs) > 0 {
		var b strings.Builder
		for _, e := range errs {
			b.WriteString("\n  " + e.Error())
		}
		return nil, invalidf("%s: rollout %s is not valid:%s", path, ro.Name, b.String())
	}
	return ro, nil
}

func printPlanned(w io.Writer, ro *v1alpha1.FlexNodeRollout) error {
	_, err := fmt.Fprintf(w, `rollout %s applied in mode Plan (generation %d): each selected node stages and reports its verdict; nothing drains
  watch: aks-flex-node fleet status %s   (or: kubectl get fnr %s -o yaml)
  then:  kubectl patch fnr %s --type merge -p '{"spec":{"strategy":{"mode":"Rollout"}}}'
`, ro.Name, ro.Generation, ro.Name, ro.Name, ro.Name)
	return err
}

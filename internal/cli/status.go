package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/state"
)

// statusLong is status's help text, apart so newStatusCommand stays a
// screen of wiring.
const statusLong = `Show which slot 'current' and 'last-good' name and the version in each slot
(read by test-running it), the upgrade in flight if any (from, to,
deadline), and the last upgrade or recovery record (result, reason,
versions, time), and the agent's last repairs of the node (what it put
back, and when: a machine started, a node file restored, a unit started,
the inactive side stopped), and the node's machines: which one is active,
what each runs (Kubernetes version, worker image digest, why a repave to it
was rolled back), the repave in flight and the last one (from, to,
duration, result, reason), and the node's pod network: the mode, the CNI
config containerd loads, or what the node waits for (in networking.mode
cluster, the cluster's CNI), and the node's AKS Machine: whether start
registered it (or the agent, retrying one that failed), and the goal the
agent follows (its last decision, the applied eTag and version, its last
error), and the rollout that selects the node (the agent's record,
rollout.json): the rollout and its generation, the node's phase, step,
since when, the reason and the slot it holds, the release a rollout moved
it to, and each config key the cluster's goal sets over the config file (a
rollout's release or the AKS Machine's goal, which start runs) with its
source and the file's value; a record that cannot be read, or two goals
start would refuse, are shown there with what to do. The layout comes from
--config; an absent or unreadable config selects the default layout, and
says so on stderr.`

func newStatusCommand() *cobra.Command {
	var path, output, root string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the agent's version, upgrade slots and links, any upgrade in flight, the last upgrade or rollback, the agent's last repairs, the node's active machine and its last repave",
		Long:  statusLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			log := logger(cmd.ErrOrStderr(), 0)
			l, err := config.LookupLayout(root, path, log)
			if err != nil {
				return invalid(err)
			}
			s, err := agentupgrade.GetStatus(cmd.Context(), l)
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			repairs, err := state.Open(l).Repairs()
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			sides, err := state.Open(l).Sides()
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			network := readNodeNetwork(l, sides)
			mach, err := readMachineRegistration(l)
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			goal, err := readMachineGoal(l)
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			rollout := readRollout(l)
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), struct {
					*agentupgrade.Status
					Repairs []state.Repair         `json:"repairs"`
					Node    *state.Sides           `json:"node"`
					Network nodeNetwork            `json:"network"`
					Machine *machineapi.Record     `json:"aksMachine"`
					Goal    *machineapi.GoalRecord `json:"aksMachineGoal,omitempty"`
					Rollout rolloutStatus          `json:"rollout"`
				}{s, repairs, sides, network, mach, goal, rollout})
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "agent:      %s (version %s)\n", s.AgentBinary, orNone(s.CurrentVersion))
			fmt.Fprintf(w, "prefix:     %s\n", orNone(s.Prefix))
			for _, lk := range []struct {
				name string
				ls   agentupgrade.LinkStatus
			}{{"current", s.Current}, {"last-good", s.LastGood}} {
				fmt.Fprintf(w, "%-11s %s -> %s", lk.name+":", lk.ls.Path, orNone(lk.ls.Slot))
				if lk.ls.Error != "" {
					fmt.Fprintf(w, " (%s)", lk.ls.Error)
				}
				fmt.Fprintln(w)
			}
			for _, sl := range s.Slots {
				switch {
				case !sl.Present:
					fmt.Fprintf(w, "slot:       %s: empty\n", sl.Path)
				case sl.Error != "":
					fmt.Fprintf(w, "slot:       %s: does not run: %s\n", sl.Path, sl.Error)
				default:
					fmt.Fprintf(w, "slot:       %s: %s (sha256 %s)\n", sl.Path, sl.Version, sl.SHA256)
				}
			}
			if r := s.InFlight; r != nil {
				fmt.Fprintf(w, "in flight:  %s (%s) -> %s (%s), started %s, deadline %s\n", r.FromVersion, r.FromSlot, r.ToVersion, r.ToSlot,
					r.Started.UTC().Format(time.RFC3339), r.Deadline.UTC().Format(time.RFC3339))
			} else {
				fmt.Fprintln(w, "in flight:  none")
			}
			if r := s.Last; r != nil {
				fmt.Fprintf(w, "last:       %s %s -> %s at %s by %s: %s\n", r.Result, r.FromVersion, r.ToVersion, r.Time, r.By, r.Reason)
			} else {
				fmt.Fprintln(w, "last:       none")
			}
			printRepairs(w, repairs)
			printSides(w, l.Machines(), sides)
			printNetwork(w, network)
			printMachine(w, mach, goal)
			printRollout(w, rollout)
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().StringVar(&root, "root", "/", "root directory of the host tree")
	return cmd
}

// shownRepairs is how many of the last repairs the text shows.
const shownRepairs = 5

// printRepairs prints the last repairs, newest first.
func printRepairs(w io.Writer, repairs []state.Repair) {
	if len(repairs) == 0 {
		fmt.Fprintln(w, "repairs:    none")
		return
	}
	fmt.Fprintf(w, "repairs:    %d recorded, newest first\n", len(repairs))
	for i := len(repairs) - 1; i >= 0 && i >= len(repairs)-shownRepairs; i-- {
		r := repairs[i]
		fmt.Fprintf(w, "  %s %s: %s\n", r.At.UTC().Format(time.RFC3339), r.Kind, r.What)
	}
}

// printSides prints the node's blue/green pair and its last repave.
func printSides(w io.Writer, names [2]string, s *state.Sides) {
	if s == nil {
		fmt.Fprintln(w, "node:       not joined")
		return
	}
	fmt.Fprintf(w, "node:       active machine %s\n", orNone(s.Active))
	for _, n := range names {
		side, ok := s.Machines[n]
		switch {
		case !ok:
			fmt.Fprintf(w, "  %s: never prepared\n", n)
		default:
			fmt.Fprintf(w, "  %s: Kubernetes %s, worker image %s", n, orNone(side.KubernetesVersion), orNone(side.ImageDigest))
			if side.Failed != "" {
				fmt.Fprintf(w, ", failed: %s", side.Failed)
			}
			fmt.Fprintln(w)
		}
	}
	if r := s.InFlight; r != nil {
		fmt.Fprintf(w, "repave:     in flight %s (%s) -> %s (%s) since %s, at %s\n", r.FromMachine, r.FromVersion, r.ToMachine, r.ToVersion, r.Started.Format(time.RFC3339), r.Step)
	}
	if r := s.Last; r != nil {
		fmt.Fprintf(w, "repave:     last %s: %s (%s) -> %s (%s) at %s, took %v", r.Result, r.FromMachine, r.FromVersion, r.ToMachine, r.ToVersion, r.Started.Format(time.RFC3339), r.Duration)
		if r.Reason != "" {
			fmt.Fprintf(w, ": %s", r.Reason)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "repave:     none")
	}
}

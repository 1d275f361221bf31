package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/progress"
	"github.com/Azure/aks-flex-node/internal/state"
)

// newNodeSwitchBackCommand is `node switch-back`: the switch back a fleet
// rollback runs on each node (lifecycle.NewSwitchBack), run by hand. It
// is hidden: the supported way is `fleet rollback` (or onFailure:
// Rollback), which bounds it by the rollout's maxUnavailable and soak;
// the real-host e2e drives the same code through it.
func newNodeSwitchBackCommand() *cobra.Command {
	var path, output string
	var drainTimeout, ready, lock time.Duration
	var rules drain.Options
	cmd := &cobra.Command{
		Use:    "switch-back",
		Short:  "Switch the node back to its retained machine (kube1 <-> kube2) as it was, fetching nothing",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			data, err := config.ReadFile(path)
			if err != nil {
				return invalid(fmt.Errorf("node switch-back: %w; nothing was changed", err))
			}
			c, err := config.Parse(path, data)
			if err != nil {
				return invalid(fmt.Errorf("node switch-back: %w; nothing was changed", err))
			}
			l, err := c.Layout("/", path)
			if err != nil {
				return invalid(err)
			}
			store := state.Open(l)
			applied, err := store.Applied()
			if err != nil || applied == nil {
				return fmt.Errorf("node switch-back: this host has not joined (no %s/%s): %v", l.StateDir(), state.AppliedFile, err)
			}
			sides, err := store.Sides()
			if err != nil {
				return fmt.Errorf("node switch-back: %w", err)
			}
			stdout := cmd.OutOrStdout()
			if output == "json" {
				stdout = cmd.ErrOrStderr() // stdout is the record's
			}
			if c, err = goalConfig(c, l, "node switch-back", stdout); err != nil {
				return fmt.Errorf("node switch-back: %w; nothing was changed", err)
			}
			con := progress.NewConsole("node switch-back", stdout, cmd.ErrOrStderr(), levelOf(c), false)
			r, err := lifecycle.NewSwitchBack(lifecycle.RepaveOptions{
				Options: lifecycle.Options{Layout: l, Config: c, ConfigFile: path, ConfigData: data,
					Log: con.Log, Progress: con.Progress, Observer: con.Observer, Lock: lockWait(cmd, l, lock), Drain: rules},
				DrainTimeout: drainTimeout, ReadyTimeout: ready,
			}, *applied, sides)
			if err != nil {
				return fmt.Errorf("node switch-back: %w", err)
			}
			rec, err := r.Run(cmd.Context(), lifecycle.Preflight{Env: preflightEnv(c, path, l), Report: con.Progress})
			con.Finish(err)
			// Counted, not estimated: a switch back hashes (and fetches)
			// no bundle byte.
			fmt.Fprintf(cmd.ErrOrStderr(), "node switch-back: %d bundle bytes hashed\n", artifact.BytesHashed())
			if output == "json" && rec != nil {
				if jerr := writeJSON(cmd.OutOrStdout(), rec); jerr != nil && err == nil {
					err = jerr
				}
			}
			if err != nil {
				return fmt.Errorf("node switch-back: %w", err)
			}
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	fl := cmd.Flags()
	fl.DurationVar(&drainTimeout, "drain-timeout", 5*time.Minute, "how long the drain may take before the switch back gives up (and uncordons)")
	addDrainFlags(fl, &rules)
	fl.DurationVar(&ready, "ready-timeout", 3*time.Minute, "how long the retained machine has to be Ready before the switch back rolls back")
	fl.StringVarP(&output, "output", "o", "text", "output format: text or json (the switch back's record)")
	addLockFlag(cmd, &lock)
	return cmd
}

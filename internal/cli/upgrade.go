package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/progress"
	"github.com/Azure/aks-flex-node/internal/systemd"
)

func newAgentUpgradeCommand() *cobra.Command {
	var path, output string
	var o agentupgrade.Options
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "agent-upgrade",
		Short: "Upgrade the agent binary blue/green, with automatic rollback",
		Long: `Install a new agent binary into the inactive upgrade slot and switch to it:

  1. stream the candidate (--binary PATH, or --url URL: https, or http on
     loopback) into the lib dir while computing its SHA-256, refuse a
     mismatch, and test-run it (version --output json must report a version)
     before any link names it;
  2. refuse a version that is not newer than the current one unless
     --allow-downgrade, and refuse while another upgrade is in flight;
  3. record the upgrade in flight (from, to, deadline) in the state dir;
  4. point the 'current' link at the new slot (one atomic rename) and
     restart aks-flex-node-agent.service;
  5. wait until the new agent confirms itself healthy (it then moves
     'last-good' to its slot), or until aks-flex-node-recovery.service rolls
     back because it crashed, exited non-zero or missed the deadline.

Exit code 0: upgraded (or already at that binary). 1: rolled back, or the
upgrade failed. 2: refused (bad checksum, downgrade, usage).

--preflight does steps 1 and 2, prints the plan and changes nothing.

agent-upgrade holds the node lock for its whole run, as start and reset do:
while one of them runs it waits, up to --lock-timeout, naming the holder.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if o.SHA256 == "" {
				return invalidf("--sha256 is required: the expected SHA-256 of the candidate (sha256sum prints it)")
			}
			log := logger(cmd.ErrOrStderr(), 0)
			l, err := config.LookupLayout("/", path, log)
			if err != nil {
				return invalid(err)
			}
			con := progress.NewConsole("agent-upgrade", cmd.OutOrStdout(), cmd.ErrOrStderr(), 0, output == "json")
			o.Manager = systemd.NewManager("/")
			o.Log, o.Observer = con.Log, con.Observer
			o.Lock = lockWait(cmd, l, lockTimeout)
			out, err := agentupgrade.Run(cmd.Context(), l, o)
			con.Finish(err)
			var re *agentupgrade.RefusedError
			if errors.As(err, &re) {
				return invalid(err)
			}
			if out != nil {
				if output == "json" {
					if werr := writeJSON(cmd.OutOrStdout(), out); werr != nil {
						return werr
					}
				} else {
					printUpgrade(cmd, out, o.Preflight)
				}
			}
			if err != nil {
				return fmt.Errorf("agent-upgrade: %w", err)
			}
			return nil
		},
	}
	addConfigFlag(cmd, &path)
	f := cmd.Flags()
	f.StringVar(&o.Binary, "binary", "", "candidate binary on this host")
	f.StringVar(&o.URL, "url", "", "candidate binary URL (https; http only on loopback)")
	f.StringVar(&o.SHA256, "sha256", "", "expected SHA-256 of the candidate (required)")
	f.BoolVar(&o.Preflight, "preflight", false, "verify and test-run the candidate, print the plan, change nothing")
	f.BoolVar(&o.AllowDowngrade, "allow-downgrade", false, "install a candidate that is not newer than the current agent")
	f.DurationVar(&o.Deadline, "deadline", agentupgrade.DefaultDeadline, "how long the new agent has to confirm itself healthy before recovery rolls back")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	addLockFlag(cmd, &lockTimeout)
	return cmd
}

func printUpgrade(cmd *cobra.Command, out *agentupgrade.Outcome, preflight bool) {
	w := cmd.OutOrStdout()
	p := out.Plan
	switch {
	case p.Unchanged:
		fmt.Fprintf(w, "agent-upgrade: %s is already the current agent (%s, slot %s); nothing to do\n", p.Source, p.FromVersion, p.FromSlot)
	case preflight:
		fmt.Fprintf(w, "agent-upgrade --preflight: would install %s (sha256 %s)\n  %s (%s) -> %s (%s)", p.Source, p.SHA256, p.FromVersion, p.FromSlot, p.ToVersion, p.ToSlot)
		if p.Downgrade {
			fmt.Fprint(w, " [downgrade]")
		}
		fmt.Fprintln(w)
	case out.Result != nil:
		fmt.Fprintf(w, "agent-upgrade: %s: %s (%s) -> %s (%s): %s\n", out.Result.Result, p.FromVersion, p.FromSlot, p.ToVersion, p.ToSlot, out.Result.Reason)
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

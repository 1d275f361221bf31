package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/nodelock"
)

// addLockFlag adds --lock-timeout to a command that changes the node.
func addLockFlag(cmd *cobra.Command, timeout *time.Duration) {
	cmd.Flags().DurationVar(timeout, "lock-timeout", nodelock.DefaultWait,
		"how long to wait for the node lock while another start, reset, node upgrade or agent-upgrade holds it (0: fail at once)")
}

// lockWait is how command waits for the node lock of l: up to timeout,
// saying on stderr who holds it when the wait starts and whenever the
// holder changes.
func lockWait(cmd *cobra.Command, l layout.Layout, timeout time.Duration) nodelock.Wait {
	return nodelock.Wait{Timeout: timeout, Notify: func(h nodelock.Holder) {
		ago := ""
		if h.PID != 0 {
			ago = fmt.Sprintf(" (%v ago)", time.Since(h.Since).Round(time.Second))
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "aks-flex-node: %s: waiting for the node lock %s, held by %s%s; giving up after %v (--lock-timeout)\n",
			cmd.Name(), nodelock.Path(l), h, ago, timeout)
	}}
}

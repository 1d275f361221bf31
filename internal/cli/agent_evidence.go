package cli

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/supportbundle"
)

// rolloutEvidence is how the agent gathers a failed rollout node's
// evidence (issue 30 item 7): the support bundle's journal reader and the
// full debug bundle, as `debug bundle` writes it. It is passed in from
// here because supportbundle reaches the daemon through diag.
func rolloutEvidence(l layout.Layout) daemon.Evidence {
	o := supportbundle.Options{Layout: l}
	return daemon.Evidence{
		Journal: func(ctx context.Context, side, unit string, lines int, maxBytes int64) ([]byte, int, error) {
			return supportbundle.JournalTail(ctx, o, side, unit, lines, maxBytes)
		},
		Bundle: func(ctx context.Context, path string) error {
			b := o
			b.Output = path
			_, err := supportbundle.Collect(ctx, b)
			return err
		},
	}
}

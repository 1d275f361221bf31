package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/task"
)

type stageNodeComponents struct {
	stager *artifact.Stager
	staged *task.Output[artifact.Staged]
}

// StageNodeComponents returns the task that makes the node components a
// verified bundle on the host (artifact.Stager.Stage) and hands it to
// install-node-components through staged. It runs first: a bundle that
// cannot be had or does not verify stops start before anything else on
// the host changes, even when preflight's check of it was ignored.
func StageNodeComponents(s *artifact.Stager, staged *task.Output[artifact.Staged]) task.Task {
	return &stageNodeComponents{stager: s, staged: staged}
}

func (t *stageNodeComponents) Name() string { return "stage-node-components" }

func (t *stageNodeComponents) Do(ctx context.Context) (task.Result, error) {
	st, err := t.stager.Stage(ctx)
	if err != nil {
		return task.Result{}, err
	}
	t.staged.Set(st)
	detail := st.Dir
	if st.Layout == artifact.LayoutUpstream {
		detail += " (upstream's layout)"
	}
	return task.Result{Changed: st.Pulled, Detail: detail}, nil
}

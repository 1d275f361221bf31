package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/task"
)

type installNodeComponents struct {
	stager  *artifact.Stager
	staged  *task.Output[artifact.Staged]
	changed *task.Output[bool]
}

// InstallNodeComponents returns the task that installs the bundle
// stage-node-components staged into the machine (artifact.Stager.Install)
// and reports through changed whether any installed file changed, so that
// start-machine restarts the node in a running machine.
func InstallNodeComponents(s *artifact.Stager, staged *task.Output[artifact.Staged], changed *task.Output[bool]) task.Task {
	return &installNodeComponents{stager: s, staged: staged, changed: changed}
}

func (t *installNodeComponents) Name() string { return "install-node-components" }

func (t *installNodeComponents) Do(ctx context.Context) (task.Result, error) {
	st, err := t.staged.Get()
	if err != nil {
		return task.Result{}, err
	}
	res, err := t.stager.Install(ctx, st.Dir)
	t.changed.Set(res.Changed)
	return res, err
}

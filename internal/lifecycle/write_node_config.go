package lifecycle

import (
	"context"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/task"
)

type writeNodeConfig struct {
	machine    Machine
	config     *config.Config
	cgroupMode string
	changed    *task.Output[bool]
	sums       *task.Output[map[string]string]
}

// WriteNodeConfig returns the task that writes containerd's, the kubelet's
// and CNI's config and units into the machine (node.Write) for a host in
// cgroupMode ("v1" or "v2"), and reports through changed whether any of
// them changed, so that start-machine restarts the node in a running
// machine, and through sums the checksums of what it rendered, which
// save-state records for the agent's drift repair.
func WriteNodeConfig(m Machine, c *config.Config, cgroupMode string, changed *task.Output[bool], sums *task.Output[map[string]string]) task.Task {
	return &writeNodeConfig{machine: m, config: c, cgroupMode: cgroupMode, changed: changed, sums: sums}
}

func (t *writeNodeConfig) Name() string { return "write-node-config" }

func (t *writeNodeConfig) Do(ctx context.Context) (task.Result, error) {
	opts := node.HostOptions(t.cgroupMode)
	changed, _, err := node.Write(t.machine.Root(), t.config, opts)
	t.changed.Set(changed)
	if err != nil {
		return task.Result{Changed: changed}, err
	}
	files, err := node.Render(t.config, opts)
	if err != nil {
		return task.Result{Changed: changed}, err
	}
	t.sums.Set(node.Checksums(files))
	return task.Result{Changed: changed}, nil
}

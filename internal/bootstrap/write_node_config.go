package bootstrap

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
}

// WriteNodeConfig returns the task that writes containerd's, the kubelet's
// and CNI's config and units into the machine (node.Write) for a host in
// cgroupMode ("v1" or "v2"), and reports through changed whether any of
// them changed, so that start-machine restarts the node in a running
// machine.
func WriteNodeConfig(m Machine, c *config.Config, cgroupMode string, changed *task.Output[bool]) task.Task {
	return &writeNodeConfig{machine: m, config: c, cgroupMode: cgroupMode, changed: changed}
}

func (t *writeNodeConfig) Name() string { return "write-node-config" }

func (t *writeNodeConfig) Do(ctx context.Context) (task.Result, error) {
	// The knobs that come from the host rather than the config.
	opts := node.Options{CgroupV1: t.cgroupMode != "v2", RestrictOOMScoreAdj: node.DetectRestrictOOMScoreAdj()}
	changed, _, err := node.Write(t.machine.Root(), t.config, opts)
	t.changed.Set(changed)
	return task.Result{Changed: changed}, err
}

package lifecycle

import (
	"context"
	"time"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

type saveState struct {
	host       Host
	machine    Machine
	config     *config.Config
	configFile string
	configData []byte
	image      *task.Output[ImageChoice]
	nodeSums   *task.Output[map[string]string]
}

// SaveState returns the task that records what start applied (state.Applied:
// the config file and its digest, the prefix, the node and machine, the
// worker image provision-machine chose and the digest it resolved to, the
// versions, and the checksums of the node files write-node-config
// rendered, which the agent keeps the machine at).
func SaveState(h Host, m Machine, c *config.Config, configFile string, configData []byte, image *task.Output[ImageChoice], nodeSums *task.Output[map[string]string]) task.Task {
	return &saveState{host: h, machine: m, config: c, configFile: configFile, configData: configData, image: image, nodeSums: nodeSums}
}

func (t *saveState) Name() string { return "save-state" }

func (t *saveState) Do(ctx context.Context) (task.Result, error) {
	l := t.host.Layout
	img, err := t.image.Get()
	if err != nil {
		return task.Result{}, err
	}
	sums, err := t.nodeSums.Get()
	if err != nil {
		return task.Result{}, err
	}
	digest, _ := machine.ImageDigest(l, t.machine.Name)
	store := state.Open(l)
	if err := t.host.track(l.StateDir()+"/"+state.AppliedFile, l.StateDir()+"/"+state.AppliedFile+".sha256"); err != nil {
		return task.Result{}, err
	}
	changed, err := store.SaveApplied(state.Applied{
		ConfigFile:        t.configFile,
		ConfigSHA256:      state.ConfigDigest(t.configData),
		Prefix:            l.Prefix(),
		NodeName:          t.config.Agent.NodeName,
		Machine:           t.machine.Name,
		Image:             img.Ref,
		ImageDigest:       digest,
		KubernetesVersion: t.config.Components.Kubernetes,
		ContainerdVersion: t.config.Components.Containerd,
		RuncVersion:       t.config.Components.Runc,
		AgentVersion:      buildinfo.Version,
		AppliedAt:         time.Now().UTC(),
		NodeFiles:         sums,
	})
	return task.Result{Changed: changed}, err
}

package lifecycle

import (
	"context"
	"log/slog"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/task"
)

type provisionMachine struct {
	host        Host
	machine     Machine
	provisioner *machine.Provisioner
	image       *WorkerImage
	staged      *task.Output[artifact.Staged]
	chosen      *task.Output[ImageChoice]
	log         *slog.Logger
}

// ProvisionMachine returns the task that makes the machine's rootfs the
// worker image w chooses (bootstrap.ociImage, the staged bundle's image,
// or upstream's default), unless the rootfs already holds that image, and
// hands the choice to save-state through chosen. p pulls under the
// transport policy with the Docker config's credentials, makes the
// rootfs from its layer cache, and unpacks the image its Inspect
// (preflight's worker-image check) resolved, if it was asked.
func ProvisionMachine(h Host, m Machine, p *machine.Provisioner, w *WorkerImage, staged *task.Output[artifact.Staged], chosen *task.Output[ImageChoice], log *slog.Logger) task.Task {
	return &provisionMachine{host: h, machine: m, provisioner: p, image: w, staged: staged, chosen: chosen, log: log}
}

func (t *provisionMachine) Name() string { return "provision-machine" }

func (t *provisionMachine) Do(ctx context.Context) (task.Result, error) {
	st, err := t.staged.Get()
	if err != nil {
		return task.Result{}, err
	}
	c, err := t.image.Staged(ctx, st)
	if err != nil {
		return task.Result{}, err
	}
	l := t.host.Layout
	if err := t.host.track(l.MachineDir(t.machine.Name), l.MachineStateDir()); err != nil {
		return task.Result{}, err
	}
	task.Wait(ctx, "worker image "+c.Ref+" to be unpacked into machine "+t.machine.Name)
	res, err := t.provisioner.Provision(ctx, l, t.machine.Name, c.Ref, t.log)
	if err == nil {
		t.chosen.Set(c)
		res.Detail = "worker image from " + c.Source + ": " + res.Detail
	}
	return res, err
}

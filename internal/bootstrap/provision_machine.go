package bootstrap

import (
	"context"
	"errors"
	"log/slog"

	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/task"
)

type provisionMachine struct {
	host        Host
	machine     Machine
	provisioner *machine.Provisioner
	image       string
	configFile  string
	log         *slog.Logger
}

// ProvisionMachine returns the task that unpacks the worker image
// (bootstrap.ociImage, named in configFile) into the machine's rootfs
// with p, unless the rootfs already holds that image. p pulls under the
// transport policy and unpacks the image its Resolve (preflight's
// worker-image check) resolved, if it was asked.
func ProvisionMachine(h Host, m Machine, p *machine.Provisioner, image, configFile string, log *slog.Logger) task.Task {
	return &provisionMachine{host: h, machine: m, provisioner: p, image: image, configFile: configFile, log: log}
}

func (t *provisionMachine) Name() string { return "provision-machine" }

func (t *provisionMachine) Do(ctx context.Context) (task.Result, error) {
	if t.image == "" {
		return task.Result{}, errors.New("bootstrap.ociImage is not set in " + t.configFile + ": name the worker image (registry reference or oci-layout:///dir:tag)")
	}
	l := t.host.Layout
	if err := t.host.track(l.MachineDir(t.machine.Name), l.MachineStateDir()); err != nil {
		return task.Result{}, err
	}
	task.Wait(ctx, "worker image "+t.image+" to be unpacked into machine "+t.machine.Name)
	return t.provisioner.Provision(ctx, l, t.machine.Name, t.image, t.log)
}

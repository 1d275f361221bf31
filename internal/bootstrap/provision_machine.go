package bootstrap

import (
	"context"
	"errors"
	"log/slog"

	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/task"
)

type provisionMachine struct {
	host       Host
	machine    Machine
	image      string
	configFile string
	log        *slog.Logger
}

// ProvisionMachine returns the task that unpacks the worker image
// (bootstrap.ociImage, named in configFile) into the machine's rootfs,
// unless the rootfs already holds that image.
func ProvisionMachine(h Host, m Machine, image, configFile string, log *slog.Logger) task.Task {
	return &provisionMachine{host: h, machine: m, image: image, configFile: configFile, log: log}
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
	return machine.Provision(ctx, l, t.machine.Name, t.image, t.log)
}

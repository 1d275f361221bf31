package bootstrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/task"
)

type writeNspawnFiles struct {
	host    Host
	machine Machine
	opts    machine.Options
}

// WriteNspawnFiles returns the task that writes the machine's .nspawn file
// and its systemd-nspawn@ drop-in (machine.WriteFiles).
func WriteNspawnFiles(h Host, m Machine, o machine.Options) task.Task {
	return &writeNspawnFiles{host: h, machine: m, opts: o}
}

func (t *writeNspawnFiles) Name() string { return "write-nspawn-files" }

func (t *writeNspawnFiles) Do(ctx context.Context) (task.Result, error) {
	l, name := t.host.Layout, t.machine.Name
	// The .nspawn dir is ours only if we are the ones creating it.
	if _, err := os.Stat(l.OnRoot(l.NspawnDir())); errors.Is(err, os.ErrNotExist) {
		if err := t.host.track(l.NspawnDir()); err != nil {
			return task.Result{}, err
		}
	}
	dropIn := l.MachineDropIn(name)
	if err := t.host.track(l.NspawnFile(name), filepath.Dir(dropIn), dropIn); err != nil {
		return task.Result{}, err
	}
	changed, err := machine.WriteFiles(l, name, t.opts)
	return task.Result{Changed: changed}, err
}

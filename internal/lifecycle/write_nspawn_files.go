package lifecycle

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/identity"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/task"
)

type writeNspawnFiles struct {
	host    Host
	machine Machine
	opts    machine.Options
	changed *task.Output[bool]
}

// WriteNspawnFiles returns the task that writes the machine's .nspawn file
// and its systemd-nspawn@ drop-in (machine.WriteFiles), and reports
// through changed whether either changed: their settings (binds among
// them) apply when the machine boots, so start-machine reboots a running
// machine then.
func WriteNspawnFiles(h Host, m Machine, o machine.Options, changed *task.Output[bool]) task.Task {
	return &writeNspawnFiles{host: h, machine: m, opts: o, changed: changed}
}

// IdentityBinds are the host dirs a node that joins with an Azure
// identity needs inside its machine: the agent's lib dir, read-only (the
// credential plugin is its current slot, so an agent upgrade upgrades
// it); the identity dir (what the plugin signs in with, and the token
// cache it shares with the host); and for Arc the dir where the Arc agent
// writes the key its challenge names. None with a bootstrap token.
func IdentityBinds(l layout.Layout, c *config.Config) []machine.Bind {
	if !c.Azure.Identity() {
		return nil
	}
	binds := []machine.Bind{
		{Source: l.LibDir(), Dest: node.HostAgentLibDir, ReadOnly: true},
		{Source: l.IdentityDir(), Dest: node.HostIdentityDir},
	}
	if c.Azure.Method() == config.MethodArc {
		binds = append(binds, machine.Bind{Source: identity.ArcKeyDir, Dest: identity.ArcKeyDir, ReadOnly: true})
	}
	return binds
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
	t.changed.Set(changed)
	return task.Result{Changed: changed}, err
}

package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/swap"
	"github.com/Azure/aks-flex-node/internal/task"
)

type restoreSwap struct {
	layout layout.Layout
	run    Runner
}

// RestoreSwap returns reset's task that undoes what disable-swap did to
// keep swap off: the fstab lines it commented are uncommented, the unit
// files it moved aside put back and the units it masked (its records in
// the state dir) unmasked. Swap is not
// turned on now; the next boot does, as before the join. It runs before
// remove-tracked-paths, which removes the record.
func RestoreSwap(l layout.Layout, run Runner) task.Task { return &restoreSwap{layout: l, run: run} }

func (t *restoreSwap) Name() string { return "restore-swap" }

func (t *restoreSwap) Do(ctx context.Context) (task.Result, error) {
	l := t.layout
	n, err := swap.RestoreFstab(l.Root())
	if err != nil {
		return task.Result{}, err
	}
	var did []string
	if n > 0 {
		did = append(did, fmt.Sprintf("%d %s line(s) restored", n, swap.Fstab))
	}
	stateDir := l.OnRoot(l.StateDir())
	units, err := swap.Masked(stateDir)
	if err != nil {
		return task.Result{}, err
	}
	if len(units) == 0 || l.Root() != "/" {
		return task.Result{Changed: len(did) > 0, Detail: strings.Join(did, "; ")}, nil
	}
	// A unit file moved aside goes back over its mask link in one
	// rename; unmask then finds no link there and leaves it.
	back, err := swap.PutBack(stateDir, l.OnRoot(l.SystemdUnitDir()))
	if err != nil {
		return task.Result{}, err
	}
	if len(back) > 0 {
		did = append(did, "put back the unit file of "+strings.Join(back, ","))
	}
	run := t.run
	if run == nil {
		run = execRunner
	}
	for _, u := range units {
		if out, err := run(ctx, "systemctl", "unmask", u); err != nil {
			return task.Result{}, fmt.Errorf("unmask %s: %v: %s", u, err, bytes.TrimSpace(out))
		}
	}
	did = append(did, "unmasked "+strings.Join(units, ","))
	if len(back) > 0 {
		// unmask reloads systemd only when it removed a link.
		if out, err := run(ctx, "systemctl", "daemon-reload"); err != nil {
			return task.Result{}, fmt.Errorf("daemon-reload: %v: %s", err, bytes.TrimSpace(out))
		}
	}
	return task.Result{Changed: true, Detail: strings.Join(did, "; ")}, nil
}

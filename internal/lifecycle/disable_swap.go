package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/Azure/aks-flex-node/internal/swap"
	"github.com/Azure/aks-flex-node/internal/task"
)

type disableSwap struct{ host Host }

// DisableSwap returns the task that turns swap off when /proc/swaps lists
// any device, and keeps it off across reboots: the fstab lines that turn
// it on at boot are commented with swap.Marker and, on a live host, the
// swap units systemd knows are masked (recorded first, in the state dir;
// a unit file of an admin's in /etc/systemd/system, which a mask cannot
// replace, moved aside first, recorded too).
// The kubelet refuses to run with swap on. reset's restore-swap undoes
// exactly what this did.
func DisableSwap(h Host) task.Task { return &disableSwap{host: h} }

func (t *disableSwap) Name() string { return "disable-swap" }

func (t *disableSwap) Do(ctx context.Context) (task.Result, error) {
	data, err := os.ReadFile(filepath.Join(t.host.procDir(), "swaps"))
	if err != nil {
		return task.Result{}, fmt.Errorf("read swaps: %w", err)
	}
	var did []string
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) > 1 {
		if out, err := t.host.run(ctx, "swapoff", "-a"); err != nil {
			return task.Result{}, fmt.Errorf("swapoff -a: %v: %s", err, bytes.TrimSpace(out))
		}
		did = append(did, fmt.Sprintf("%d swap device(s) off", len(lines)-1))
	}
	l := t.host.Layout
	commented, err := swap.CommentFstab(l.Root())
	if err != nil {
		return task.Result{}, err
	}
	if len(commented) > 0 {
		did = append(did, fmt.Sprintf("%d %s line(s) commented", len(commented), swap.Fstab))
	}
	masked, err := t.mask(ctx)
	if err != nil {
		return task.Result{}, err
	}
	if len(masked) > 0 {
		did = append(did, "masked "+strings.Join(masked, ","))
	}
	return task.Result{Changed: len(did) > 0, Detail: strings.Join(did, "; ")}, nil
}

// mask masks the swap units a live host's systemd has loaded, recording
// them first. Offline (--root) there is no systemd to ask; the fstab is
// what boots the tree with swap.
func (t *disableSwap) mask(ctx context.Context) ([]string, error) {
	l := t.host.Layout
	if l.Root() != "/" {
		return nil, nil
	}
	// The units systemd loaded (fstab's, generated) and the unit files
	// it has (an admin's, enabled for the next boot even where this
	// systemd loads no swap unit, as in a container).
	var units []string
	for _, list := range []string{"list-units", "list-unit-files"} {
		out, err := t.host.run(ctx, "systemctl", list, "--type=swap", "--all", "--plain", "--no-legend", "--full")
		// list-unit-files exits 1 when no unit file matches, saying
		// nothing; a real failure says why.
		if err != nil && !(list == "list-unit-files" && len(bytes.TrimSpace(out)) == 0) {
			return nil, fmt.Errorf("list swap units: systemctl %s: %v: %s", list, err, bytes.TrimSpace(out))
		}
		for _, u := range swap.Units(out) {
			if !slices.Contains(units, u) {
				units = append(units, u)
			}
		}
	}
	if len(units) == 0 {
		return nil, nil
	}
	if err := t.host.track(l.StateDir()+"/"+swap.MaskedFile, l.StateDir()+"/"+swap.MovedFile); err != nil {
		return nil, err
	}
	stateDir := l.OnRoot(l.StateDir())
	if err := swap.RecordMasked(stateDir, units); err != nil {
		return nil, err
	}
	for _, u := range units {
		// A unit file of that name in /etc/systemd/system (an admin's
		// swap unit) makes mask refuse: it is moved aside first.
		if _, err := swap.MoveAside(stateDir, l.OnRoot(l.SystemdUnitDir()), u); err != nil {
			return nil, err
		}
		if out, err := t.host.run(ctx, "systemctl", "mask", u); err != nil {
			return nil, fmt.Errorf("mask %s: %v: %s", u, err, bytes.TrimSpace(out))
		}
	}
	return units, nil
}

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// A switch back (issue 30's fleet rollback) is a repave to the side the
// node kept from before its last repave (kube1/kube2), as it is: nothing
// is fetched, unpacked, installed or rendered. It runs with Repave's
// runner, node lock, sides record, drain, rollback and report; only its
// phases and preflight are its own.

// hostCgroupMode detects the host's cgroup mode; tests on a temp root,
// which has no mount table, replace it.
var hostCgroupMode = machine.HostCgroupMode

// SourceRetained is the worker image's source on a switch back.
const SourceRetained = "the retained side"

// NotRetainedError is a switch back refused before anything changed: the
// other side is not one the node can serve on again.
type NotRetainedError struct {
	Machine string
	Why     string
}

func (e *NotRetainedError) Error() string {
	return fmt.Sprintf("switch back: machine %s is not a retained side to switch back to: %s; roll forward instead (a rollout, or node upgrade, prepares it again)", e.Machine, e.Why)
}

// switchBack is what a switch back adds to its Repave: the retained side
// as the sides record described it when the switch back was made.
type switchBack struct {
	side state.Side
}

// NewSwitchBack prepares a switch back of the node applied describes
// (serving on applied.Machine) to the other machine, which sides must
// record as retained: prepared, not failed, its Kubernetes version known,
// its rootfs on disk (a *NotRetainedError otherwise). o.Config is the
// config the node runs by; the switch back runs it with the retained
// side's version and worker image (o.KubernetesVersion and o.Image are
// ignored), and that is what its finish saves as the applied state.
func NewSwitchBack(o RepaveOptions, applied state.Applied, sides *state.Sides) (*Repave, error) {
	to := o.Layout.OtherMachine(applied.Machine)
	side, err := retainedSide(o.Layout, sides, applied.Machine, to)
	if err != nil {
		return nil, err
	}
	o.KubernetesVersion, o.Image = side.KubernetesVersion, ""
	if o.Config.Bootstrap.OCIImage != "" {
		// The config names the image (the file or a release): the
		// retained side's replaces it. Without one the side ran its
		// bundle's image, which side.Image records all the same.
		o.Image = side.Image
	}
	r := NewRepave(o, applied)
	r.back = &switchBack{side: side}
	r.start.label = "switch back"
	r.chosen.Set(ImageChoice{Ref: side.Image, Source: SourceRetained})
	return r, nil
}

// retainedSide is the side machine to of sides when the node (serving on
// from) can switch back to it.
func retainedSide(l layout.Layout, sides *state.Sides, from, to string) (state.Side, error) {
	refuse := func(why string, args ...any) (state.Side, error) {
		return state.Side{}, &NotRetainedError{Machine: to, Why: fmt.Sprintf(why, args...)}
	}
	if sides == nil {
		return refuse("the node has no sides record: it has never been repaved, so it keeps no other side")
	}
	if sides.Active != "" && sides.Active != from {
		return refuse("the sides record says machine %s serves, the applied state says %s", sides.Active, from)
	}
	side, ok := sides.Machines[to]
	switch {
	case !ok:
		return refuse("it was never prepared")
	case side.Failed != "":
		return refuse("the last repave to it failed (%s)", side.Failed)
	case side.KubernetesVersion == "":
		return refuse("the sides record does not say which Kubernetes version it runs")
	}
	dir := machine.Dir(l, to)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return refuse("its rootfs %s is not there (%v)", dir, err)
	}
	return side, nil
}

// verb says what the run does, for its progress lines.
func (r *Repave) verb() string {
	if r.back != nil {
		return "switched back"
	}
	return "repaved"
}

// backPhases are a switch back's phases after preflight: drain (as a
// repave's), switch (the serving side stops and hands the node's identity
// to the retained one, which boots as it was and must be Ready at its own
// version; a failure rolls back, as a repave's does) and finish (the
// applied state says the retained side's version and image again).
func (r *Repave) backPhases(cgroupMode string) []task.Phase {
	o, c, m := r.opts, r.start.opts.Config, r.to
	name := c.Agent.NodeName
	asIs := task.NewOutput[bool]("")
	asIs.Set(false) // the retained side boots with its own settings
	sums := task.NewOutput[map[string]string]("note-node-files")
	return []task.Phase{
		r.drainPhase(),
		{Name: SwitchPhase, Tasks: []task.Task{
			StopActiveMachine(r.from, r.client, name, r.heartbeat),
			HandOverIdentity(r.from, m),
			WritePodNetwork(m, c, o.ReadyTimeout, r.start.nodeProgress),
			StartMachine(m, asIs),
			WaitNodeVersion(m, r.client, name, c.Components.Kubernetes, o.ReadyTimeout, r.heartbeat, r.start.nodeProgress),
		}},
		{Name: "finish", Tasks: append([]task.Task{NoteNodeFiles(c, cgroupMode, sums)}, r.afterCommit(
			SaveState(r.start.host, m, c, o.ConfigFile, o.ConfigData, r.chosen, sums),
			r.uncordon(),
		)...)},
	}
}

// backPreflight is a switch back's preflight: the retained side is still
// the one the switch back was made for (read again under the node lock),
// then preflight.SwitchBackChecks.
func (r *Repave) backPreflight(ctx context.Context, pf Preflight, began time.Time) error {
	sides, err := state.Open(r.opts.Layout).Sides()
	if err != nil {
		return err
	}
	side, err := retainedSide(r.opts.Layout, sides, r.from.Name, r.to.Name)
	if err != nil {
		return err
	}
	if side != r.back.side {
		return errors.Join(ErrStateMoved, fmt.Errorf("machine %s's record changed since the switch back was made", r.to.Name))
	}
	r.wireServerVersion(pf.Env)
	return runPreflight(ctx, preflight.SwitchBackChecks(pf.Env), pf, r.opts.Log, began)
}

type noteNodeFiles struct {
	config     *config.Config
	cgroupMode string
	sums       *task.Output[map[string]string]
}

// NoteNodeFiles returns the task that hands save-state the checksums of
// the node files config c renders (node.Render), without writing any:
// the retained side was written with them when it served, and the
// agent's drift repair keeps it at what the applied state records.
func NoteNodeFiles(c *config.Config, cgroupMode string, sums *task.Output[map[string]string]) task.Task {
	return &noteNodeFiles{config: c, cgroupMode: cgroupMode, sums: sums}
}

func (t *noteNodeFiles) Name() string { return "note-node-files" }

func (t *noteNodeFiles) Do(context.Context) (task.Result, error) {
	files, err := node.Render(t.config, node.HostOptions(t.cgroupMode))
	if err != nil {
		return task.Result{}, err
	}
	t.sums.Set(node.Checksums(files))
	return task.Result{Detail: fmt.Sprintf("%d node files", len(files))}, nil
}

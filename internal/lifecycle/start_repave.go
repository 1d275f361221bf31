package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/state"
)

// repaveDue returns the repave a start must run instead of converging the
// active machine in place, and why: the node has joined and the config
// names another Kubernetes version, or another worker image (by
// reference, or a reference that now resolves to another digest), than
// the active machine runs. Installing either into the running machine
// would change it under the node with no drain and no way back; a repave
// prepares the other machine and switches to it. nil when nothing the
// active machine runs changed, and on a host with no node yet: start
// converges as it always did. Read under the node lock.
func (s *Start) repaveDue(ctx context.Context) (*Repave, string) {
	l, c := s.opts.Layout, s.opts.Config
	store := state.Open(l)
	// An unreadable state is preflight's to report (existing-deployment,
	// node-version), as on any start.
	applied, err := store.Applied()
	if err != nil || applied == nil {
		return nil, ""
	}
	sides, err := store.Sides()
	if err != nil || sides == nil || sides.Active != applied.Machine {
		return nil, ""
	}
	why := s.changeFrom(ctx, sides.Active, sides.Machines[sides.Active])
	if why == "" {
		return nil, ""
	}
	r := NewRepave(RepaveOptions{Options: s.opts, KubernetesVersion: c.Components.Kubernetes,
		DrainTimeout: s.opts.DrainTimeout, ReadyTimeout: s.opts.JoinTimeout}, *applied)
	r.start.label = s.label
	// What the image resolved to here is what the new side unpacks.
	r.start.provisioner = s.provisioner
	return r, why
}

// changeFrom says what the config changes for machine m, which runs side;
// "" for nothing a repave is for.
func (s *Start) changeFrom(ctx context.Context, m string, side state.Side) string {
	c := s.opts.Config
	if side.KubernetesVersion != "" && !sameVersion(side.KubernetesVersion, c.Components.Kubernetes) {
		return fmt.Sprintf("components.kubernetes is %s; machine %s runs %s", c.Components.Kubernetes, m, side.KubernetesVersion)
	}
	// The image is judged by the same choice provision-machine makes;
	// one that cannot be chosen or resolved is the worker-image check's
	// to refuse.
	choice, err := s.image.Choose(ctx)
	if err != nil || side.ImageDigest == "" {
		return ""
	}
	digest := ""
	if choice.Bundle != nil {
		// The bundle's image is staged under a path of its own; its
		// digest is what names it.
		digest = choice.Bundle.Digest
	} else {
		if side.Image != "" && choice.Ref != side.Image {
			return fmt.Sprintf("the worker image is %s (%s); machine %s runs %s", choice.Ref, choice.Source, m, side.Image)
		}
		res, err := s.provisioner.Resolve(ctx, s.opts.Layout.Root(), choice.Ref)
		if err != nil {
			return ""
		}
		digest = res.Digest
	}
	if digest != "" && digest != side.ImageDigest {
		return fmt.Sprintf("the worker image %s is %s now; machine %s runs %s", choice.Ref, digest, m, side.ImageDigest)
	}
	return ""
}

// runRepave runs r for this start, the node lock held: start's preflight
// checks against the new side (its bundle, its worker image; node-version
// is the version-skew check of the new kubelet against the API server),
// then the repave's phases, as node upgrade runs them. The config is the
// truth afterwards: the next start finds the active machine at its
// version and changes nothing.
func (s *Start) runRepave(ctx context.Context, r *Repave, why string, pf Preflight, began time.Time) (bool, error) {
	s.progressf("%s: repaving the node from machine %s to machine %s", why, r.From(), r.To())
	checks := func(ctx context.Context) error {
		pf.Env.Config, pf.Env.Repaving = r.start.opts.Config, why
		r.wireChecks(pf.Env)
		return runPreflight(ctx, preflight.StartChecks(pf.Env), pf, s.opts.Log, time.Now())
	}
	rec, err := r.runLocked(ctx, checks, began)
	return rec != nil, err
}

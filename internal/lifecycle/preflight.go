package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/Azure/aks-flex-node/internal/image"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/task"
)

// PreflightPhase is start's first phase: the checks, run before anything
// on the host changes.
const PreflightPhase = "preflight"

// Preflight is what start's preflight phase needs: the environment the
// checks look at, how their errors count (--ignore-preflight-errors), and
// where the kubeadm-style report goes.
type Preflight struct {
	Env     *preflight.Env
	Options preflight.Options
	Report  io.Writer
}

// RefusedError is start refused by its preflight phase: nothing on the
// host was changed. It names the checks whose errors count.
type RefusedError struct {
	Failed []preflight.CheckResult
	// OnWarnings is set when only warnings remain and --fail-on-warnings
	// made them fatal.
	OnWarnings bool
}

func (e *RefusedError) Error() string {
	if len(e.Failed) == 0 {
		return "refused by preflight: warnings are fatal with --fail-on-warnings"
	}
	msgs := make([]string, len(e.Failed))
	for i, c := range e.Failed {
		msgs[i] = c.Name + ": " + c.Message
	}
	return "refused by preflight: " + strings.Join(msgs, "; ")
}

// WireChecks plugs the run's stager, image choice and provisioner into
// env's artifact-sources and worker-image checks: a local bundle is
// verified in full (unless unchanged since start last verified it), a
// registry one is inspected without downloading, and the worker image
// start will use is resolved under the transport policy and checked
// against this host's platform and the worker image contract, writing
// nothing. Either way a bad source stops start before it touches the
// host; a bundle preflight verified is not hashed again by stage or
// install, and the image preflight resolved is the one provision-machine
// unpacks.
func (s *Start) WireChecks(env *preflight.Env) {
	env.VerifyOfflineArtifacts = func(ctx context.Context, dir string) (string, error) {
		v, err := s.stager.CheckQuick(ctx, dir)
		return v.String(), err
	}
	env.InspectOfflineArtifacts = s.stager.Inspect
	env.StagingNeed = s.stager.StagingNeed
	env.ChooseImage = func(ctx context.Context) (string, string, error) {
		c, err := s.image.Choose(ctx)
		return c.Ref, c.Source, err
	}
	env.ResolveImage = s.resolveImage
}

// resolveImage is the worker-image check's probe. The image of a registry
// bundle that is not staged yet is read from the bundle's registry.
func (s *Start) resolveImage(ctx context.Context, ref string) (preflight.ResolvedImage, error) {
	l := s.opts.Layout
	var in machine.Inspection
	var err error
	if c, cerr := s.image.Choose(ctx); cerr == nil && c.Bundle != nil && c.Ref == ref && !c.Bundle.Staged {
		var img v1.Image
		if img, err = c.Bundle.Remote(ctx); err == nil {
			in, err = s.provisioner.InspectImage(ctx, l, img)
		}
	} else {
		in, err = s.provisioner.Inspect(ctx, l, ref)
	}
	r := preflight.ResolvedImage{Digest: in.Digest, ByTag: in.ByTag, Repository: in.Repository, PlainHTTP: in.PlainHTTP,
		Platform: in.Platform, WantPlatform: in.WantPlatform, Contract: len(in.Findings), Cached: in.Cached}
	for _, f := range image.Misses(in.Findings) {
		r.Misses = append(r.Misses, f.Item+": "+f.Detail)
	}
	return r, err
}

// preflight runs start's checks (preflight.StartChecks) with the source
// checks wired to the run's stager and provisioner, writes the report, and refuses when an
// error counts.
func (s *Start) preflight(ctx context.Context, pf Preflight) error {
	began := time.Now()
	s.WireChecks(pf.Env)
	return runPreflight(ctx, preflight.StartChecks(pf.Env), pf, s.opts.Log, began)
}

// runPreflight is the preflight phase of start and node upgrade: it runs
// checks, writes the report, logs the phase (timed from began) and
// returns a *RefusedError when an error counts.
func runPreflight(ctx context.Context, checks []preflight.Check, pf Preflight, log *slog.Logger, began time.Time) error {
	task.Wait(ctx, "the preflight checks")
	report := preflight.Run(ctx, checks, pf.Options)
	task.Wait(ctx, "")
	if err := report.WriteText(pf.Report); err != nil {
		return err
	}
	var err error
	if report.Failed(pf.Options.FailOnWarnings) {
		refused := &RefusedError{OnWarnings: report.Summary.Errors == 0}
		for _, c := range report.Checks {
			if c.Severity == preflight.SeverityError && !c.Ignored {
				refused.Failed = append(refused.Failed, c)
			}
		}
		err = refused
	}
	task.LogPhase(log, PreflightPhase, false, time.Since(began), err)
	return err
}

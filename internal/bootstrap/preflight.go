package bootstrap

import (
	"context"
	"io"
	"strings"
	"time"

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

// WireChecks plugs the run's stager and provisioner into env's
// artifact-sources and worker-image checks: a local bundle is verified in
// full (unless its verification record shows it unchanged), a registry one is
// inspected without downloading, and the worker image is resolved under
// the transport policy. Either way a bad source stops start before it
// touches the host; a bundle preflight verified is not hashed again by
// stage or install, and the image preflight resolved is the one
// provision-machine unpacks.
func (s *Start) WireChecks(env *preflight.Env) {
	env.VerifyOfflineArtifacts = func(ctx context.Context, dir string) (string, error) {
		v, err := s.stager.VerifyQuick(ctx, dir)
		return v.String(), err
	}
	env.InspectOfflineArtifacts = s.stager.Inspect
	root := s.opts.Layout.Root()
	env.ResolveImage = func(ctx context.Context, ref string) (preflight.ResolvedImage, error) {
		r, err := s.provisioner.Resolve(ctx, root, ref)
		return preflight.ResolvedImage{Digest: r.Digest, ByTag: r.ByTag, Repository: r.Repository, PlainHTTP: r.PlainHTTP}, err
	}
}

// preflight runs start's checks (preflight.StartChecks) with the source
// checks wired to the run's stager and provisioner, writes the report, and refuses when an
// error counts.
func (s *Start) preflight(ctx context.Context, pf Preflight) error {
	began := time.Now()
	s.WireChecks(pf.Env)
	report := preflight.Run(ctx, preflight.StartChecks(pf.Env), pf.Options)
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
	task.LogPhase(s.opts.Log, PreflightPhase, false, time.Since(began), err)
	return err
}

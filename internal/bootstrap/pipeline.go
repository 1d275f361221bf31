// Package bootstrap owns the `start` pipeline that joins this host to the
// cluster, and `reset`, which undoes exactly what start created. Each step
// is a small idempotent task: a second start on a converged host changes
// nothing and says so.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fsutil"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// DefaultMachine is the active side of the blue/green pair.
const DefaultMachine = layout.MachineBlue

// JoinedMarker is written last by a successful start; a first-boot unit
// uses ConditionPathExists=! on it so provisioning runs once. The name is
// the layout's, so the Ignition renderer and start agree on it.
const JoinedMarker = layout.JoinedMarkerName

// Pipeline is one run of start or reset.
type Pipeline struct {
	Layout      layout.Layout
	Config      *config.Config
	ConfigFile  string // host path
	ConfigData  []byte
	Log         *slog.Logger
	Progress    io.Writer // terminal progress; nil for none
	Exec        Runner    // host commands; nil runs them for real
	ProcDir     string    // default /proc
	Machine     string    // default kube1
	JoinTimeout time.Duration

	// bundle is the verified bundle dir stage-node-components resolved,
	// as this process opens it.
	bundle string
	// verified is the bundle this run last verified in full, so preflight,
	// stage-node-components and install-node-components hash it once.
	verified *verifiedBundle
	// restartNode is set when node components or config changed, so a
	// running machine restarts containerd and the kubelet to pick them up.
	restartNode bool

	tracker *state.Tracker
	runner  *task.Runner
	control *machine.Control
}

func (p *Pipeline) procDir() string {
	if p.ProcDir != "" {
		return p.ProcDir
	}
	return "/proc"
}

func (p *Pipeline) machineName() string {
	if p.Machine != "" {
		return p.Machine
	}
	return DefaultMachine
}

func (p *Pipeline) machineRoot() string { return machine.Dir(p.Layout, p.machineName()) }

// track records a host path before it is created, so reset can remove it
// even after a crash half-way through start.
func (p *Pipeline) track(paths ...string) error {
	if p.tracker == nil {
		dir := p.Layout.OnRoot(p.Layout.StateDir())
		_, statErr := os.Stat(dir)
		if err := fsutil.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		t, err := state.OpenTracker(dir)
		if err != nil {
			return err
		}
		p.tracker = t
		if errors.Is(statErr, os.ErrNotExist) {
			if err := t.Add(p.Layout.StateDir()); err != nil {
				return err
			}
		}
	}
	return p.tracker.Add(paths...)
}

func (p *Pipeline) progressf(format string, args ...any) {
	if p.Progress != nil {
		fmt.Fprintf(p.Progress, "[start] "+format+"\n", args...)
	}
}

func (p *Pipeline) init() {
	if p.Log == nil {
		p.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if p.JoinTimeout == 0 {
		p.JoinTimeout = 5 * time.Minute
	}
	p.runner = &task.Runner{Log: p.Log, Starting: func(name string) { p.progressf("%s ...", name) }}
	p.control = &machine.Control{}
	if p.Exec != nil {
		p.control.Run = p.Exec
	}
}

// Records are the finished tasks of the last run, for summaries.
func (p *Pipeline) Records() []task.Record { return p.runner.Rec }

// Start runs the join. Preflight has already passed (the caller runs it
// with the user's --ignore-preflight-errors).
func (p *Pipeline) Start(ctx context.Context) (changed bool, err error) {
	p.init()
	start := time.Now()
	mode, err := machine.HostCgroupMode(p.Layout.Root())
	if err != nil {
		return false, fmt.Errorf("detect cgroup mode: %w", err)
	}
	tasks := []task.Task{
		// First: a bundle that cannot be had or does not verify stops
		// start before anything else on the host changes.
		p.stageComponentsTask(),
		p.layoutDirsTask(),
		p.kernelModulesTask(),
		p.sysctlTask(),
		p.swapOffTask(),
		p.provisionTask(),
		p.installComponentsTask(),
		p.nspawnFilesTask(mode),
		p.nodeConfigTask(mode),
		p.startMachineTask(),
		p.importImagesTask(),
		p.waitTLSBootstrapTask(),
		p.waitNodeReadyTask(),
		p.saveStateTask(),
		p.agentServiceTask(),
		p.joinedMarkerTask(),
	}
	changed, err = p.runner.Serial(ctx, tasks...)
	if err != nil {
		return changed, err
	}
	if changed {
		p.progressf("node %s joined in %v", p.Config.Agent.NodeName, time.Since(start).Round(time.Millisecond))
	} else {
		p.progressf("node %s already joined: nothing changed (%v)", p.Config.Agent.NodeName, time.Since(start).Round(time.Millisecond))
	}
	return changed, nil
}

func (p *Pipeline) provisionTask() task.Task {
	return task.Func{N: "provision-machine", F: func(ctx context.Context) (task.Result, error) {
		if p.Config.Bootstrap.OCIImage == "" {
			return task.Result{}, errors.New("bootstrap.ociImage is not set in " + p.ConfigFile + ": name the worker image (registry reference or oci-layout:///dir:tag)")
		}
		name := p.machineName()
		if err := p.track(p.Layout.MachineDir(name), p.Layout.MachineStateDir()); err != nil {
			return task.Result{}, err
		}
		return machine.Provision(ctx, p.Layout, name, p.Config.Bootstrap.OCIImage, p.Log)
	}}
}

func (p *Pipeline) components() artifact.Components { return WantComponents(p.Config) }

// WantComponents are the versions config c asks a bundle for.
func WantComponents(c *config.Config) artifact.Components {
	return artifact.Components{Kubernetes: c.Components.Kubernetes, Containerd: c.Components.Containerd, Runc: c.Components.Runc, CNI: c.Networking.CNIVersion}
}

// stagedMarker in a staged registry bundle records the artifact digest it
// was pulled and verified from.
const stagedMarker = ".pulled-from"

// bundleDir resolves where the node components come from: a local offline
// source as it is, or a staging dir under the state dir filled from a
// registry or from upstream.
func (p *Pipeline) bundleDir(ctx context.Context) (dir string, err error) {
	dir, _, err = p.stageBundle(ctx)
	return dir, err
}

// stageBundle is bundleDir that also says whether it downloaded anything.
func (p *Pipeline) stageBundle(ctx context.Context) (string, bool, error) {
	src := p.Config.Bootstrap.OfflineArtifacts.Source
	if src != "" {
		dir, err := artifact.ResolveSource(src, p.Config.Components.Kubernetes)
		if err != nil {
			return "", false, fmt.Errorf("bootstrap.offlineArtifacts.source: %w", err)
		}
		if strings.HasPrefix(dir, artifact.OCIScheme) {
			return p.stageOCI(ctx, dir)
		}
		return p.Layout.OnRoot(dir), false, nil
	}
	staged := p.Layout.BundlesDir() + "/k8s-" + p.Config.Components.Kubernetes
	if err := p.track(p.Layout.BundlesDir(), staged); err != nil {
		return "", false, err
	}
	dir := p.Layout.OnRoot(staged)
	if err := artifact.Fetch(ctx, nil, artifact.UpstreamURLs(p.components(), runtime.GOARCH), dir); err != nil {
		return "", false, err
	}
	// Fetch checked each file against its upstream checksum; the manifest
	// makes the staged dir a bundle that Verify and Install read.
	m, err := artifact.BuildManifest(ctx, dir, runtime.GOARCH, p.components(), nil)
	if err != nil {
		return "", false, fmt.Errorf("describe the downloaded components in %s: %w", staged, err)
	}
	if _, err := artifact.WriteManifest(dir, m); err != nil {
		return "", false, err
	}
	return dir, false, nil
}

// stageOCI pulls the bundle at ref into bundles/oci-<digest>, verifies it
// and returns the dir. A bundle already staged from the same artifact
// digest is not downloaded again, but it is verified again (cheap when
// the components stamp shows it unchanged): one that no longer verifies
// (a file corrupted on disk) is removed and pulled afresh, here, before
// anything else on the host changes. A partial pull resumes per file. A
// freshly pulled bundle that does not verify is removed, so the next
// start pulls afresh.
func (p *Pipeline) stageOCI(ctx context.Context, ref string) (string, bool, error) {
	reg := artifact.Registry{PlainHTTP: p.Config.Bootstrap.OfflineArtifacts.PlainHTTP}
	rem, ps := reg.Inspect(ctx, ref, p.components(), runtime.GOARCH)
	if len(ps) > 0 {
		return "", false, artifact.Problems(ps)
	}
	staged := p.Layout.BundlesDir() + "/oci-" + rem.Digest.Hex[:16]
	if err := p.track(p.Layout.BundlesDir(), staged); err != nil {
		return "", false, err
	}
	dir := p.Layout.OnRoot(staged)
	marker := filepath.Join(dir, stagedMarker)
	if b, err := os.ReadFile(marker); err == nil && string(b) == rem.Digest.String()+"\n" {
		err := p.VerifyLocalBundle(ctx, dir)
		if err == nil {
			return dir, false, nil
		}
		if ctx.Err() != nil { // interrupted, not disproved: keep it
			return "", false, err
		}
		p.Log.Warn("staged bundle no longer verifies; removing it and pulling again", "dir", staged, "ref", ref, "err", err)
		if err := os.RemoveAll(dir); err != nil {
			return "", false, fmt.Errorf("remove staged bundle %s that does not verify: %w", staged, err)
		}
	}
	start := time.Now()
	n, err := reg.Pull(ctx, rem, dir)
	if err != nil {
		return "", false, err
	}
	if _, err := p.verifyBundle(ctx, dir); err != nil {
		_ = os.RemoveAll(dir)
		return "", false, fmt.Errorf("bundle pulled from %s into %s does not verify (removed): %w", ref, staged, err)
	}
	if _, err := fsutil.WriteFile(marker, []byte(rem.Digest.String()+"\n"), 0o644); err != nil {
		return "", false, err
	}
	p.Log.Info("pulled bundle", "ref", ref, "digest", rem.Digest.String(), "dir", staged, "bytes", n, "duration", time.Since(start).Round(time.Millisecond))
	return dir, true, nil
}

// removeStaleBundles removes every staged bundle but the one in use, so
// upgrades do not pile up old versions under the state dir.
func (p *Pipeline) removeStaleBundles(current string) error {
	root := p.Layout.OnRoot(p.Layout.BundlesDir())
	des, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, de := range des {
		d := filepath.Join(root, de.Name())
		if d == current {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("remove stale staged bundle %s: %w", d, err)
		}
		p.Log.Info("removed stale staged bundle", "dir", filepath.Join(p.Layout.BundlesDir(), de.Name()))
	}
	return nil
}

// VerifyLocalBundle is the full check of a bundle dir (a path this
// process opens) against the config: what preflight runs and what
// stage-node-components requires before start touches the host. A bundle
// unchanged since the last verified install, or since this run verified
// it, is not hashed again.
func (p *Pipeline) VerifyLocalBundle(ctx context.Context, dir string) error {
	if p.componentsUnchanged(dir) {
		return nil
	}
	_, err := p.verifyBundle(ctx, dir)
	return err
}

// verifiedBundle is a bundle verified in full in this run: its stamp,
// taken before it was hashed, and the manifest that was checked.
type verifiedBundle struct {
	dir      string
	want     artifact.Components
	stamp    []fileStamp
	manifest *artifact.Manifest
}

// verifyBundle verifies dir in full and returns its manifest, unless this
// run already did and no file of it changed since (the same stamp as the
// components stamp: size, mtime, ctime, inode).
func (p *Pipeline) verifyBundle(ctx context.Context, dir string) (*artifact.Manifest, error) {
	want := p.components()
	if v := p.verified; v != nil && v.dir == dir && v.want == want {
		if cur, err := stampBundle(dir); err == nil && slices.Equal(cur, v.stamp) {
			return v.manifest, nil
		}
	}
	p.verified = nil
	stamp, stampErr := stampBundle(dir) // before hashing: a change during it breaks the stamp
	start := time.Now()
	m, ps := artifact.VerifyFor(ctx, dir, want, runtime.GOARCH)
	if len(ps) > 0 {
		return nil, artifact.Problems(ps)
	}
	p.Log.Debug("verified bundle", "dir", dir, "files", len(m.Files)+len(m.Legal), "duration", time.Since(start).Round(time.Millisecond))
	if stampErr == nil {
		p.verified = &verifiedBundle{dir: dir, want: want, stamp: stamp, manifest: m}
	}
	return m, nil
}

func (p *Pipeline) stageComponentsTask() task.Task {
	return task.Func{N: "stage-node-components", F: func(ctx context.Context) (task.Result, error) {
		dir, pulled, err := p.stageBundle(ctx)
		if err != nil {
			return task.Result{}, err
		}
		// The gate: every source, local or staged, verifies here, even
		// when preflight's check was ignored.
		if err := p.VerifyLocalBundle(ctx, dir); err != nil {
			return task.Result{}, fmt.Errorf("bundle %s does not verify: %w", dir, err)
		}
		p.bundle = dir
		return task.Result{Changed: pulled, Detail: dir}, nil
	}}
}

func (p *Pipeline) installComponentsTask() task.Task {
	return task.Func{N: "install-node-components", F: func(ctx context.Context) (task.Result, error) {
		dir := p.bundle
		if dir == "" {
			return task.Result{}, errors.New("no bundle staged: stage-node-components did not run")
		}
		if p.componentsUnchanged(dir) {
			return task.Result{Detail: "bundle and installed files unchanged since verified"}, p.removeStaleBundles(dir)
		}
		m, err := p.verifyBundle(ctx, dir)
		if err != nil {
			return task.Result{}, err
		}
		res, err := artifact.InstallVerified(ctx, dir, m, p.machineRoot(), p.Log)
		p.restartNode = p.restartNode || res.Changed
		if err != nil {
			return res, err
		}
		if err := p.saveComponentsStamp(dir); err != nil {
			return res, err
		}
		return res, p.removeStaleBundles(dir)
	}}
}

func (p *Pipeline) nspawnFilesTask(mode string) task.Task {
	return task.Func{N: "write-nspawn-files", F: func(ctx context.Context) (task.Result, error) {
		name := p.machineName()
		// The .nspawn dir is ours only if we are the ones creating it.
		if _, err := os.Stat(p.Layout.OnRoot(p.Layout.NspawnDir())); errors.Is(err, os.ErrNotExist) {
			if err := p.track(p.Layout.NspawnDir()); err != nil {
				return task.Result{}, err
			}
		}
		dropIn := p.Layout.MachineDropIn(name)
		if err := p.track(p.Layout.NspawnFile(name), filepath.Dir(dropIn), dropIn); err != nil {
			return task.Result{}, err
		}
		changed, err := machine.WriteFiles(p.Layout, name, machine.Options{AdditionalHostDevices: p.Config.Bootstrap.AdditionalHostDevices, CgroupMode: mode})
		return task.Result{Changed: changed}, err
	}}
}

// nodeOptions are the knobs that come from the host rather than the file.
func (p *Pipeline) nodeOptions(mode string) node.Options {
	return node.Options{
		CgroupV1:            mode != "v2",
		RestrictOOMScoreAdj: node.DetectRestrictOOMScoreAdj(),
	}
}

func (p *Pipeline) nodeConfigTask(mode string) task.Task {
	return task.Func{N: "write-node-config", F: func(ctx context.Context) (task.Result, error) {
		changed, _, err := node.Write(p.machineRoot(), p.Config, p.nodeOptions(mode))
		p.restartNode = p.restartNode || changed
		return task.Result{Changed: changed}, err
	}}
}

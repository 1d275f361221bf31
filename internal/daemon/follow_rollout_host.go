package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/machine"
	"github.com/Azure/aks-flex-node/internal/state"
	"github.com/Azure/aks-flex-node/internal/task"
)

// rolloutHost is fleet.Host on this host: lifecycle's repave. Stage runs
// the repave's preflight, stage and prepare phases (the node keeps
// serving); Switch runs the whole repave, with its drain and rollback;
// Healthy is the soak's probe.
type rolloutHost struct {
	layout layout.Layout
	// config is the config file as the agent loaded it: the base the
	// applied release and the rollout's release overlay.
	config   *config.Config
	log      *slog.Logger
	control  *machine.Control
	client   func() (kubeclient.Interface, error)
	nodeName string
	// nodes is the process's Node informer: the soak's and the repave's
	// reads of the node's own Node where a stale one will do.
	nodes *NodeInformer

	mu       sync.Mutex
	baseline *soakBaseline // what the soak compares with; nil until known
	// evidence gathers a failure's evidence (issue 30:
	// follow_rollout_evidence.go).
	evidence Evidence
}

// goal is the config the node moves to for rel: the config file with
// the cluster's goal the node runs by (lifecycle.LoadGoal: the release a
// rollout moved it to before, so a release that sets one field keeps
// what an earlier one set), then rel. Cluster data is input to validate
// (DESIGN decision 10): a release that makes the config invalid is
// refused (InvalidRelease), naming what it broke.
func (h *rolloutHost) goal(rel v1alpha1.Release) (*config.Config, error) {
	base, err := h.current()
	if err != nil {
		return nil, err
	}
	next, _ := (&fleet.AppliedRelease{Release: rel}).Overlay(base)
	had := map[string]bool{}
	for _, e := range config.Validate(base) {
		had[e.Error()] = true
	}
	var bad []string
	for _, e := range config.Validate(next) {
		if !had[e.Error()] {
			bad = append(bad, e.Error())
		}
	}
	if len(bad) > 0 {
		return nil, &fleet.StepError{Step: fleet.StepStage, Reason: "InvalidRelease",
			Err: fmt.Errorf("the release makes the config invalid: %s; fix the rollout's spec.release", strings.Join(bad, "; "))}
	}
	return next, nil
}

// current is the config the node runs by: the file under the cluster's
// goal.
func (h *rolloutHost) current() (*config.Config, error) {
	g, err := lifecycle.LoadGoal(h.layout, h.config)
	if err != nil {
		return nil, err
	}
	return g.Config, nil
}

// Running says whether the active side runs every field rel sets: its
// Kubernetes version and worker image digest (the sides record), the
// bundle source it was built from, the agent binary's SHA-256.
func (h *rolloutHost) Running(_ context.Context, rel v1alpha1.Release) (bool, error) {
	sides, err := state.Open(h.layout).Sides()
	if err != nil {
		return false, err
	}
	if sides == nil {
		return false, fmt.Errorf("no sides record in %s: has this host joined?", h.layout.StateDir())
	}
	side := sides.Machines[sides.Active]
	if v := rel.KubernetesVersion; v != "" && strings.TrimPrefix(v, "v") != strings.TrimPrefix(side.KubernetesVersion, "v") {
		return false, nil
	}
	if ref := rel.WorkerImage; ref != "" {
		// The side records the reference it was provisioned from and the
		// manifest its rootfs came from: for an index, the platform's
		// manifest, not the digest the reference pins. Either matching
		// is the same bytes (the reference is pinned by digest).
		_, digest, _ := strings.Cut(ref, "@")
		if ref != side.Image && digest != side.ImageDigest {
			return false, nil
		}
	}
	if src := rel.Artifacts; src != "" {
		c, err := h.current()
		if err != nil {
			return false, err
		}
		if src != c.Bootstrap.OfflineArtifacts.Source {
			return false, nil
		}
	}
	if a := rel.Agent; a != nil {
		sum, err := fileSHA256(h.layout.OnRoot(h.layout.AgentBinary()))
		if err != nil || sum != a.SHA256 {
			return false, err
		}
	}
	return true, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}

// Stage fetches, verifies and unpacks rel into the machine that does not
// serve (Repave.Stage).
func (h *rolloutHost) Stage(ctx context.Context, rel v1alpha1.Release) error {
	if rel.Agent != nil {
		if ok, _ := h.Running(ctx, v1alpha1.Release{Agent: rel.Agent}); !ok {
			return &fleet.StepError{Step: fleet.StepStage, Reason: "AgentReleaseUnsupported",
				Err: errors.New("spec.release.agent: this agent does not install an agent binary from a rollout yet; upgrade the agent on its own (aks-flex-node agent upgrade) or drop the field")}
		}
	}
	c, err := h.goal(rel)
	if err != nil {
		return err
	}
	r, pf, err := newRepave(h.layout, h.log, c, repaveSettings{Loop: followRolloutLoop})
	if err != nil {
		return err
	}
	if err := r.Stage(ctx, pf); err != nil {
		return stageError(err)
	}
	return nil
}

// Switch repaves the node to rel: cordon, drain (bounded by drainTimeout;
// DaemonSet pods stay, as kubectl drain --ignore-daemonsets leaves them:
// their controller puts them back at once), the switch with its
// rollback. The repave never uncordons a Node that was cordoned before
// it. The pods the soak waits for are noted before the drain.
func (h *rolloutHost) Switch(ctx context.Context, rel v1alpha1.Release, drainTimeout time.Duration) error {
	pods := h.beforeSwitch(ctx)
	c, err := h.goal(rel)
	if err != nil {
		return err
	}
	obs := &phaseObserver{ctx: ctx}
	r, pf, err := newRepave(h.layout, h.log, c, repaveSettings{Loop: followRolloutLoop, DrainTimeout: drainTimeout, Nodes: h.nodes,
		Drain: drain.Options{IgnoreDaemonSets: true}, Observer: obs})
	if err != nil {
		return err
	}
	if _, err := r.Run(ctx, pf); err != nil {
		return switchError(err, obs.last())
	}
	h.noteBaseline(ctx, pods, "switch")
	return nil
}

// beforeSwitch forgets the last soak's baseline and notes the DaemonSet
// pods the node runs before its drain, which the soak waits to see back
// (nil when they cannot be read: the soak then does not wait for them).
func (h *rolloutHost) beforeSwitch(ctx context.Context) map[types.UID]string {
	pods, err := h.daemonSetPods(ctx)
	if err != nil {
		h.log.Warn(followRolloutLoop+": note the node's DaemonSet pods before the drain; the soak will not wait for them", "error", err)
	}
	h.mu.Lock()
	h.baseline = nil
	h.mu.Unlock()
	return pods
}

// noteBaseline keeps what the soak compares with once a switch (or a
// switch back: what) is done: the units' restart counts now and pods, the
// DaemonSet pods the node ran before its drain. Without it the first
// soak probe takes the counts.
func (h *rolloutHost) noteBaseline(ctx context.Context, pods map[types.UID]string, what string) {
	b, err := h.takeBaseline(ctx)
	if err != nil {
		h.log.Warn(followRolloutLoop+": note the units' restarts after the "+what+"; the first soak probe does", "error", err)
		return
	}
	b.pods = pods
	h.mu.Lock()
	h.baseline = b
	h.mu.Unlock()
}

// phaseObserver tells the agent the repave's drain and switch phases as
// they start (fleet.Progress) and remembers the last one, where a
// failure happened.
type phaseObserver struct {
	ctx   context.Context
	mu    sync.Mutex
	phase string
}

func (o *phaseObserver) PhaseStarted(name string) {
	o.mu.Lock()
	o.phase = name
	o.mu.Unlock()
	if name == fleet.StepDrain || name == fleet.StepSwitch {
		fleet.Progress(o.ctx, name)
	}
}
func (o *phaseObserver) TaskStarted(string)                                 {}
func (o *phaseObserver) TaskDone(string, task.Result, error, time.Duration) {}

func (o *phaseObserver) last() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.phase
}

package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/state"
)

func TestParseUnitRestarts(t *testing.T) {
	ok := "ActiveState=active\nNRestarts=0\n\nActiveState=active\nNRestarts=3\n"
	got, err := parseUnitRestarts(ok)
	if err != nil || got["kubelet.service"] != 0 || got["containerd.service"] != 3 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{
		"ActiveState=active\nNRestarts=0\n",
		"ActiveState=activating\nNRestarts=0\n\nActiveState=active\nNRestarts=0\n",
		"ActiveState=active\nNRestarts=\n\nActiveState=active\nNRestarts=0\n",
	} {
		if _, err := parseUnitRestarts(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestStageReasons(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("stage: write layer: %w", &fs.PathError{Op: "write", Path: "/var/lib/x", Err: syscall.ENOSPC}), "DiskFull"},
		{fmt.Errorf("bundle: %w", &artifact.MismatchError{Got: "a", Want: "b"}), "ChecksumMismatch"},
		{errors.New("https://x/bundle.tar: sha256 aa != bb from https://x/bundle.tar.sha256"), "ChecksumMismatch"},
		{errors.New("GET https://127.0.0.1:5000/v2/w/manifests/sha256:00: MANIFEST_UNKNOWN: manifest unknown"), "ImageNotFound"},
		{fmt.Errorf("pull: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), "RegistryUnreachable"},
		{&lifecycle.RefusedError{Failed: []preflight.CheckResult{{Name: "worker-image", Message: "not for this platform"}}}, "PreflightRefused"},
		{&lifecycle.RefusedError{Failed: []preflight.CheckResult{{Name: "staging-space", Message: "the bundle does not fit"}}}, "DiskFull"},
		{&lifecycle.RefusedError{Failed: []preflight.CheckResult{{Name: "version-skew", Message: "newer"}, {Name: "disk-space", Message: "1.0 GiB free"}}}, "DiskFull"},
		{errors.New("something else"), "StageFailed"},
	} {
		var se *fleet.StepError
		if err := stageError(c.err); !errors.As(err, &se) || se.Step != fleet.StepStage || se.Reason != c.want {
			t.Errorf("%v: %v, want step stage reason %s", c.err, err, c.want)
		}
	}
	held := &nodelock.HeldError{Path: "/var/lib/aks-flex-node/node.lock"}
	for _, b := range []error{held, lifecycle.ErrStateMoved, lifecycle.ErrRepaveInFlight} {
		if err := stageError(b); !errors.Is(err, fleet.ErrBusy) {
			t.Errorf("%v: %v, want ErrBusy", b, err)
		}
	}
}

func TestSwitchReasons(t *testing.T) {
	for _, c := range []struct {
		err         error
		phase       string
		step, label string
	}{
		{&lifecycle.RolledBackError{To: "kube2", Reason: errors.New("kubelet exited")}, "rollback", fleet.StepSwitch, "RolledBack"},
		{&drain.RefusedError{Node: "n1", Reasons: []string{"not managed by a controller: ns/p"}}, "drain", fleet.StepDrain, "DrainRefused"},
		{errors.New("pods left after 1m: ns/p"), "drain", fleet.StepDrain, "DrainTimeout"},
		{errors.New("sha256 a != b"), "stage", fleet.StepStage, "ChecksumMismatch"},
		{&lifecycle.RefusedError{}, "preflight", fleet.StepStage, "PreflightRefused"},
		{errors.New("save state"), "finish", fleet.StepSwitch, "SwitchFailed"},
	} {
		var se *fleet.StepError
		if err := switchError(c.err, c.phase); !errors.As(err, &se) || se.Step != c.step || se.Reason != c.label {
			t.Errorf("%v in %s: %v, want %s %s", c.err, c.phase, err, c.step, c.label)
		}
	}
	if err := switchError(&nodelock.HeldError{}, "preflight"); !errors.Is(err, fleet.ErrBusy) {
		t.Errorf("held lock: %v", err)
	}
}

// rolloutTestHost is a rolloutHost on a temp root whose active side,
// kube2, runs Kubernetes 1.35.4 from image digest sha256:aa, under a
// config whose bundle source is oci://r/b:1.
func rolloutTestHost(t *testing.T) *rolloutHost {
	t.Helper()
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.OnRoot(l.StateDir()), 0o700); err != nil {
		t.Fatal(err)
	}
	sides := state.Sides{Active: "kube2", Machines: map[string]state.Side{
		"kube1": {KubernetesVersion: "1.35.3", ImageDigest: "sha256:00"},
		"kube2": {KubernetesVersion: "1.35.4", Image: "r/idx@sha256:" + strings.Repeat("e", 64), ImageDigest: "sha256:" + strings.Repeat("a", 64)},
	}}
	if err := state.Open(l).SaveSides(sides); err != nil {
		t.Fatal(err)
	}
	c := &config.Config{}
	c.Components.Kubernetes = "1.35.3"
	c.Bootstrap.OfflineArtifacts.Source = "oci://r/b:1"
	return &rolloutHost{layout: l, config: c, log: slog.New(slog.DiscardHandler)}
}

func TestRolloutHostRunning(t *testing.T) {
	h := rolloutTestHost(t)
	digest := "sha256:" + strings.Repeat("a", 64)
	for _, c := range []struct {
		rel  v1alpha1.Release
		want bool
	}{
		{v1alpha1.Release{KubernetesVersion: "v1.35.4"}, true},
		{v1alpha1.Release{KubernetesVersion: "v1.35.3"}, false}, // the inactive side's
		{v1alpha1.Release{WorkerImage: "r/w:1@" + digest}, true},
		{v1alpha1.Release{WorkerImage: "r/w:1@sha256:" + strings.Repeat("b", 64)}, false},
		{v1alpha1.Release{WorkerImage: "r/idx@sha256:" + strings.Repeat("e", 64)}, true}, // an index: the side names the reference
		{v1alpha1.Release{KubernetesVersion: "v1.35.4", Artifacts: "oci://r/b:1"}, true},
		{v1alpha1.Release{Artifacts: "oci://r/b:2"}, false},
	} {
		got, err := h.Running(t.Context(), c.rel)
		if err != nil || got != c.want {
			t.Errorf("%+v: %v %v, want %v", c.rel, got, err, c.want)
		}
	}
	// After a rollout moved the node to oci://r/b:2, that is what it runs.
	rec := fleet.Record{Applied: &fleet.AppliedRelease{Rollout: "b", Generation: 2, Release: v1alpha1.Release{Artifacts: "oci://r/b:2"}, At: time.Now()}}
	if err := fleet.SaveRecord(h.layout.OnRoot(h.layout.RolloutRecord()), rec); err != nil {
		t.Fatal(err)
	}
	if got, err := h.Running(t.Context(), v1alpha1.Release{Artifacts: "oci://r/b:2"}); err != nil || !got {
		t.Errorf("the applied bundle source: %v %v", got, err)
	}
}

// The goal keeps what an earlier rollout applied and sets what this
// release sets; the config file is not changed.
func TestRolloutHostGoal(t *testing.T) {
	h := rolloutTestHost(t)
	rec := fleet.Record{Applied: &fleet.AppliedRelease{Rollout: "a", Generation: 1, Release: v1alpha1.Release{KubernetesVersion: "v1.35.4"}}}
	if err := fleet.SaveRecord(h.layout.OnRoot(h.layout.RolloutRecord()), rec); err != nil {
		t.Fatal(err)
	}
	g, err := h.goal(v1alpha1.Release{WorkerImage: "r/w@sha256:" + strings.Repeat("c", 64)})
	if err != nil {
		t.Fatal(err)
	}
	if g.Components.Kubernetes != "1.35.4" || !strings.HasSuffix(g.Bootstrap.OCIImage, strings.Repeat("c", 64)) || g.Bootstrap.OfflineArtifacts.Source != "oci://r/b:1" {
		t.Errorf("goal %+v %+v", g.Components, g.Bootstrap)
	}
	if h.config.Components.Kubernetes != "1.35.3" || h.config.Bootstrap.OCIImage != "" {
		t.Error("the loaded config was changed")
	}
	// Cluster data is validated: a release the CRD would refuse, written
	// around it, is refused here too, naming the key.
	_, err = h.goal(v1alpha1.Release{KubernetesVersion: "v1.35.4;reboot"})
	var se *fleet.StepError
	if !errors.As(err, &se) || se.Reason != "InvalidRelease" || !strings.Contains(err.Error(), "components.kubernetes") {
		t.Errorf("an invalid release: %v", err)
	}
	if err := h.Stage(t.Context(), v1alpha1.Release{KubernetesVersion: "v1.35.4;reboot"}); !errors.As(err, &se) || se.Reason != "InvalidRelease" {
		t.Errorf("staging an invalid release: %v", err)
	}
}

// A release naming an agent binary this node does not run is refused at
// stage, by name, before anything is fetched.
func TestRolloutHostRefusesAnAgentRelease(t *testing.T) {
	h := rolloutTestHost(t)
	err := h.Stage(t.Context(), v1alpha1.Release{Agent: &v1alpha1.AgentRelease{URL: "https://x/a", SHA256: strings.Repeat("d", 64)}})
	var se *fleet.StepError
	if !errors.As(err, &se) || se.Reason != "AgentReleaseUnsupported" || !strings.Contains(err.Error(), "spec.release.agent") {
		t.Fatalf("%v", err)
	}
}

// The agent runs follow-rollout whenever the config names an API server.
func TestAgentFollowsRollouts(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, example := range []string{"acl-bootstrap-token.json", "acl-aks-machine.json"} {
		c, err := config.Load("../../examples/" + example)
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(c, l, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, lp := range a.Loops {
			if lp.Name == followRolloutLoop {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d follow-rollout loops", example, n)
		}
	}
}

// A follower started before the join follows as soon as the host has
// joined, not a loop interval (a minute) later: its pass waits for the
// join instead of ending. Here the join's marker and state appear while
// it waits, and it goes on to connect (which fails: this host has no
// credential).
func TestRolloutFollowerWaitsForTheJoin(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load("../../examples/acl-bootstrap-token.json")
	if err != nil {
		t.Fatal(err)
	}
	f := &RolloutFollower{Keeper: &MachineKeeper{Layout: l, Log: slog.New(slog.DiscardHandler)}, Config: c,
		Nodes: NewNodeInformer(func() (kubeclient.Interface, error) { return nil, errors.New("no client in this test") }, "n1")}
	done := make(chan error, 1)
	go func() { done <- f.Follow(t.Context()) }()
	select {
	case err := <-done:
		t.Fatalf("follow ended before the join: %v", err)
	case <-time.After(2 * joinPoll):
	}
	dir := l.OnRoot(l.StateDir())
	for _, p := range []string{dir, filepath.Dir(l.OnRoot(l.JoinedMarker()))} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := state.OpenDir(dir).SaveApplied(state.Applied{NodeName: "n1", Machine: "kube1"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.OnRoot(l.JoinedMarker()), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "credential") {
			t.Fatalf("follow after the join: %v, want the node's credential missing", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("follow did not go on within a minute of the join")
	}
}

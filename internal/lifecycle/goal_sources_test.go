package lifecycle

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/machineapi"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

func goalLayout(t *testing.T) layout.Layout {
	t.Helper()
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.OnRoot(l.StateDir()), 0o700); err != nil {
		t.Fatal(err)
	}
	return l
}

func writeRollout(t *testing.T, l layout.Layout, rel v1alpha1.Release) {
	t.Helper()
	rec := fleet.Record{Rollout: "r1", UID: "u1", Generation: 2, Phase: fleet.PhaseUpdated, Since: time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC),
		Applied: &fleet.AppliedRelease{Rollout: "r1", Generation: 2, Release: rel, At: time.Date(2026, 12, 6, 6, 58, 0, 0, time.UTC)}}
	if err := fleet.SaveRecord(l.OnRoot(l.RolloutRecord()), rec); err != nil {
		t.Fatal(err)
	}
}

func writeState(t *testing.T, l layout.Layout, rel, data string) {
	t.Helper()
	if err := os.WriteFile(l.OnRoot(rel), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func lines(g Goal) string {
	var b strings.Builder
	for _, s := range g.Sources {
		b.WriteString(s.String() + "\n")
	}
	return b.String()
}

// A rollout's applied release wins over the file for the keys it sets,
// and each says where it came from and what the file says; the rest of
// the config is the file's, and the file's config is not changed.
func TestGoalRolloutReleaseWinsOverTheFile(t *testing.T) {
	l := goalLayout(t)
	file := &config.Config{}
	file.Components.Kubernetes, file.Bootstrap.OCIImage, file.Node.MaxPods = "1.34.2", "registry.test/worker:a", 30
	g, err := LoadGoal(l, file)
	if err != nil || g.Config != file || len(g.Sources) != 0 {
		t.Fatalf("no record: %+v, %v; want the file's config as it is", g, err)
	}
	img := "registry.test/worker@sha256:" + strings.Repeat("ab", 32)
	writeRollout(t, l, v1alpha1.Release{KubernetesVersion: "v1.35.4", WorkerImage: img})
	g, err = LoadGoal(l, file)
	if err != nil {
		t.Fatal(err)
	}
	if g.Config.Components.Kubernetes != "1.35.4" || g.Config.Bootstrap.OCIImage != img || g.Config.Node.MaxPods != 30 {
		t.Errorf("overlaid config: %+v %+v %+v", g.Config.Components, g.Config.Bootstrap, g.Config.Node)
	}
	if file.Components.Kubernetes != "1.34.2" {
		t.Error("LoadGoal changed the file's config")
	}
	want := "components.kubernetes 1.35.4 from rollout r1 generation 2 (the config file says 1.34.2)\n" +
		"bootstrap.ociImage " + img + " from rollout r1 generation 2 (the config file says registry.test/worker:a)\n"
	if got := lines(g); got != want {
		t.Errorf("sources:\n%s\nwant:\n%s", got, want)
	}
}

// An AKS Machine goal the agent applied wins over the file only when the
// config names the Machine; a leftover goal record of a config that no
// longer does is not read.
func TestGoalAKSMachineWinsOverTheFile(t *testing.T) {
	l := goalLayout(t)
	writeState(t, l, l.MachineGoal(), `{"applied":{"kubernetesVersion":"1.35.4","maxPods":50,"labels":{"team":"edge"},"taints":["a=b:NoSchedule"]},"eTag":"e2","decision":"applied","at":"2026-12-06T04:06:00Z"}`)
	plain := &config.Config{}
	plain.Components.Kubernetes = "1.34.2"
	if g, err := LoadGoal(l, plain); err != nil || len(g.Sources) != 0 || g.Config != plain {
		t.Fatalf("config without an AKS Machine: %+v, %v", g, err)
	}
	c := armConfig(false)
	c.Node.Labels = map[string]string{"team": "core"}
	g, err := LoadGoal(l, c)
	if err != nil {
		t.Fatal(err)
	}
	want := "components.kubernetes 1.35.4 from AKS Machine eTag e2 (the config file says 1.35.0)\n" +
		"node.labels team=edge from AKS Machine eTag e2 (the config file says team=core)\n" +
		"node.taints a=b:NoSchedule from AKS Machine eTag e2 (the config file says (none))\n" +
		"node.maxPods 50 from AKS Machine eTag e2 (the config file says 110)\n"
	if got := lines(g); got != want {
		t.Errorf("sources:\n%s\nwant:\n%s", got, want)
	}
	if g.Config.Components.Kubernetes != "1.35.4" || g.Config.Node.MaxPods != 50 {
		t.Errorf("overlaid: %+v %+v", g.Config.Components, g.Config.Node)
	}
}

// Records that cannot be read, and both cluster goals at once, are errors
// that name the files and what to do; never a silent fallback to the file.
func TestGoalRefusesUnreadableRecordsAndTwoGoals(t *testing.T) {
	l := goalLayout(t)
	writeState(t, l, l.RolloutRecord(), `{"rollout":`)
	_, err := LoadGoal(l, &config.Config{})
	if err == nil || !strings.Contains(err.Error(), l.RolloutRecord()) || !strings.Contains(err.Error(), "remove it and set the config file's components.kubernetes") {
		t.Errorf("corrupt rollout record: %v", err)
	}
	if err := os.Remove(l.OnRoot(l.RolloutRecord())); err != nil {
		t.Fatal(err)
	}
	writeState(t, l, l.MachineGoal(), `not json`)
	if _, err := LoadGoal(l, &config.Config{}); err != nil {
		t.Errorf("a goal record of a config without an AKS Machine was read: %v", err)
	}
	_, err = LoadGoal(l, armConfig(false))
	if err == nil || !strings.Contains(err.Error(), l.MachineGoal()) || !strings.Contains(err.Error(), "restart aks-flex-node-agent.service") {
		t.Errorf("corrupt goal record: %v", err)
	}
	writeState(t, l, l.MachineGoal(), `{"applied":{"kubernetesVersion":"1.35.4"},"eTag":"e2"}`)
	writeRollout(t, l, v1alpha1.Release{KubernetesVersion: "v1.35.5"})
	_, err = LoadGoal(l, armConfig(false))
	var conflict *GoalConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("both goals: %v, want a GoalConflictError", err)
	}
	for _, s := range []string{l.MachineGoal(), l.RolloutRecord(), "rollout r1 generation 2", "/machines/edge-01", "remove azure.targetCluster.resourceId", "never takes part in a rollout"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("conflict error does not say %q: %v", s, err)
		}
	}
}

// start on a node a rollout moved converges to the release: the config
// file's older version and worker image do not make it repave, and it
// says where each value came from; preflight checks the same config.
// Without the record the same file repaves (the test's control).
func TestStartKeepsTheRolloutsRelease(t *testing.T) {
	l := goalLayout(t)
	root := l.Root()
	p, err := ocilayout.Write(filepath.Join(root, "srv/img"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	var digests []string
	for _, tag := range []string{"v1", "v2"} {
		img, err := random.Image(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img, ocilayout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		digests = append(digests, d.String())
	}
	const fileRef, releaseRef = "oci-layout:///srv/img:v1", "oci-layout:///srv/img:v2"
	joinedAt(t, l, "kube2", "1.35.4", releaseRef, digests[1])
	newStart := func(out *bytes.Buffer) *Start {
		c := &config.Config{Bootstrap: config.Bootstrap{OCIImage: fileRef}}
		c.Components.Kubernetes, c.Agent.NodeName = "1.34.2", "n1"
		return NewStart(Options{Layout: l, Config: c, Progress: out})
	}
	var out bytes.Buffer
	if r, why := newStart(&out).repaveDue(t.Context()); r == nil || !strings.Contains(why, "components.kubernetes is 1.34.2") {
		t.Fatalf("without a rollout record the file's older version must repave: %v %q", r, why)
	}
	writeRollout(t, l, v1alpha1.Release{KubernetesVersion: "v1.35.4", WorkerImage: releaseRef})
	s := newStart(&out)
	pf := Preflight{Env: &preflight.Env{Config: s.opts.Config}}
	if err := s.adoptGoal(&pf); err != nil {
		t.Fatal(err)
	}
	if r, why := s.repaveDue(t.Context()); r != nil {
		t.Fatalf("start repaves a node on its rollout's release back to the file: %s", why)
	}
	if pf.Env.Config.Components.Kubernetes != "1.35.4" || pf.Env.Config.Bootstrap.OCIImage != releaseRef {
		t.Errorf("preflight checks another config: %+v %+v", pf.Env.Config.Components, pf.Env.Config.Bootstrap)
	}
	want := "[start] components.kubernetes 1.35.4 from rollout r1 generation 2 (the config file says 1.34.2)\n" +
		"[start] bootstrap.ociImage " + releaseRef + " from rollout r1 generation 2 (the config file says " + fileRef + ")\n"
	if out.String() != want {
		t.Errorf("start's lines:\n%s\nwant:\n%s", out.String(), want)
	}
	if s.label != "start" || len(s.goal.Sources) != 2 || s.image.configured != releaseRef {
		t.Errorf("the start after adoptGoal: label %q, goal %+v, image %q", s.label, s.goal, s.image.configured)
	}
	// A later release on the same node (the file unchanged) repaves to it.
	writeRollout(t, l, v1alpha1.Release{KubernetesVersion: "v1.35.5"})
	s = newStart(&bytes.Buffer{})
	if err := s.adoptGoal(&Preflight{}); err != nil {
		t.Fatal(err)
	}
	if r, why := s.repaveDue(t.Context()); r == nil || why != "components.kubernetes is 1.35.5; machine kube2 runs 1.35.4" {
		t.Fatalf("a new release: %v %q", r, why)
	}
}

// The goal record's settings a start adopts are the ones the agent
// renders the kubelet from (machineapi.Settings.Overlay): the same
// function, so they cannot differ.
func TestStartKeepsTheAKSMachineGoal(t *testing.T) {
	l := goalLayout(t)
	rec := machineapi.GoalRecord{Applied: machineapi.Settings{Version: "1.35.4"}, ETag: "e3"}
	writeState(t, l, l.MachineGoal(), `{"applied":{"kubernetesVersion":"1.35.4"},"eTag":"e3"}`)
	joinedAt(t, l, "kube1", "1.35.4", "", "")
	c := armConfig(false)
	s := NewStart(Options{Layout: l, Config: c})
	if r, _ := s.repaveDue(t.Context()); r == nil {
		t.Fatal("control: the file's 1.35.0 against a machine at 1.35.4 must repave")
	}
	s = NewStart(Options{Layout: l, Config: c})
	if err := s.adoptGoal(&Preflight{}); err != nil {
		t.Fatal(err)
	}
	if r, why := s.repaveDue(t.Context()); r != nil {
		t.Fatalf("start repaves a node on its AKS Machine's goal back to the file: %s", why)
	}
	if got := rec.Applied.Overlay(c).Components.Kubernetes; s.opts.Config.Components.Kubernetes != got {
		t.Errorf("start runs %s, the agent renders %s", s.opts.Config.Components.Kubernetes, got)
	}
}

// A rollout record that cannot be read refuses the start under the node
// lock, before preflight and before anything on the host changes.
func TestStartRefusesAnUnreadableRolloutRecord(t *testing.T) {
	l := goalLayout(t)
	writeState(t, l, l.RolloutRecord(), `{"rollout":"r1","applied":`)
	before, err := os.ReadDir(l.OnRoot(l.StateDir()))
	if err != nil {
		t.Fatal(err)
	}
	c := &config.Config{}
	c.Agent.NodeName = "n1"
	_, err = NewStart(Options{Layout: l, Config: c}).Run(t.Context(), Preflight{})
	if err == nil || !strings.Contains(err.Error(), l.RolloutRecord()) || !strings.HasSuffix(err.Error(), "; nothing was changed") {
		t.Fatalf("start with an unreadable rollout record: %v", err)
	}
	after, err := os.ReadDir(l.OnRoot(l.StateDir()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range after {
		names = append(names, e.Name())
	}
	// The node lock's file is the one thing start makes before it reads.
	if len(after) > len(before)+1 {
		t.Errorf("start changed the state dir: %v", names)
	}
}

// A release that would make the config invalid is refused, naming the
// key and its source (cluster data is input to validate): a version is
// interpolated into the bundle source's path.
func TestGoalRefusesAnInvalidRelease(t *testing.T) {
	l := goalLayout(t)
	file := &config.Config{}
	file.Components.Kubernetes = "1.34.2"
	file.Bootstrap.OfflineArtifacts.Source = "/var/lib/aks-flex-node/bundles/k8s-{{ .KubernetesVersion }}"
	writeRollout(t, l, v1alpha1.Release{KubernetesVersion: "v1.35.4/../../../etc"})
	_, err := LoadGoal(l, file)
	if err == nil || !strings.Contains(err.Error(), "components.kubernetes from rollout r1 generation 2") || !strings.Contains(err.Error(), `components.kubernetes: "1.35.4/../../../etc" is not a version`) {
		t.Fatalf("a release with a path for a version: %v", err)
	}
	writeRollout(t, l, v1alpha1.Release{KubernetesVersion: "v1.35.4"})
	if g, err := LoadGoal(l, file); err != nil || g.Config.Components.Kubernetes != "1.35.4" {
		t.Fatalf("a valid release over a file with problems of its own: %v", err)
	}
}

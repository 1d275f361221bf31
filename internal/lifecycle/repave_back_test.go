package lifecycle

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"

	"github.com/Azure/aks-flex-node/internal/artifact"
	"github.com/Azure/aks-flex-node/internal/config"
	"github.com/Azure/aks-flex-node/internal/events"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/kubeclient/kubeclienttest"
	"github.com/Azure/aks-flex-node/internal/layout"
	"github.com/Azure/aks-flex-node/internal/node"
	"github.com/Azure/aks-flex-node/internal/preflight"
	"github.com/Azure/aks-flex-node/internal/state"
)

// The switch back's tasks are an interface like the repave's; none of
// them stages, provisions, installs or renders: nothing is fetched.
func TestSwitchBackTaskNames(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.OnRoot(l.MachineDir("kube1")), 0o755); err != nil {
		t.Fatal(err)
	}
	sides := &state.Sides{Active: "kube2", Machines: map[string]state.Side{"kube1": {KubernetesVersion: "1.34.2"}, "kube2": {KubernetesVersion: "1.35.4"}}}
	r, err := NewSwitchBack(RepaveOptions{Options: Options{Layout: l, Config: &config.Config{}}}, state.Applied{Machine: "kube2"}, sides)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range append(r.Phases("v2"), r.RollbackPhase()) {
		got = append(got, p.Name+": "+strings.Join(p.Names(), ","))
	}
	want := []string{
		"drain: cordon-node,drain-node",
		"switch: stop-active-machine,hand-over-identity,write-pod-network,start-machine,wait-node-version",
		"finish: note-node-files,save-state,uncordon-node",
		"rollback: stop-new-machine,start-machine,wait-node-version,uncordon-node",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("switch back phases:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.From() != "kube2" || r.To() != "kube1" || r.start.opts.Config.Components.Kubernetes != "1.34.2" {
		t.Errorf("switch back %s -> %s at %s", r.From(), r.To(), r.start.opts.Config.Components.Kubernetes)
	}
	if strings.Join(preflight.SwitchBackNames, ",") != preflight.NameVersionSkew {
		t.Errorf("switch back checks: %v", preflight.SwitchBackNames)
	}
}

// A side the node cannot serve on again is refused before anything
// changes, naming why.
func TestSwitchBackRefusesASideNotRetained(t *testing.T) {
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	with := func(kube1 *state.Side) *state.Sides {
		s := &state.Sides{Active: "kube2", Machines: map[string]state.Side{"kube2": {KubernetesVersion: "1.35.4"}}}
		if kube1 != nil {
			s.Machines["kube1"] = *kube1
		}
		return s
	}
	cases := map[string]struct {
		sides  *state.Sides
		rootfs bool
		want   string
	}{
		"no sides record": {nil, true, "never been repaved"},
		"never prepared":  {with(nil), true, "never prepared"},
		"failed":          {with(&state.Side{KubernetesVersion: "1.34.2", Failed: "not Ready"}), true, "failed (not Ready)"},
		"version unknown": {with(&state.Side{Image: "x"}), true, "which Kubernetes version"},
		"rootfs gone":     {with(&state.Side{KubernetesVersion: "1.34.2"}), false, "rootfs"},
		"other active":    {&state.Sides{Active: "kube1", Machines: map[string]state.Side{"kube1": {KubernetesVersion: "1.34.2"}}}, true, "says machine kube1 serves"},
	}
	for name, tc := range cases {
		dir := l.OnRoot(l.MachineDir("kube1"))
		_ = os.RemoveAll(dir)
		if tc.rootfs {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		_, err := NewSwitchBack(RepaveOptions{Options: Options{Layout: l, Config: &config.Config{}}}, state.Applied{Machine: "kube2"}, tc.sides)
		var nr *NotRetainedError
		if !errors.As(err, &nr) || nr.Machine != "kube1" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming %q", name, err, tc.want)
		}
	}
}

// backConfig is a config node.Render accepts, whose bundle and worker
// image are at src: a switch back must not ask it for anything.
func backConfig(src string) *config.Config {
	c := &config.Config{}
	c.Agent.NodeName = "n1"
	c.Azure.BootstrapToken = &config.BootstrapToken{Token: "abcdef.0123456789abcdef"}
	c.Components.Kubernetes = "1.35.4"
	c.Components.SandboxImage = "registry.invalid/pause:3.10"
	c.Networking.DNSServiceIP = "10.0.0.10"
	c.Networking.PodCIDR = "10.244.0.0/24"
	c.Node.MaxPods = 110
	c.Node.Kubelet = config.Kubelet{ClusterFQDN: "https://127.0.0.1:6443",
		CACertData: base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"))}
	c.Bootstrap.OfflineArtifacts.Source = src + "/bundle.tar.gz"
	c.Bootstrap.OCIImage = strings.TrimPrefix(src, "http://") + "/worker:1.35.4"
	return c
}

// newTestSwitchBack is a node serving on kube2 (Kubernetes 1.35.4, a
// release) that kept kube1 (1.34.2) from before, with the node's
// identity on kube2; the bundle server and the registry count requests.
func newTestSwitchBack(t *testing.T, h *fakeHost) (*Repave, layout.Layout, *atomic.Int64) {
	t.Helper()
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		http.NotFound(w, nil)
	}))
	t.Cleanup(srv.Close)
	old := hostCgroupMode
	hostCgroupMode = func(string) (string, error) { return "v2", nil }
	t.Cleanup(func() { hostCgroupMode = old })
	l, err := layout.New(t.TempDir(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	pki := filepath.Join(l.OnRoot(l.MachineDir("kube2")), node.KubeletPKIDir)
	if err := os.MkdirAll(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pki, filepath.Base(node.KubeletClientCert)), []byte("cert"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.OnRoot(l.MachineDir("kube1")), 0o755); err != nil {
		t.Fatal(err)
	}
	store := state.Open(l)
	if err := os.MkdirAll(l.OnRoot(l.StateDir()), 0o700); err != nil {
		t.Fatal(err)
	}
	applied := state.Applied{NodeName: "n1", Machine: "kube2", KubernetesVersion: "1.35.4", Image: "new@sha256:2"}
	if _, err := store.SaveApplied(applied); err != nil {
		t.Fatal(err)
	}
	sides := state.Sides{Active: "kube2", Machines: map[string]state.Side{
		"kube1": {KubernetesVersion: "1.34.2", Image: "old@sha256:1", ImageDigest: "sha256:1"},
		"kube2": {KubernetesVersion: "1.35.4", Image: "new@sha256:2", ImageDigest: "sha256:2"}}}
	if err := store.SaveSides(sides); err != nil {
		t.Fatal(err)
	}
	h.cs.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.35.4"}
	r, err := NewSwitchBack(RepaveOptions{
		Options:      Options{Layout: l, Config: backConfig(srv.URL), ConfigFile: "/etc/aks-flex-node/config.json", ConfigData: []byte("{}"), Exec: h.run},
		ReadyTimeout: 2 * time.Second,
		NewClient: func(*config.Config, layout.Layout, string) (kubeclient.Interface, error) {
			return kubeclienttest.Wrap(h.cs), nil
		},
	}, applied, &sides)
	if err != nil {
		t.Fatal(err)
	}
	r.from.Control.Poll, r.to.Control.Poll = time.Millisecond, time.Millisecond
	return r, l, &asked
}

func backPreflight(l layout.Layout) Preflight {
	return Preflight{Env: &preflight.Env{Root: l.Root(), Layout: l}, Report: &strings.Builder{}}
}

// Issue 30 item 4: the switch back puts the node on its retained side
// at that side's version and image, fetching and hashing nothing; the
// applied state and the sides record say so; a Node the switch back
// cordoned is uncordoned, one an operator had cordoned stays so.
func TestSwitchBackRunsTheRetainedSideWithoutAFetch(t *testing.T) {
	for _, cordoned := range []bool{false, true} {
		h := newFakeHost(t, "kube2", "1.35.4")
		h.versions["kube1"] = "1.34.2"
		r, l, asked := newTestSwitchBack(t, h)
		if cordoned {
			if _, err := SetUnschedulable(t.Context(), r.client, "n1", true); err != nil {
				t.Fatal(err)
			}
		}
		hashed := artifact.BytesHashed()
		rec, err := r.Run(t.Context(), backPreflight(l))
		if err != nil {
			t.Fatalf("switch back: %v", err)
		}
		if n := asked.Load(); n != 0 {
			t.Errorf("the switch back asked the bundle server or registry %d times", n)
		}
		if d := artifact.BytesHashed() - hashed; d != 0 {
			t.Errorf("the switch back hashed %d bundle bytes", d)
		}
		if h.state["kube1"] != "active" || h.state["kube2"] != "inactive" {
			t.Errorf("machines after the switch back: %v", h.state)
		}
		a, err := state.Open(l).Applied()
		if err != nil || a == nil || a.Machine != "kube1" || a.KubernetesVersion != "1.34.2" || a.Image != "old@sha256:1" || len(a.NodeFiles) == 0 {
			t.Errorf("applied state after the switch back: %+v (%v)", a, err)
		}
		s, err := state.Open(l).Sides()
		if err != nil || s.Active != "kube1" || s.InFlight != nil || s.Last == nil || s.Last.Result != state.RepaveSucceeded || !s.Last.SwitchBack ||
			s.Machines["kube1"].KubernetesVersion != "1.34.2" || s.Machines["kube1"].Image != "old@sha256:1" || s.Machines["kube2"].KubernetesVersion != "1.35.4" {
			t.Errorf("sides after the switch back: %+v last %+v (%v)", s, s.Last, err)
		}
		if rec.FromVersion != "1.35.4" || rec.ToVersion != "1.34.2" {
			t.Errorf("record: %+v", rec)
		}
		n, _ := h.cs.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
		if n.Spec.Unschedulable != cordoned {
			t.Errorf("cordoned before=%v: unschedulable after the switch back %v", cordoned, n.Spec.Unschedulable)
		}
		if ev := nodeEvents(t, h)[events.ReasonRepaved]; !strings.Contains(ev, "switched this node back from machine kube2 (Kubernetes 1.35.4) to its retained machine kube1 (Kubernetes 1.34.2)") {
			t.Errorf("Repaved Event: %q", ev)
		}
		for _, c := range h.calls {
			if strings.Contains(c, "import") || strings.Contains(c, "pull") {
				t.Errorf("the switch back ran %q", c)
			}
		}
	}
}

// A retained side that does not come up is rolled back like a repave's
// new side: the side it left serves again, and the retained one is
// recorded as failed, so the next switch back refuses it.
func TestSwitchBackRollsBackWhenTheRetainedSideIsNotReady(t *testing.T) {
	h := newFakeHost(t, "kube2", "1.35.4")
	h.versions["kube2"] = "1.35.4" // kube1's kubelet never posts
	r, l, asked := newTestSwitchBack(t, h)
	_, err := r.Run(t.Context(), backPreflight(l))
	var rb *RolledBackError
	if !errors.As(err, &rb) || rb.To != "kube1" {
		t.Fatalf("switch back to a side that is not Ready = %v, want a rollback", err)
	}
	if h.state["kube2"] != "active" || h.state["kube1"] != "inactive" || asked.Load() != 0 {
		t.Errorf("after the rollback: machines %v, %d requests", h.state, asked.Load())
	}
	a, _ := state.Open(l).Applied()
	s, _ := state.Open(l).Sides()
	if a == nil || a.Machine != "kube2" || s == nil || s.Active != "kube2" || s.Last.Result != state.RepaveRolledBack || s.Machines["kube1"].Failed == "" {
		t.Fatalf("after the rollback: applied %+v sides %+v", a, s)
	}
	if _, err := NewSwitchBack(RepaveOptions{Options: Options{Layout: l, Config: &config.Config{}}}, *a, s); err == nil {
		t.Error("a switch back to the side that failed was not refused")
	}
}

// A switch back interrupted before its commit point leaves the retained
// side usable (it prepared nothing); after it, the retained side serves.
func TestInterruptedSwitchBackKeepsTheRetainedSide(t *testing.T) {
	for _, active := range []string{"kube2", "kube1"} {
		s := &state.Sides{Active: "kube2", Machines: map[string]state.Side{"kube1": {KubernetesVersion: "1.34.2", Image: "old"}, "kube2": {KubernetesVersion: "1.35.4"}},
			InFlight: &state.Repave{FromMachine: "kube2", ToMachine: "kube1", FromVersion: "1.35.4", ToVersion: "1.34.2", Step: SwitchPhase, SwitchBack: true}}
		closed := s.CloseInterrupted(state.Applied{Machine: active, Image: "old"}, time.Now())
		if closed == nil || s.Active != active || s.Machines["kube1"].Failed != "" || s.Machines["kube1"].KubernetesVersion != "1.34.2" {
			t.Errorf("applied on %s: sides %+v", active, s)
		}
	}
}

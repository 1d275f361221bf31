package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

// stubHost is a fleet.Host that changes nothing: stage and switch sleep,
// and fail where the test says.
type stubHost struct {
	stage, switchFor time.Duration
	mu               sync.Mutex
	stageErr         error
	switchErr        error
	running          bool
}

func (h *stubHost) Running(context.Context, v1alpha1.Release) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running, nil
}

func (h *stubHost) Stage(ctx context.Context, _ v1alpha1.Release) error {
	if !sleepCtx(ctx, h.stage) {
		return ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stageErr
}

func (h *stubHost) Switch(ctx context.Context, _ v1alpha1.Release, _ time.Duration) error {
	fleet.Progress(ctx, fleet.StepSwitch)
	if !sleepCtx(ctx, h.switchFor) {
		return ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.switchErr != nil {
		return h.switchErr
	}
	h.running = true
	return nil
}

func (h *stubHost) Healthy(context.Context) error { return nil }

func (h *stubHost) set(f func(*stubHost)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// createRollout creates a rollout selecting label e2e-rollout=name.
func createRollout(t *testing.T, name string, maxUnavailable int, soak string) {
	t.Helper()
	r := fmt.Sprintf(`{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":%q},
"spec":{"nodeSelector":{"matchLabels":{"e2e-rollout":%q}},"release":{"kubernetesVersion":"v1.35.9"},
"strategy":{"maxUnavailable":%d,"soak":%q,"drainTimeout":"1m"}}}`, name, name, maxUnavailable, soak)
	if _, err := cp.Kubectl(context.Background(), []byte(r), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cp.Kubectl(context.Background(), nil, "delete", "fnr", name, "--wait=false") })
}

// labelledNode registers a Node carrying the rollout's label.
func labelledNode(t *testing.T, rollout, name string) types.UID {
	t.Helper()
	n, err := cp.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"e2e-rollout": rollout}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return n.UID
}

// startAgent runs a real fleet.Agent as Node name (its own credential,
// as asNode makes it) with host h, until the test ends.
func startAgent(t *testing.T, ctx context.Context, name string, h fleet.Host) {
	t.Helper()
	launchAgent(t, ctx, &fleet.Agent{NodeName: name, Host: h, RecordPath: filepath.Join(t.TempDir(), "rollout.json"), BootID: "boot-" + name})
}

// launchAgent runs a until the test ends or stop is called (which waits
// for it), with the clients of its Node's credential and the test's
// timings filled in.
func launchAgent(t *testing.T, ctx context.Context, a *fleet.Agent) (stop func()) {
	t.Helper()
	cfg := asNode(a.NodeName)
	sent := requestsOf(a.NodeName)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return cutTransport{rt, new(atomic.Bool), sent} }
	a.Connect = func() (fleet.Clients, error) {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fleet.Clients{}, err
		}
		ro, err := fleet.NewRollouts(cfg, nil)
		if err != nil {
			return fleet.Clients{}, err
		}
		st, err := fleet.NewSlotStore(cfg, nil, v1alpha1.Namespace)
		if err != nil {
			return fleet.Clients{}, err
		}
		return fleet.Clients{Nodes: cs.CoreV1().Nodes(), Rollouts: ro, Slots: st}, nil
	}
	a.SlotTTL, a.Retry, a.Spread = 10*time.Second, time.Second, 200*time.Millisecond
	a.Log = slog.New(slog.NewTextHandler(testWriter{t}, nil)).With("node", a.NodeName)
	done := make(chan error, 1)
	actx, cancel := context.WithCancel(ctx)
	// The process's one Node informer, as the daemon gives the agent.
	nodes := daemon.NewNodeInformer(func() (kubeclient.Interface, error) { return kubeclient.New(cfg, kubeclient.Follow) }, a.NodeName)
	nodes.Start(actx)
	a.Nodes = nodes
	go func() { done <- a.Run(actx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("agent %s: %v", a.NodeName, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// agentRequests counts each agent's requests to the API server, by node.
var agentRequests sync.Map // node -> *atomic.Int64

func requestsOf(node string) *atomic.Int64 {
	v, _ := agentRequests.LoadOrStore(node, new(atomic.Int64))
	return v.(*atomic.Int64)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if os.Getenv("ROLLOUT_E2E_AGENT_LOGS") != "" {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// TestAgentsRollOutInWaves runs six real agents, each as its own Node,
// against one rollout with maxUnavailable 2: a watch on the Nodes never
// sees more than two Updating, the server never holds more than two
// slots, every node ends Updated and every slot is free.
func TestAgentsRollOutInWaves(t *testing.T) {
	requireE2E(t)
	const rollout = "waves"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("waves-%d", i)
		labelledNode(t, rollout, name)
		names = append(names, name)
	}
	pw := watchRollout(t, ctx, rollout)
	startCandidate(t, names[0]) // the elected status writer, as the agents run it
	began := time.Now()
	createRollout(t, rollout, 2, "1s")
	for _, n := range names {
		startAgent(t, ctx, n, &stubHost{stage: 200 * time.Millisecond, switchFor: time.Second})
	}
	pw.waitFor(t, 60*time.Second, "all Updated", allIn(names, fleet.PhaseUpdated))
	t.Logf("6 nodes Updated %v after the rollout was created (maxUnavailable 2, switch 1 s, soak 1 s)", time.Since(began).Round(time.Millisecond))
	if out, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Complete", "fnr/"+rollout, "--timeout=60s"); err != nil {
		t.Fatalf("kubectl wait --for=condition=Complete: %v: %s", err, out)
	}
	t.Logf("Complete %v after the rollout was created", time.Since(began).Round(time.Millisecond))
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.err != nil {
		t.Fatal(pw.err)
	}
	t.Logf("peaks: %d Nodes Updating, %d slots held", pw.peakUpdate, pw.peakSlots)
	var reqs []string
	for _, n := range names {
		reqs = append(reqs, fmt.Sprintf("%s %d", n, requestsOf(n).Load()))
	}
	t.Logf("requests per agent (list, watch, slot and condition writes) through Complete: %s", strings.Join(reqs, ", "))
	if pw.peakUpdate > 2 || pw.peakSlots > 2 {
		t.Errorf("more than 2 at once: %d Updating, %d slots held", pw.peakUpdate, pw.peakSlots)
	}
	if pw.peakUpdate < 2 {
		t.Errorf("never 2 nodes Updating at once (peak %d): the waves did not use maxUnavailable", pw.peakUpdate)
	}
	if h := heldBy(t, rollout); len(h) != 0 {
		t.Errorf("slots still held after every node was Updated: %v", h)
	}
	for _, n := range names {
		if pw.phase[n].Generation != 1 {
			t.Errorf("%s: generation %d", n, pw.phase[n].Generation)
		}
	}
}

// TestFailedSwitchPausesTheRollout: a node whose switch fails (rolled
// back) keeps its slot, marked failed; the node in flight with it
// finishes; no other node starts; and after a resume (the failed slot
// cleared, resumed-at set, as `fleet resume` does) it retries and the
// rollout finishes.
func TestFailedSwitchPausesTheRollout(t *testing.T) {
	requireE2E(t)
	const rollout = "pause"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := []string{"pause-bad", "pause-1", "pause-2", "pause-3", "pause-4"}
	for _, n := range names {
		labelledNode(t, rollout, n)
	}
	pw := watchRollout(t, ctx, rollout)
	startCandidate(t, names[1])
	createRollout(t, rollout, 2, "1s")
	rolledBack := &fleet.StepError{Step: fleet.StepSwitch, Reason: "RolledBack", Err: errors.New("rolled back: machine kube2 did not become Ready")}
	// The bad node stages first, so it is among the first two, and it
	// fails while the other one is still switching.
	bad := &stubHost{switchFor: 2 * time.Second, switchErr: rolledBack}
	startAgent(t, ctx, names[0], bad)
	for _, n := range names[1:] {
		startAgent(t, ctx, n, &stubHost{stage: 300 * time.Millisecond, switchFor: 3 * time.Second})
	}
	pw.waitFor(t, 30*time.Second, names[0]+" Failed", func(m map[string]fleet.NodeRelease) bool { return m[names[0]].Phase == fleet.PhaseFailed })
	failedAt := time.Now()
	// The node in flight with it finishes; the others stay Staged.
	pw.waitFor(t, 30*time.Second, "one Updated, three Staged", func(m map[string]fleet.NodeRelease) bool {
		updated, staged := 0, 0
		for _, n := range names[1:] {
			switch m[n].Phase {
			case fleet.PhaseUpdated:
				updated++
			case fleet.PhaseStaged:
				staged++
			}
		}
		return updated == 1 && staged == 3
	})
	time.Sleep(4 * time.Second) // several retries and a release later, still nobody starts
	pw.mu.Lock()
	f := pw.phase[names[0]]
	var late []string
	for n, at := range pw.updatingAt {
		if at.After(failedAt) {
			late = append(late, n)
		}
	}
	pw.mu.Unlock()
	if f.Step != fleet.StepSwitch || f.Reason != "RolledBack" {
		t.Errorf("%s: %s", names[0], f)
	}
	if len(late) > 0 {
		t.Errorf("nodes started after %s failed: %v", names[0], late)
	}
	if out, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Paused", "fnr/"+rollout, "--timeout=30s"); err != nil {
		t.Fatalf("kubectl wait --for=condition=Paused: %v: %s", err, out)
	}
	if out, err := cp.Kubectl(ctx, nil, "get", "fnr", rollout, "-o", `jsonpath={.status.failedNodes[*].name} {.status.conditions[?(@.type=="Paused")].message}`); err != nil || !strings.Contains(string(out), names[0]) {
		t.Errorf("the rollout's status does not name %s: %s %v", names[0], out, err)
	}
	slot := failedSlot(t, rollout, names[0])
	// fleet resume: clear the failed slot, then set resumed-at.
	bad.set(func(h *stubHost) { h.switchErr = nil })
	resume(t, rollout, slot)
	pw.waitFor(t, 60*time.Second, "all Updated after the resume", allIn(names, fleet.PhaseUpdated))
	if out, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Complete", "fnr/"+rollout, "--timeout=60s"); err != nil {
		t.Fatalf("kubectl wait --for=condition=Complete after the resume: %v: %s", err, out)
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.peakUpdate > 2 || pw.peakSlots > 2 {
		t.Errorf("more than 2 at once: %d Updating, %d slots held", pw.peakUpdate, pw.peakSlots)
	}
}

// failedSlot is the slot node holds in rollout, checked to carry the
// failure; its name.
func failedSlot(t *testing.T, rollout, node string) string {
	t.Helper()
	out, err := cp.Kubectl(context.Background(), nil, "get", "-n", v1alpha1.Namespace, v1alpha1.SlotResource, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list v1alpha1.FlexNodeSlotList
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		h, _ := fleet.ParseHolder(ptrOr(s.Spec.HolderIdentity))
		if strings.HasPrefix(s.Name, rollout+"-slot-") && h.Node == node {
			if s.Annotations[fleet.AnnotationFailedStep] != fleet.StepSwitch || s.Annotations[fleet.AnnotationFailedReason] != "RolledBack" {
				t.Errorf("slot %s of the failed node: annotations %v", s.Name, s.Annotations)
			}
			return s.Name
		}
	}
	t.Fatalf("%s holds no slot of %s after its switch failed", node, rollout)
	return ""
}

func ptrOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// resume does what `fleet resume` does, as an admin: the failed slot (if
// any) cleared, spec.paused false, resumed-at set.
func resume(t *testing.T, rollout, slot string) {
	t.Helper()
	ctx := context.Background()
	if slot != "" {
		patch := `{"metadata":{"annotations":{"` + fleet.AnnotationFailedStep + `":null,"` + fleet.AnnotationFailedReason + `":null}},"spec":{"holderIdentity":null}}`
		if _, err := cp.Kubectl(ctx, nil, "patch", "-n", v1alpha1.Namespace, v1alpha1.SlotResource, slot, "--type=merge", "-p", patch); err != nil {
			t.Fatal(err)
		}
	}
	patch := `{"metadata":{"annotations":{"` + fleet.AnnotationResumedAt + `":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}},"spec":{"paused":false}}`
	if _, err := cp.Kubectl(ctx, nil, "patch", "fnr", rollout, "--type=merge", "-p", patch); err != nil {
		t.Fatal(err)
	}
}

// TestStagingFailureTakesNoSlot: a node that cannot stage reports
// Failed at stage with its reason and never holds a slot, and no node
// starts while it does; a resume after the fix lets the rollout finish.
func TestStagingFailureTakesNoSlot(t *testing.T) {
	requireE2E(t)
	const rollout = "stagefail"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := []string{"stagefail-bad", "stagefail-1", "stagefail-2"}
	for _, n := range names {
		labelledNode(t, rollout, n)
	}
	pw := watchRollout(t, ctx, rollout)
	createRollout(t, rollout, 2, "500ms")
	bad := &stubHost{switchFor: 200 * time.Millisecond, stageErr: &fleet.StepError{Step: fleet.StepStage, Reason: "ChecksumMismatch",
		Err: errors.New("worker image: sha256 1111 != 2222")}}
	startAgent(t, ctx, names[0], bad)
	for _, n := range names[1:] {
		startAgent(t, ctx, n, &stubHost{stage: time.Second, switchFor: 200 * time.Millisecond})
	}
	pw.waitFor(t, 30*time.Second, "bad Failed, the others Staged", func(m map[string]fleet.NodeRelease) bool {
		return m[names[0]].Phase == fleet.PhaseFailed && allIn(names[1:], fleet.PhaseStaged)(m)
	})
	time.Sleep(3 * time.Second)
	pw.mu.Lock()
	f := pw.phase[names[0]]
	holders := len(pw.slotHolders)
	stillStaged := allIn(names[1:], fleet.PhaseStaged)(pw.phase)
	pw.mu.Unlock()
	if f.Step != fleet.StepStage || f.Reason != "ChecksumMismatch" || !strings.Contains(f.Message, "sha256") {
		t.Errorf("%s: %s %q", names[0], f, f.Message)
	}
	if holders != 0 || !stillStaged {
		t.Errorf("a node started while %s could not stage: slot holders %d, others still staged %v", names[0], holders, stillStaged)
	}
	bad.set(func(h *stubHost) { h.stageErr = nil })
	resume(t, rollout, "")
	pw.waitFor(t, 60*time.Second, "all Updated after the resume", allIn(names, fleet.PhaseUpdated))
}

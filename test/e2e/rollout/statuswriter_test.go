package rollout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/Azure/aks-flex-node/internal/cli"
	"github.com/Azure/aks-flex-node/internal/daemon"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
)

// The election's timing in this test: short, so a takeover fits in
// seconds; the product's defaults are fleet.Default*.
const (
	swLease     = 3 * time.Second
	swRenew     = 500 * time.Millisecond
	swDeadline  = 2 * time.Second
	swCandidate = 500 * time.Millisecond
)

// candidate is one agent's write-rollout-status loop, as its node, with a
// network that can be cut (a power cut: no request leaves, not even the
// release of the lock).
type candidate struct {
	node   string
	cut    atomic.Bool
	sent   atomic.Int64 // requests sent
	cancel context.CancelFunc
	done   chan struct{}
}

type cutTransport struct {
	rt   http.RoundTripper
	cut  *atomic.Bool
	sent *atomic.Int64
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("network cut by the test")
	}
	c.sent.Add(1)
	return c.rt.RoundTrip(r)
}

func startCandidate(t *testing.T, node string) *candidate {
	c := &candidate{node: node, done: make(chan struct{})}
	cfg := asNode(node)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return cutTransport{rt, &c.cut, &c.sent} }
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("candidate", node)
	nodes := daemon.NewNodeInformer(func() (kubeclient.Interface, error) { return kubeclient.New(rest.CopyConfig(cfg), kubeclient.Follow) }, node)
	w := &daemon.RolloutStatusWriter{NodeName: node, Log: log, LeaseDuration: swLease, Nodes: nodes,
		Config:   func() (*rest.Config, error) { return rest.CopyConfig(cfg), nil },
		Election: fleet.Election{RenewPeriod: swRenew, RenewDeadline: swDeadline, CandidatePeriod: swCandidate}}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { // the daemon's loop, with a short interval
		defer close(c.done)
		for ctx.Err() == nil {
			if err := w.Term(ctx); err != nil && !c.cut.Load() {
				log.Warn("pass failed", "error", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

// writer is the node named by the status-writer lock's holder, "" when none.
func writer(ctx context.Context) string {
	store, err := fleet.NewSlotStore(cp.AdminConfig, nil, v1alpha1.Namespace)
	if err != nil {
		return ""
	}
	list, err := store.List(ctx)
	if err != nil {
		return ""
	}
	for _, l := range list.Items {
		if l.Name == fleet.StatusWriterSlot && l.Spec.HolderIdentity != nil {
			node, _, _ := strings.Cut(*l.Spec.HolderIdentity, "/")
			return node
		}
	}
	return ""
}

// report sets node's FlexNodeRelease condition, as the node.
func report(t *testing.T, node string, gen int64, phase fleet.Phase, step, reason string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(asNode(node))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c := fleet.NodeRelease{Rollout: "sw", Generation: gen, Phase: phase, Step: step, Reason: reason, Since: now}.Condition(now)
	patch, err := fleet.ConditionPatch(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("report %s as %s: %v", phase, node, err)
	}
}

// statusTrue waits until the rollout's status is what Aggregate makes of
// the Nodes as the server has them now, at the rollout's generation, and
// check accepts it.
func statusTrue(t *testing.T, within time.Duration, check func(v1alpha1.RolloutStatus) bool) v1alpha1.RolloutStatus {
	t.Helper()
	ro, err := fleet.NewRollouts(cp.AdminConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var last v1alpha1.RolloutStatus
	var want v1alpha1.RolloutStatus
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		r, err := ro.Get(ctx, "sw")
		if err != nil {
			t.Fatal(err)
		}
		nodes, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want, err = fleet.Aggregate(r, nodes.Items, time.Now()); err != nil {
			t.Fatal(err)
		}
		last = r.Status
		if counts(last) == counts(want) && last.ObservedGeneration == r.Generation && check(last) {
			return last
		}
	}
	t.Fatalf("the status is not true within %v: %s, the Nodes say %s", within, counts(last), counts(want))
	return last
}

func counts(s v1alpha1.RolloutStatus) string {
	return fmt.Sprintf("generation %d: %d selected, %d staged, %d updating, %d updated, %d failed", s.ObservedGeneration, s.Selected, s.Staged, s.Updating, s.Updated, s.Failed)
}

// TestStatusWriterElectedAndTakenOver: three agents, each as its node,
// run the write-rollout-status loop. One is elected and writes the
// rollout's status from the Nodes' conditions; its network is cut mid-way
// (it can no longer renew, nor release): another takes over once the
// lock has been unchanged for its lease duration, and the status stays
// true, with an Event on the rollout for a node's failure. fleet pause and
// resume work on it (resume frees a failed node's slot), and
// `kubectl wait --for=condition=Complete` returns once every node
// reports Updated, not before.
func TestStatusWriterElectedAndTakenOver(t *testing.T) {
	requireE2E(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := []string{"sw-a", "sw-b", "sw-c"}
	uids := map[string]types.UID{}
	for _, n := range names {
		uids[n] = newNode(t, n)
		if _, err := cp.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(`{"metadata":{"labels":{"pool":"sw"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cp.Kubectl(ctx, []byte(`{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":"sw"},
"spec":{"nodeSelector":{"matchLabels":{"pool":"sw"}},"release":{"kubernetesVersion":"v1.35.4"}}}`), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cp.Kubectl(context.Background(), nil, "delete", "fnr", "sw", "--wait=false") })
	report(t, "sw-a", 1, fleet.PhaseStaged, "stage", "")
	report(t, "sw-b", 1, fleet.PhaseStaged, "stage", "")
	cands := map[string]*candidate{}
	for _, n := range names {
		cands[n] = startCandidate(t, n)
	}
	start := time.Now()
	statusTrue(t, 20*time.Second, func(s v1alpha1.RolloutStatus) bool { return s.Selected == 3 && s.Staged == 2 })
	first := writer(ctx)
	t.Logf("%s elected and wrote a true status %v after the candidates started", first, time.Since(start).Round(time.Millisecond))
	if cands[first] == nil {
		t.Fatalf("the lock names %q, not a candidate", first)
	}
	report(t, "sw-a", 1, fleet.PhaseUpdating, "switch", "")
	statusTrue(t, 10*time.Second, func(s v1alpha1.RolloutStatus) bool { return s.Updating == 1 })

	// The writer's network is cut; the Nodes move on meanwhile.
	cut := time.Now()
	cands[first].cut.Store(true)
	report(t, "sw-a", 1, fleet.PhaseUpdated, "soak", "")
	var second string
	for time.Since(cut) < swLease+3*swCandidate+5*time.Second {
		if w := writer(ctx); w != "" && w != first {
			second = w
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(cut)
	if second == "" {
		t.Fatalf("no other agent took over within %v of the cut (lease %v)", took, swLease)
	}
	t.Logf("%s took over %v after %s's network was cut (lease %v, candidate period %v)", second, took.Round(time.Millisecond), first, swLease, swCandidate)
	if took < swLease-swRenew {
		t.Errorf("taken over after %v, before the lease duration %v", took, swLease)
	}
	statusTrue(t, 10*time.Second, func(s v1alpha1.RolloutStatus) bool { return s.Updated == 1 && s.Updating == 0 })
	report(t, "sw-b", 1, fleet.PhaseFailed, "switch", "RolledBack")
	st := statusTrue(t, 10*time.Second, func(s v1alpha1.RolloutStatus) bool { return s.Failed == 1 })
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionPaused); c == nil || c.Status != metav1.ConditionTrue || len(st.FailedNodes) != 1 || st.FailedNodes[0].Name != "sw-b" {
		t.Errorf("after sw-b failed: %+v", st)
	}
	checkFailedEvent(t, ctx)

	// The second writer stops (its agent is stopped): it releases the
	// lock, and the last candidate takes over at its next look, well
	// before a lease duration.
	var third string
	for _, n := range names {
		if n != first && n != second {
			third = n
		}
	}
	before := cands[third].sent.Load()
	t.Logf("%s, a candidate that never led, sent %d requests in %v (candidate period %v)", third, before, time.Since(start).Round(time.Millisecond), swCandidate)
	stopped := time.Now()
	cands[second].cancel()
	<-cands[second].done
	for writer(ctx) != third && time.Since(stopped) < 10*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	if w := writer(ctx); w != third {
		t.Fatalf("the writer after %s stopped: %q, want %s", second, w, third)
	}
	if took := time.Since(stopped); took >= swLease {
		t.Errorf("%s took over %v after %s stopped and released: not before a lease duration (%v)", third, took, second, swLease)
	} else {
		t.Logf("%s took over %v after %s stopped and released the lock", third, took.Round(time.Millisecond), second)
	}
	pauseAndResume(t, ctx, uids["sw-b"])
	waitComplete(t, ctx)
}

// checkFailedEvent: the writer recorded sw-b's failure on the rollout.
func checkFailedEvent(t *testing.T, ctx context.Context) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		evs, err := cp.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=FlexNodeRollout,involvedObject.name=sw"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == "Failed" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "node sw-b: Failed at step switch (RolledBack)") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Failed Event for sw-b on the rollout: %d events", len(evs.Items))
		}
	}
}

func fleetCmd(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := cli.Main(append(append([]string{"fleet"}, args...), "--kubeconfig", cp.AdminKubeconfig), &out, &errb); code != 0 {
		t.Fatalf("fleet %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

// pauseAndResume: fleet pause sets spec.paused; sw-b keeps a failed slot
// (as its agent would); fleet resume frees it, unpauses and stamps
// resumed-at. fleet status shows the nodes meanwhile.
func pauseAndResume(t *testing.T, ctx context.Context, uidB types.UID) {
	t.Helper()
	fleetCmd(t, "pause", "sw")
	out, err := cp.Kubectl(ctx, nil, "get", "fnr", "sw", "-o", "jsonpath={.spec.paused}")
	if err != nil || string(out) != "true" {
		t.Fatalf("spec.paused after fleet pause: %q %v", out, err)
	}
	b := newSlots(t, "sw", "sw-b", uidB, "boot-b", time.Minute)
	held, err := b.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Fail(ctx, held, "switch", "RolledBack"); err != nil {
		t.Fatal(err)
	}
	status := fleetCmd(t, "status", "sw")
	if !strings.Contains(status, "sw-b  Failed") || !strings.Contains(status, "sw-slot-0 (failed: RolledBack)") {
		t.Errorf("fleet status:\n%s", status)
	}
	fleetCmd(t, "resume", "sw")
	if h := heldBy(t, "sw"); len(h) != 0 {
		t.Errorf("slots held after resume: %v", h)
	}
	out, err = cp.Kubectl(ctx, nil, "get", "fnr", "sw", "-o", `jsonpath={.spec.paused},{.metadata.annotations.flexnode\.azure\.com/resumed-at}`)
	if paused, at, _ := strings.Cut(string(out), ","); err != nil || paused != "false" || at == "" {
		t.Errorf("after resume: %q %v", out, err)
	}
}

// waitComplete: kubectl wait does not return while a node is not
// Updated at the rollout's generation, and returns once all are.
func waitComplete(t *testing.T, ctx context.Context) {
	t.Helper()
	out, err := cp.Kubectl(ctx, nil, "get", "fnr", "sw", "-o", "jsonpath={.metadata.generation}")
	if err != nil {
		t.Fatal(err)
	}
	var gen int64
	if _, err := fmt.Sscan(string(out), &gen); err != nil {
		t.Fatalf("generation %q: %v", out, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Complete", "--timeout=60s", "fnr/sw")
		done <- err
	}()
	report(t, "sw-a", gen, fleet.PhaseUpdated, "soak", "")
	report(t, "sw-b", gen, fleet.PhaseUpdated, "soak", "")
	statusTrue(t, 10*time.Second, func(s v1alpha1.RolloutStatus) bool { return s.Updated == 2 })
	select {
	case err := <-done:
		t.Fatalf("kubectl wait returned with a node not Updated: %v", err)
	case <-time.After(time.Second):
	}
	last := time.Now()
	report(t, "sw-c", gen, fleet.PhaseUpdated, "soak", "")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl wait returned %v after the last node reported Updated", time.Since(last).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("kubectl wait did not return within 20s of every node reporting Updated")
	}
}

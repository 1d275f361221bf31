package rollout

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/Azure/aks-flex-node/internal/cli"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// Issue 30 with real agents against the real API server: the canary
// first, held nodes skipped, maintenance windows, plan mode, and the
// fleet rollback (spec.rollback and onFailure: Rollback) through a Host
// that switches back without staging.

// backHost is stubHost with a switch back, counting what it is asked.
type backHost struct {
	*stubHost
	stages, switches, backs atomic.Int32
}

func newBackHost(switchFor time.Duration) *backHost {
	return &backHost{stubHost: &stubHost{stage: 100 * time.Millisecond, switchFor: switchFor}}
}

func (h *backHost) Stage(ctx context.Context, rel v1alpha1.Release) error {
	h.stages.Add(1)
	return h.stubHost.Stage(ctx, rel)
}

func (h *backHost) Switch(ctx context.Context, rel v1alpha1.Release, d time.Duration) error {
	h.switches.Add(1)
	return h.stubHost.Switch(ctx, rel, d)
}

func (h *backHost) SwitchBack(ctx context.Context, _ time.Duration) error {
	h.backs.Add(1)
	if !sleepCtx(ctx, h.switchFor) {
		return ctx.Err()
	}
	h.set(func(s *stubHost) { s.running = false })
	return nil
}

// createRollout30 creates a rollout selecting e2e-rollout=name with
// strategy (JSON) and returns its UID.
func createRollout30(t *testing.T, name, strategy string) types.UID {
	t.Helper()
	r := fmt.Sprintf(`{"apiVersion":"flexnode.azure.com/v1alpha1","kind":"FlexNodeRollout","metadata":{"name":%q},
"spec":{"nodeSelector":{"matchLabels":{"e2e-rollout":%q}},"release":{"kubernetesVersion":"v1.35.9"},"strategy":%s}}`, name, name, strategy)
	if out, err := cp.Kubectl(context.Background(), []byte(r), "create", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = cp.Kubectl(context.Background(), nil, "delete", "fnr", name, "--wait=false") })
	ro, err := rolloutsAdmin(t).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return ro.UID
}

func rolloutsAdmin(t *testing.T) *fleet.Rollouts {
	t.Helper()
	rs, err := fleet.NewRollouts(cp.AdminConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func patchRollout(t *testing.T, name, patch string) {
	t.Helper()
	if _, err := rolloutsAdmin(t).Patch(context.Background(), name, types.MergePatchType, []byte(patch)); err != nil {
		t.Fatal(err)
	}
}

// transitions records each node's phase changes in the order the API
// server's watch delivers them (etcd's order, one sequence for all).
type transitions struct {
	mu   sync.Mutex
	last map[string]fleet.Phase
	seq  []string // "node phase"
}

func watchTransitions(t *testing.T, ctx context.Context, rollout string) *transitions {
	t.Helper()
	tr := &transitions{last: map[string]fleet.Phase{}}
	w, err := cp.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "e2e-rollout=" + rollout})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if nr, ok, err := fleet.ReadNodeRelease(n); ok && err == nil {
				tr.mu.Lock()
				if tr.last[n.Name] != nr.Phase {
					tr.last[n.Name] = nr.Phase
					tr.seq = append(tr.seq, n.Name+" "+string(nr.Phase))
				}
				tr.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return tr
}

func (tr *transitions) index(entry string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Index(tr.seq, entry)
}

func nodesOf(t *testing.T, rollout string) []corev1.Node {
	t.Helper()
	l, err := cp.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "e2e-rollout=" + rollout})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestAgentsCanaryGoesFirst: with a canary of 1 and maxUnavailable 50% of
// four nodes, the first node of the stable order is Updated (soaked)
// before any other node starts, and then two go at once.
func TestAgentsCanaryGoesFirst(t *testing.T) {
	requireE2E(t)
	const rollout = "canary"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var names []string
	for i := range 4 {
		names = append(names, fmt.Sprintf("canary-%d", i))
		labelledNode(t, rollout, names[i])
	}
	pw := watchRollout(t, ctx, rollout)
	tr := watchTransitions(t, ctx, rollout)
	uid := createRollout30(t, rollout, `{"canary":1,"maxUnavailable":"50%","soak":"1s","drainTimeout":"1m"}`)
	for _, n := range names {
		startAgent(t, ctx, n, newBackHost(time.Second))
	}
	pw.waitFor(t, 60*time.Second, "all Updated", allIn(names, fleet.PhaseUpdated))
	order := fleet.Order(uid, names)
	canaryDone := tr.index(order[0] + " Updated")
	for _, n := range order[1:] {
		if i := tr.index(n + " Updating"); i < 0 || i < canaryDone {
			t.Errorf("%s Updating at %d, before the canary %s was Updated (%d): %v", n, i, order[0], canaryDone, tr.seq)
		}
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	t.Logf("order %v; peaks: %d Updating, %d slots", order, pw.peakUpdate, pw.peakSlots)
	if pw.peakUpdate != 2 || pw.peakSlots > 2 {
		t.Errorf("peaks %d Updating, %d slots: want 2 at once after the canary, never more", pw.peakUpdate, pw.peakSlots)
	}
}

// TestAgentsSkipAHeldNode: a node labelled flexnode.azure.com/hold=true
// reports Held, stages nothing; the others update, and the rollout is
// Complete without it (requireAll unset).
func TestAgentsSkipAHeldNode(t *testing.T) {
	requireE2E(t)
	const rollout = "hold"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := []string{"hold-0", "hold-1", "hold-2"}
	hosts := map[string]*backHost{}
	for _, n := range names {
		labelledNode(t, rollout, n)
		hosts[n] = newBackHost(200 * time.Millisecond)
	}
	held := names[1]
	patchNode(t, held, `{"metadata":{"labels":{"`+fleet.HoldLabel+`":"true"}}}`)
	pw := watchRollout(t, ctx, rollout)
	createRollout30(t, rollout, `{"maxUnavailable":1,"soak":"500ms"}`)
	for _, n := range names {
		startAgent(t, ctx, n, hosts[n])
	}
	pw.waitFor(t, 60*time.Second, "updated but the held one", func(m map[string]fleet.NodeRelease) bool {
		return m["hold-0"].Phase == fleet.PhaseUpdated && m["hold-2"].Phase == fleet.PhaseUpdated && m[held].Phase == fleet.PhaseHeld
	})
	if n := hosts[held].stages.Load() + hosts[held].switches.Load(); n != 0 {
		t.Errorf("the held node was staged or switched %d times", n)
	}
	ro, err := rolloutsAdmin(t).Get(ctx, rollout)
	if err != nil {
		t.Fatal(err)
	}
	st, err := fleet.Aggregate(ro, nodesOf(t, rollout), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Held != 1 || st.HeldNodes[0] != held || st.Updated != 2 || !conditionTrue(st, v1alpha1.ConditionComplete) {
		t.Errorf("status: held %d %v, updated %d, conditions %+v", st.Held, st.HeldNodes, st.Updated, st.Conditions)
	}
	// The hold lifted: it updates too.
	patchNode(t, held, `{"metadata":{"labels":{"`+fleet.HoldLabel+`":null}}}`)
	pw.waitFor(t, 30*time.Second, "all Updated", allIn(names, fleet.PhaseUpdated))
}

func patchNode(t *testing.T, name, patch string) {
	t.Helper()
	if _, err := cp.Client.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func conditionTrue(st v1alpha1.RolloutStatus, typ string) bool {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// TestAgentsWaitForTheWindow: a window that opens at the start of the
// minute after next (UTC, on the agents' clock): the nodes stage at once
// but none starts a switch before it opens; they start when it opens,
// woken by their own timers (no change in the cluster happens then).
func TestAgentsWaitForTheWindow(t *testing.T) {
	requireE2E(t)
	const rollout = "window"
	opens := time.Now().UTC().Truncate(time.Minute).Add(2 * time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Until(opens)+2*time.Minute)
	defer cancel()
	names := []string{"window-0", "window-1"}
	for _, n := range names {
		labelledNode(t, rollout, n)
	}
	pw := watchRollout(t, ctx, rollout)
	day := opens.Weekday().String()[:3]
	createRollout30(t, rollout, fmt.Sprintf(`{"maxUnavailable":2,"soak":"500ms","windows":[{"days":[%q],"start":%q,"end":%q}]}`,
		day, opens.Format("15:04"), opens.Add(30*time.Minute).Format("15:04")))
	for _, n := range names {
		startAgent(t, ctx, n, newBackHost(200*time.Millisecond))
	}
	pw.waitFor(t, 30*time.Second, "all Staged", allIn(names, fleet.PhaseStaged))
	t.Logf("staged %v before the window opens at %s", time.Until(opens).Round(time.Second), opens.Format(time.RFC3339))
	pw.waitFor(t, time.Until(opens)+45*time.Second, "all Updated", allIn(names, fleet.PhaseUpdated))
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for _, n := range names {
		at := pw.updatingAt[n]
		if at.Before(opens) {
			t.Errorf("%s started at %s, before the window opened at %s", n, at.Format(time.RFC3339Nano), opens.Format(time.RFC3339))
		}
		t.Logf("%s started %v after the window opened", n, at.Sub(opens).Round(time.Millisecond))
	}
}

// TestAgentsPlanThenRollout: in mode Plan every node stages and reports
// Staged and none switches; switching mode to Rollout rolls it out.
func TestAgentsPlanThenRollout(t *testing.T) {
	requireE2E(t)
	const rollout = "plan"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := []string{"plan-0", "plan-1"}
	hosts := map[string]*backHost{}
	for _, n := range names {
		labelledNode(t, rollout, n)
		hosts[n] = newBackHost(200 * time.Millisecond)
	}
	pw := watchRollout(t, ctx, rollout)
	began := time.Now()
	createRollout30(t, rollout, `{"mode":"Plan","maxUnavailable":2,"soak":"500ms"}`)
	for _, n := range names {
		startAgent(t, ctx, n, hosts[n])
	}
	pw.waitFor(t, 30*time.Second, "all Staged", allIn(names, fleet.PhaseStaged))
	t.Logf("plan of %d nodes: every verdict in %v", len(names), time.Since(began).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // long enough for a switch to have started, were it to
	for _, n := range names {
		if s := hosts[n].switches.Load(); s != 0 {
			t.Errorf("%s switched %d times in mode Plan", n, s)
		}
	}
	patchRollout(t, rollout, `{"spec":{"strategy":{"mode":"Rollout"}}}`)
	pw.waitFor(t, 30*time.Second, "all Updated", allIn(names, fleet.PhaseUpdated))
}

// TestAgentsRollBackWithoutADownload: a completed rollout rolled back
// (spec.rollback, as fleet rollback sets it): every node switches back
// through SwitchBack, none stages anything, at most maxUnavailable at
// once; the time per node is logged against the rollout's.
func TestAgentsRollBackWithoutADownload(t *testing.T) {
	requireE2E(t)
	const rollout = "rollback"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := []string{"rollback-0", "rollback-1", "rollback-2"}
	hosts := map[string]*backHost{}
	for _, n := range names {
		labelledNode(t, rollout, n)
		hosts[n] = newBackHost(500 * time.Millisecond)
	}
	pw := watchRollout(t, ctx, rollout)
	began := time.Now()
	createRollout30(t, rollout, `{"maxUnavailable":1,"soak":"500ms"}`)
	for _, n := range names {
		startAgent(t, ctx, n, hosts[n])
	}
	pw.waitFor(t, 60*time.Second, "all Updated", allIn(names, fleet.PhaseUpdated))
	forward := time.Since(began)
	stages := 0
	for _, n := range names {
		stages += int(hosts[n].stages.Load())
	}
	back := time.Now()
	patchRollout(t, rollout, `{"spec":{"rollback":{"reason":"e2e: pods crash on the release","requestedBy":"e2e"}}}`)
	pw.waitFor(t, 60*time.Second, "all RolledBack", allIn(names, fleet.PhaseRolledBack))
	backward := time.Since(back)
	t.Logf("3 nodes, maxUnavailable 1, switch 500 ms, soak 500 ms: rollout %v (%v a node), rollback %v (%v a node)",
		forward.Round(time.Millisecond), (forward / 3).Round(time.Millisecond), backward.Round(time.Millisecond), (backward / 3).Round(time.Millisecond))
	after := 0
	for _, n := range names {
		after += int(hosts[n].stages.Load())
		if b := hosts[n].backs.Load(); b != 1 {
			t.Errorf("%s switched back %d times", n, b)
		}
	}
	if after != stages {
		t.Errorf("the rollback staged %d times: a rollback fetches nothing", after-stages)
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.peakUpdate > 1 || pw.peakSlots > 1 {
		t.Errorf("peaks %d Updating, %d slots with maxUnavailable 1", pw.peakUpdate, pw.peakSlots)
	}
	ro, err := rolloutsAdmin(t).Get(ctx, rollout)
	if err != nil {
		t.Fatal(err)
	}
	nodes := nodesOf(t, rollout)
	st, err := fleet.Aggregate(ro, nodes, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Rollback == nil || st.Rollback.RolledBack != 3 || st.Rollback.CompletedAt == nil || !conditionTrue(st, fleet.ConditionRolledBack) ||
		conditionTrue(st, v1alpha1.ConditionComplete) {
		t.Errorf("status: %+v, conditions %+v", st.Rollback, st.Conditions)
	}
}

// TestAgentsOnFailureRollback: under onFailure: Rollback the first
// failure turns the rollout around: the nodes already on the release
// switch back, the failed one (back on its old side by its own repave)
// reports RolledBack NotSwitched.
func TestAgentsOnFailureRollback(t *testing.T) {
	requireE2E(t)
	const rollout = "onfailure"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := []string{"onfailure-0", "onfailure-1", "onfailure-2"}
	for _, n := range names {
		labelledNode(t, rollout, n)
	}
	pw := watchRollout(t, ctx, rollout)
	uid := createRollout30(t, rollout, `{"maxUnavailable":1,"soak":"500ms","onFailure":"Rollback"}`)
	order := fleet.Order(uid, names)
	hosts := map[string]*backHost{}
	for _, n := range names {
		hosts[n] = newBackHost(300 * time.Millisecond)
	}
	// The last to go, so that two are on the release when it fails: last
	// in the order, and staged last (the order ranks staged nodes; one not
	// staged yet holds no one back).
	bad := order[2]
	hosts[bad].set(func(s *stubHost) {
		s.stage = 2 * time.Second
		s.switchErr = &fleet.StepError{Step: fleet.StepSwitch, Reason: "RolledBack", Err: fmt.Errorf("kubelet exited")}
	})
	for _, n := range names {
		startAgent(t, ctx, n, hosts[n])
	}
	pw.waitFor(t, 60*time.Second, "all RolledBack", allIn(names, fleet.PhaseRolledBack))
	for _, n := range order[:2] {
		if b := hosts[n].backs.Load(); b != 1 {
			t.Errorf("%s switched back %d times, want 1", n, b)
		}
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if r := pw.phase[bad]; r.Reason != "NotSwitched" || hosts[bad].backs.Load() != 0 {
		t.Errorf("the failed node: %+v, %d switches back", r, hosts[bad].backs.Load())
	}
	if !strings.Contains(fmt.Sprint(pw.phase), "RolledBack") {
		t.Error("no RolledBack seen")
	}
	// Its evidence is on its Node, put there with its own credential.
	n, err := cp.Client.CoreV1().Nodes().Get(ctx, bad, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := fleet.ReadEvidence(n)
	if err != nil || e == nil || e.Step != fleet.StepSwitch || e.Reason != "RolledBack" || !strings.Contains(e.Error, "kubelet exited") || len(e.Phases) != 1 {
		t.Errorf("evidence on %s: %+v, %v", bad, e, err)
	} else {
		t.Logf("evidence on %s:\n%s", bad, e.Text())
	}
	// fleet status shows the order and, for the node, its evidence.
	var out bytes.Buffer
	if code := cli.Main([]string{"fleet", "status", "--node", bad, "--kubeconfig", cp.AdminKubeconfig}, &out, &out); code != 0 ||
		!strings.Contains(out.String(), "evidence of its failure") || !strings.Contains(out.String(), "kubelet exited") {
		t.Errorf("fleet status --node %s: exit %d\n%s", bad, code, out.String())
	}
	out.Reset()
	if code := cli.Main([]string{"fleet", "status", rollout, "--kubeconfig", cp.AdminKubeconfig}, &out, &out); code != 0 ||
		!strings.Contains(out.String(), "ORDER") || !strings.Contains(out.String(), "1      "+order[0]) {
		t.Errorf("fleet status %s: exit %d\n%s", rollout, code, out.String())
	}
}

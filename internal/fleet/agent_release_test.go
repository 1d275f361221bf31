package fleet

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// agentRelHost is a Host that is an AgentHost: its agent is the binary
// agent (a SHA-256); UpgradeAgent does what systemd does to the agent
// service on a restart: it stops the agent that asked (stop), after
// noting the Record as it was at that moment.
type agentRelHost struct {
	agent       string
	nodeOn      bool
	back        bool
	recordPath  string
	stop        context.CancelFunc
	atUpgrade   Record
	upgrades    atomic.Int32
	switches    atomic.Int32
	upgradeFail error
}

func (h *agentRelHost) Running(_ context.Context, rel v1alpha1.Release) (bool, error) {
	if rel.Agent != nil && rel.Agent.SHA256 != h.agent {
		return false, nil
	}
	return !NodeFields(rel) || h.nodeOn, nil
}
func (h *agentRelHost) Stage(context.Context, v1alpha1.Release) error { return nil }
func (h *agentRelHost) Switch(context.Context, v1alpha1.Release, time.Duration) error {
	h.switches.Add(1)
	h.nodeOn = true
	return nil
}
func (h *agentRelHost) Healthy(context.Context) error { return nil }
func (h *agentRelHost) UpgradeAgent(ctx context.Context, rel v1alpha1.Release) error {
	h.upgrades.Add(1)
	h.atUpgrade, _ = LoadRecord(h.recordPath)
	if h.upgradeFail != nil {
		return h.upgradeFail
	}
	h.stop()
	<-ctx.Done()
	return ctx.Err()
}
func (h *agentRelHost) AgentRolledBack(since time.Time) (string, bool, error) {
	if !h.back {
		return "", false, nil
	}
	return "rolled-back by recovery: agent stopped with result exit-code (1)", true, nil
}

const newAgentSHA = "1111111111111111111111111111111111111111111111111111111111111111"

// agentRelease is an agent on Node n1 staged in rollout b, whose release
// has the agent newAgentSHA (and, with node, a Kubernetes version), with
// its slot taken.
func agentRelease(t *testing.T, node bool) (*Agent, *agentRelHost, *stubAPI, *v1alpha1.FlexNodeRollout, *corev1.Node) {
	t.Helper()
	api := &stubAPI{leases: map[string]coordinationv1.Lease{}}
	api.node = corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}}
	r := selecting("b", 1, time.Now(), nil)
	r.Spec.Strategy.Soak = &metav1.Duration{}
	r.Spec.Release.Agent = &v1alpha1.AgentRelease{URL: "https://mirror.test/aks-flex-node", SHA256: newAgentSHA}
	if !node {
		r.Spec.Release.KubernetesVersion = ""
	}
	h := &agentRelHost{agent: "old", recordPath: filepath.Join(t.TempDir(), "rollout.json")}
	a := newAgentFor(t, api, h)
	a.rec = Record{Rollout: "b", UID: r.UID, Generation: 1, Phase: PhaseStaged}
	return a, h, api, r, api.node.DeepCopy()
}

func newAgentFor(t *testing.T, api *stubAPI, h *agentRelHost) *Agent {
	t.Helper()
	a := &Agent{NodeName: "n1", Host: h, SlotTTL: 3 * time.Second, BootID: "boot", RecordPath: h.recordPath,
		Connect: func() (Clients, error) { return Clients{Nodes: api, Slots: slotsStore{api}}, nil }}
	if err := a.reconnect(); err != nil {
		t.Fatal(err)
	}
	return a
}

// turn runs the node's turn in a's process until the agent step stops it
// (the restart), as update does for a fresh turn.
func turn(t *testing.T, a *Agent, h *agentRelHost, r *v1alpha1.FlexNodeRollout, n *corev1.Node, from string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	h.stop = cancel
	sl, err := a.slotsFor(r, n).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	return a.update(ctx, r, sl, n, from)
}

// restarted is the agent systemd starts next: it reads the Record and
// decides to resume the step it names.
func restarted(t *testing.T, api *stubAPI, h *agentRelHost, r *v1alpha1.FlexNodeRollout) (*Agent, string) {
	t.Helper()
	a := newAgentFor(t, api, h)
	rec, err := LoadRecord(h.recordPath)
	if err != nil {
		t.Fatal(err)
	}
	a.rec = rec
	if act, why := decide(view{rollout: r, rec: rec}); act != actResume {
		t.Fatalf("the restarted agent decides %s (%s), want resume", act, why)
	}
	return a, rec.Step
}

// The agent first: the Record says Updating at agent, slot held, when
// the agent service is restarted; the new agent resumes there, finds
// itself running, switches the node, soaks, reports Updated and frees
// the slot; the agent is not upgraded twice.
func TestAgentReleaseAgentFirstThenTheNewAgentSwitches(t *testing.T) {
	a, h, api, r, n := agentRelease(t, true)
	if err := turn(t, a, h, r, n, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("the turn of the old agent: %v, want it stopped by the restart", err)
	}
	if rec := h.atUpgrade; rec.Phase != PhaseUpdating || rec.Step != StepAgent || rec.Slot != "b-slot-0" {
		t.Fatalf("the Record at the agent's restart: %+v", rec)
	}
	if h.switches.Load() != 0 {
		t.Fatal("the old agent switched the node")
	}
	if l := api.lease("b-slot-0"); holderOf(&l) == "" || l.Annotations[AnnotationFailedReason] != "" {
		t.Fatalf("the slot across the restart: %+v", l.Annotations)
	}
	h.agent = newAgentSHA // systemd started the new binary
	a2, step := restarted(t, api, h, r)
	if err := turn(t, a2, h, r, n, step); err != nil {
		t.Fatal(err)
	}
	if h.upgrades.Load() != 1 || h.switches.Load() != 1 {
		t.Errorf("%d agent upgrades, %d switches; want 1 and 1", h.upgrades.Load(), h.switches.Load())
	}
	if got := api.condition(t); got.Phase != PhaseUpdated {
		t.Errorf("the Node shows %s, want Updated", got)
	}
	if l := api.lease("b-slot-0"); holderOf(&l) != "" {
		t.Error("the slot was not freed")
	}
}

// A release of the agent alone switches no machine.
func TestAgentReleaseAloneDrainsNothing(t *testing.T) {
	a, h, api, r, n := agentRelease(t, false)
	if err := turn(t, a, h, r, n, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	h.agent = newAgentSHA
	a2, step := restarted(t, api, h, r)
	if err := turn(t, a2, h, r, n, step); err != nil {
		t.Fatal(err)
	}
	if h.switches.Load() != 0 {
		t.Error("an agent-only release switched the machine")
	}
	if got := api.condition(t); got.Phase != PhaseUpdated {
		t.Errorf("the Node shows %s, want Updated", got)
	}
}

// A broken new agent: recovery put the last-good agent back, which finds
// the Record at agent and recovery's result, reports Failed at agent
// (AgentRolledBack, with the evidence) and keeps its slot, marked failed:
// the rollout pauses on this node. No switch, no second upgrade.
func TestAgentReleaseRolledBackFailsAndKeepsTheSlot(t *testing.T) {
	a, h, api, r, n := agentRelease(t, true)
	if err := turn(t, a, h, r, n, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	h.back = true // the old binary again, and recovery's result
	a2, step := restarted(t, api, h, r)
	if err := turn(t, a2, h, r, n, step); err != nil {
		t.Fatal(err)
	}
	got := api.condition(t)
	if got.Phase != PhaseFailed || got.Step != StepAgent || got.Reason != ReasonAgentRolledBack || !strings.Contains(got.Message, "exit-code") {
		t.Errorf("the Node shows %+v, want Failed at agent (AgentRolledBack) with the evidence", got)
	}
	l := api.lease("b-slot-0")
	if holderOf(&l) == "" || l.Annotations[AnnotationFailedReason] != ReasonAgentRolledBack {
		t.Errorf("the slot: holder %q, %v; want kept and marked failed", holderOf(&l), l.Annotations)
	}
	if h.upgrades.Load() != 1 || h.switches.Load() != 0 {
		t.Errorf("%d upgrades, %d switches; want 1 and 0", h.upgrades.Load(), h.switches.Load())
	}
	rec, _ := LoadRecord(h.recordPath)
	if act, _ := decide(view{rollout: r, rec: rec}); act != actWait {
		t.Errorf("after the rollback the agent decides %s, want wait (for fleet resume)", act)
	}
}

// A switch to the new agent that fails before the restart fails the step
// (AgentUpgradeFailed), slot kept.
func TestAgentReleaseUpgradeFailure(t *testing.T) {
	a, h, api, r, n := agentRelease(t, true)
	h.upgradeFail = errors.New("an agent upgrade from v1 to v2 is already in flight")
	if err := turn(t, a, h, r, n, ""); err != nil {
		t.Fatal(err)
	}
	if got := api.condition(t); got.Phase != PhaseFailed || got.Step != StepAgent || got.Reason != ReasonAgentUpgradeFailed {
		t.Errorf("the Node shows %+v", got)
	}
}

// A fleet rollback switches machines back and keeps the agent binary: a
// release of the agent alone has nothing to switch back (RolledBack,
// NotSwitched), whatever agent the node runs.
func TestRollbackKeepsTheAgent(t *testing.T) {
	a, h, api, r, n := agentRelease(t, false)
	h.agent = newAgentSHA
	r.Spec.Rollback = &v1alpha1.RollbackRequest{Reason: "e2e"}
	if _, _, err := a.rollback(t.Context(), r, n); err != nil {
		t.Fatal(err)
	}
	if got := api.condition(t); got.Phase != PhaseRolledBack || got.Reason != ReasonNotSwitched {
		t.Errorf("the Node shows %+v, want RolledBack (NotSwitched)", got)
	}
	if h.switches.Load() != 0 || h.upgrades.Load() != 0 {
		t.Error("the rollback of an agent release moved the node or its agent")
	}
}

// An agent that stopped after it recorded the agent step but before it
// switched (a power cut): the agent that starts next finds no rollback
// since the step began and switches now.
func TestAgentReleaseResumesAnInterruptedAgentStep(t *testing.T) {
	a, h, api, r, n := agentRelease(t, false)
	a.rec.Phase, a.rec.Step, a.rec.Since, a.rec.Slot = PhaseUpdating, StepAgent, time.Now(), "b-slot-0"
	if err := a.save(); err != nil {
		t.Fatal(err)
	}
	a2, step := restarted(t, api, h, r)
	if err := turn(t, a2, h, r, n, step); !errors.Is(err, context.Canceled) || h.upgrades.Load() != 1 {
		t.Fatalf("the resumed agent step: %v, %d upgrades; want the switch done now", err, h.upgrades.Load())
	}
	h.agent = newAgentSHA
	a3, step := restarted(t, api, h, r)
	if err := turn(t, a3, h, r, n, step); err != nil {
		t.Fatal(err)
	}
	if got := api.condition(t); got.Phase != PhaseUpdated {
		t.Errorf("the Node shows %s, want Updated", got)
	}
}

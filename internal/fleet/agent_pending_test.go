package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

// stubAPI is the API server as the agent's clients reach it: the Node's
// status and the slots, and a switch that cuts the node off from it.
// While down, every call fails as a refused connection does.
type stubAPI struct {
	down   atomic.Bool
	mu     sync.Mutex
	node   corev1.Node
	leases map[string]coordinationv1.Lease
	rv     int
}

func (s *stubAPI) unreachable(verb string) error {
	if !s.down.Load() {
		return nil
	}
	return fmt.Errorf("%s \"https://127.0.0.1:6443/...\": %w", verb, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
}

func (s *stubAPI) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Node, error) {
	if err := s.unreachable("GET"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node.DeepCopy(), nil
}
func (s *stubAPI) List(context.Context, metav1.ListOptions) (*corev1.NodeList, error) {
	return nil, errors.New("not served")
}
func (s *stubAPI) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return nil, errors.New("not served")
}

// Patch takes the condition patch of nodes/status and the evidence's
// merge patch of the Node.
func (s *stubAPI) Patch(_ context.Context, _ string, _ types.PatchType, data []byte, _ metav1.PatchOptions, sub ...string) (*corev1.Node, error) {
	if err := s.unreachable("PATCH"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var p corev1.Node
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	if len(sub) == 1 && sub[0] == "status" {
		s.node.Status.Conditions = p.Status.Conditions
	} else if v, ok := p.Annotations[EvidenceAnnotation]; ok {
		s.node.Annotations = map[string]string{EvidenceAnnotation: v}
	}
	return s.node.DeepCopy(), nil
}

func (s *stubAPI) condition(t *testing.T) NodeRelease {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	nr, _, err := ReadNodeRelease(&s.node)
	if err != nil {
		t.Fatal(err)
	}
	return nr
}

// slotsStore is the Store face of stubAPI (compare-and-swap updates).
type slotsStore struct{ *stubAPI }

func (s slotsStore) List(context.Context) (*coordinationv1.LeaseList, error) {
	if err := s.unreachable("LIST"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &coordinationv1.LeaseList{}
	for _, l := range s.leases {
		out.Items = append(out.Items, *l.DeepCopy())
	}
	return out, nil
}
func (s slotsStore) Create(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := s.unreachable("POST"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	l = l.DeepCopy()
	l.ResourceVersion = strconv.Itoa(s.rv)
	s.leases[l.Name] = *l
	return l.DeepCopy(), nil
}
func (s slotsStore) Update(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := s.unreachable("PUT"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[l.Name].ResourceVersion != l.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Resource: "flexnodeslots"}, l.Name, errors.New("changed"))
	}
	s.rv++
	l = l.DeepCopy()
	l.ResourceVersion = strconv.Itoa(s.rv)
	s.leases[l.Name] = *l
	return l.DeepCopy(), nil
}

func (s *stubAPI) lease(name string) coordinationv1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases[name]
}

// cutHost is a Host whose switch cuts the node off from the API server
// and then finishes (or rolls back) on its own.
type cutHost struct {
	api    *stubAPI
	result error
}

func (h *cutHost) Running(context.Context, v1alpha1.Release) (bool, error) { return false, nil }
func (h *cutHost) Stage(context.Context, v1alpha1.Release) error           { return nil }
func (h *cutHost) Switch(context.Context, v1alpha1.Release, time.Duration) error {
	h.api.down.Store(true)
	return h.result
}
func (h *cutHost) Healthy(context.Context) error { return nil }

// cutAgent is an agent on Node n1, staged in rollout b, holding slot
// b-slot-0 of the stub API server.
func cutAgent(t *testing.T, result error) (*Agent, *stubAPI, *v1alpha1.FlexNodeRollout, *corev1.Node, *Slot) {
	t.Helper()
	api := &stubAPI{leases: map[string]coordinationv1.Lease{}}
	api.node = corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}}
	r := selecting("b", 1, time.Now(), nil)
	r.Spec.Strategy.Soak = &metav1.Duration{}
	a := &Agent{NodeName: "n1", Host: &cutHost{api: api, result: result}, SlotTTL: 3 * time.Second, BootID: "boot",
		RecordPath: filepath.Join(t.TempDir(), "rollout.json"),
		Connect:    func() (Clients, error) { return Clients{Nodes: api, Slots: slotsStore{api}}, nil }}
	if err := a.reconnect(); err != nil {
		t.Fatal(err)
	}
	a.rec = Record{Rollout: "b", UID: r.UID, Generation: 1, Phase: PhaseStaged}
	n := api.node.DeepCopy()
	sl, err := a.slotsFor(r, n).Acquire(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	return a, api, r, n, sl
}

// Issue 30 item 8: a node cut off from the API server during its switch
// finishes it on its own, keeps Updated in its Record (unreported, the
// slot still to release) and does not release its slot while the Node
// still shows Updating; once the API server is back the Node says
// Updated and only then is the slot free.
func TestCutOffMidSwitchReportsThenReleases(t *testing.T) {
	a, api, r, n, sl := cutAgent(t, nil)
	if err := a.update(t.Context(), r, sl, n, ""); err == nil {
		t.Fatal("update with the API server gone: no error")
	}
	rec, err := LoadRecord(a.RecordPath)
	if err != nil || rec.Phase != PhaseUpdated || !rec.Unreported || rec.SlotAction != slotRelease || rec.Slot != "b-slot-0" || rec.Applied == nil {
		t.Fatalf("record while cut off: %+v (%v)", rec, err)
	}
	if got := api.condition(t); got.Phase != PhaseUpdating {
		t.Errorf("the Node shows %s while cut off, want the Updating it last had", got)
	}
	if h := holderOf(ptr(api.lease("b-slot-0"))); h == "" {
		t.Error("the slot was freed while the Node still shows Updating")
	}
	// Still away: settle fails and changes nothing.
	if err := a.settle(t.Context(), r, n); err == nil {
		t.Fatal("settle with the API server still gone: no error")
	}
	api.down.Store(false)
	if err := a.settle(t.Context(), r, n); err != nil {
		t.Fatalf("settle once the API server is back: %v", err)
	}
	if got := api.condition(t); got.Phase != PhaseUpdated {
		t.Errorf("the Node shows %s once back, want Updated", got)
	}
	if h := holderOf(ptr(api.lease("b-slot-0"))); h != "" {
		t.Errorf("the slot is still held by %s", h)
	}
	rec, _ = LoadRecord(a.RecordPath)
	if rec.Unreported || rec.SlotAction != "" || rec.Slot != "" || rec.Phase != PhaseUpdated {
		t.Errorf("record once reported: %+v", rec)
	}
}

// A switch that rolled back while cut off is Failed in the Record; once
// the API server is back the Node says Failed (RolledBack) and the slot
// is marked failed and kept, so the rollout pauses.
func TestCutOffMidSwitchRollbackReportsThenFailsTheSlot(t *testing.T) {
	rolledBack := &StepError{Step: StepSwitch, Reason: "RolledBack", Err: errors.New("machine kube2 not Ready after 3m0s")}
	a, api, r, n, sl := cutAgent(t, rolledBack)
	if err := a.update(t.Context(), r, sl, n, ""); err == nil {
		t.Fatal("update with the API server gone: no error")
	}
	rec, err := LoadRecord(a.RecordPath)
	if err != nil || rec.Phase != PhaseFailed || rec.Reason != "RolledBack" || !rec.Unreported || rec.SlotAction != slotFail || rec.Slot != "b-slot-0" {
		t.Fatalf("record while cut off: %+v (%v)", rec, err)
	}
	if l := api.lease("b-slot-0"); l.Annotations[AnnotationFailedReason] != "" {
		t.Error("the slot was marked failed while the API server was away")
	}
	api.down.Store(false)
	if err := a.settle(t.Context(), r, n); err != nil {
		t.Fatalf("settle once the API server is back: %v", err)
	}
	if got := api.condition(t); got.Phase != PhaseFailed || got.Reason != "RolledBack" || got.Step != StepSwitch {
		t.Errorf("the Node shows %s once back, want Failed at switch (RolledBack)", got)
	}
	api.mu.Lock()
	ev, err := ReadEvidence(&api.node)
	api.mu.Unlock()
	if err != nil || ev == nil || ev.Reason != "RolledBack" || !strings.Contains(ev.Error, "not Ready after 3m0s") {
		t.Errorf("the evidence once back: %+v (%v)", ev, err)
	}
	l := api.lease("b-slot-0")
	if holderOf(&l) == "" || l.Annotations[AnnotationFailedReason] != "RolledBack" {
		t.Errorf("slot once back: holder %q, annotations %v; want kept and marked failed", holderOf(&l), l.Annotations)
	}
	rec, _ = LoadRecord(a.RecordPath)
	if rec.Unreported || rec.SlotAction != "" || rec.Slot != "b-slot-0" {
		t.Errorf("record once reported: %+v", rec)
	}
	// A restarted agent (no slot in memory) settles from the Record alone.
	a2 := &Agent{NodeName: "n1", Host: a.Host, BootID: "boot", RecordPath: a.RecordPath, Connect: a.Connect}
	if err := a2.reconnect(); err != nil {
		t.Fatal(err)
	}
	a2.rec = rec
	a2.rec.Unreported, a2.rec.SlotAction = true, slotFail
	if err := a2.settle(t.Context(), r, n); err != nil || a2.rec.SlotAction != "" || a2.rec.Unreported {
		t.Errorf("a restarted agent's settle: %v, record %+v", err, a2.rec)
	}
}

func ptr[T any](v T) *T { return &v }

// A soak probe that cannot reach the API server judges nothing: the
// soak waits for it and watches its whole window again from its return;
// a probe that judged the node unhealthy still fails it.
func TestSoakWaitsForTheAPIServer(t *testing.T) {
	cut := fmt.Errorf("get Node n1: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	h := &host{healthy: []error{nil, cut, cut, cut}}
	a := &Agent{Host: h, SoakProbe: 10 * time.Millisecond}
	began := time.Now()
	if err := a.soak(t.Context(), 100*time.Millisecond); err != nil {
		t.Fatalf("soak across an API server outage: %v", err)
	}
	if d := time.Since(began); d < 130*time.Millisecond {
		t.Errorf("soaked %v: the window did not start again after the outage", d)
	}
	if n := h.probes.Load(); n < 6 {
		t.Errorf("%d probes, want the outage's and a full window's after it", n)
	}
	bad := &StepError{Step: StepSoak, Reason: "NodeNotReady", Err: cut}
	a.Host = &host{healthy: []error{bad}}
	if err := a.soak(t.Context(), time.Hour); !errors.Is(err, bad) {
		t.Fatalf("an unhealthy answer: %v", err)
	}
	if unreachable(errors.New("kubelet restarted")) || !unreachable(apierrors.NewServiceUnavailable("starting")) {
		t.Error("unreachable misjudges")
	}
}

// busyBack is a RollbackHost whose first switch back finds the node lock
// held.
type busyBack struct {
	cutHost
	calls atomic.Int32
}

func (h *busyBack) SwitchBack(context.Context, time.Duration) error {
	if h.calls.Add(1) == 1 {
		return fmt.Errorf("%w: the node lock is held by keep-machine", ErrBusy)
	}
	return nil
}

// A switch back that finds the node busy (the agent's keeper holds the
// node lock a moment every pass) is tried again, not failed.
func TestSwitchBackWaitsForABusyNode(t *testing.T) {
	a, api, r, _, sl := cutAgent(t, nil)
	h := &busyBack{cutHost: cutHost{api: api}}
	a.Host = h
	a.rec.Applied = a.applied(r)
	if err := a.switchBack(t.Context(), r, sl, h); err != nil {
		t.Fatalf("switch back: %v", err)
	}
	if h.calls.Load() != 2 || a.rec.Phase != PhaseRolledBack || a.rec.Applied != nil || a.rec.Slot != "" {
		t.Errorf("%d calls, record %+v", h.calls.Load(), a.rec)
	}
	if got := api.condition(t); got.Phase != PhaseRolledBack {
		t.Errorf("the Node shows %s", got)
	}
}

// A Node deleted and registered again by its kubelet has none of the old
// object's conditions: a node whose Record has a phase reports it anew,
// or the rollout would never see it (neither Complete nor Paused).
func TestAReRegisteredNodeGetsItsPhaseReportedAnew(t *testing.T) {
	a := &Agent{NodeName: "n1"}
	a.rec = Record{Rollout: "r", Generation: 2, Phase: PhaseFailed, Step: StepSwitch, Reason: "SlotLost"}
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "new"}}
	a.noteConditionLost(bare)
	if !a.rec.Unreported {
		t.Fatal("a Node without the condition: the Record's Failed is not reported anew")
	}
	a.rec.Unreported = false
	reported := bare.DeepCopy()
	SetNodeRelease(reported, NodeRelease{Rollout: "r", Generation: 2, Phase: PhaseFailed, Step: StepSwitch, Reason: "SlotLost"}, time.Now())
	a.noteConditionLost(reported)
	if a.rec.Unreported {
		t.Error("a Node that shows the phase is reported again")
	}
	a.rec = Record{}
	a.noteConditionLost(bare)
	if a.rec.Unreported {
		t.Error("a node that was never in a rollout reports a phase")
	}
}

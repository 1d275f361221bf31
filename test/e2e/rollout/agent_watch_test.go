package rollout

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/Azure/aks-flex-node/internal/fleet"
)

// phaseWatch follows the Nodes of one rollout through a watch and the
// rollout's slots through the server, and keeps the peaks.
type phaseWatch struct {
	mu          sync.Mutex
	phase       map[string]fleet.NodeRelease
	updatingAt  map[string]time.Time // when each node first showed Updating
	peakUpdate  int
	peakSlots   int
	slotHolders map[string]bool // every node that held a slot
	holderIDs   map[string]bool // every holder identity seen
	err         error
}

func watchRollout(t *testing.T, ctx context.Context, rollout string) *phaseWatch {
	t.Helper()
	pw := &phaseWatch{phase: map[string]fleet.NodeRelease{}, updatingAt: map[string]time.Time{}, slotHolders: map[string]bool{}, holderIDs: map[string]bool{}}
	w, err := cp.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: "e2e-rollout=" + rollout})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			pw.sawNode(n)
		}
	}()
	go func() {
		defer wg.Done()
		for sleepCtx(ctx, 25*time.Millisecond) {
			holders, err := listHolders(rollout)
			if err != nil && ctx.Err() == nil {
				pw.mu.Lock()
				pw.err = err
				pw.mu.Unlock()
				return
			}
			pw.sawSlots(holders)
		}
	}()
	t.Cleanup(func() { w.Stop(); wg.Wait() })
	return pw
}

func (pw *phaseWatch) sawNode(n *corev1.Node) {
	nr, ok, err := fleet.ReadNodeRelease(n)
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if err != nil {
		pw.err = err
		return
	}
	if !ok {
		return
	}
	pw.phase[n.Name] = nr
	if _, seen := pw.updatingAt[n.Name]; nr.Phase == fleet.PhaseUpdating && !seen {
		pw.updatingAt[n.Name] = time.Now()
	}
	updating := 0
	for _, p := range pw.phase {
		if p.Phase == fleet.PhaseUpdating {
			updating++
		}
	}
	pw.peakUpdate = max(pw.peakUpdate, updating)
}

func (pw *phaseWatch) sawSlots(holders map[string][]string) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	n := 0
	for h, names := range holders {
		n += len(names)
		pw.holderIDs[h] = true
		if hh, ok := fleet.ParseHolder(h); ok {
			pw.slotHolders[hh.Node] = true
		}
	}
	pw.peakSlots = max(pw.peakSlots, n)
}

// waitFor waits up to within for cond over the watched phases.
func (pw *phaseWatch) waitFor(t *testing.T, within time.Duration, what string, cond func(map[string]fleet.NodeRelease) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		pw.mu.Lock()
		ok := cond(pw.phase)
		snapshot := fmt.Sprint(pw.phase)
		pw.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s within %v: %s", what, within, snapshot)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func allIn(names []string, p fleet.Phase) func(map[string]fleet.NodeRelease) bool {
	return func(m map[string]fleet.NodeRelease) bool {
		for _, n := range names {
			if m[n].Phase != p {
				return false
			}
		}
		return true
	}
}

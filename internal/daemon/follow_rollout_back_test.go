package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/drain"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
	"github.com/Azure/aks-flex-node/internal/kubeclient"
	"github.com/Azure/aks-flex-node/internal/lifecycle"
	"github.com/Azure/aks-flex-node/internal/nodelock"
	"github.com/Azure/aks-flex-node/internal/state"
)

// The daemon's Host rolls back and attaches evidence.
var (
	_ fleet.RollbackHost = (*rolloutHost)(nil)
	_ fleet.EvidenceHost = (*rolloutHost)(nil)
)

// A failed switch back is always at the rollback step (the agent keeps
// the slot of a node Failed there), with its reason; a busy node is
// tried again.
func TestSwitchBackReasons(t *testing.T) {
	for _, c := range []struct {
		err   error
		phase string
		want  string
	}{
		{&lifecycle.NotRetainedError{Machine: "kube1", Why: "never prepared"}, "", "RollbackRefused"},
		{&lifecycle.RefusedError{}, "preflight", "RollbackRefused"},
		{&lifecycle.RolledBackError{To: "kube1", Reason: errors.New("not Ready")}, "rollback", "RolledBack"},
		{&drain.RefusedError{Node: "n1", Reasons: []string{"ns/p"}}, "drain", "DrainRefused"},
		{errors.New("pods left after 1m: ns/p"), "drain", "DrainTimeout"},
		{errors.New("stop machine kube2: timeout"), "switch", "RollbackFailed"},
	} {
		var se *fleet.StepError
		if err := switchBackError(c.err, c.phase); !errors.As(err, &se) || se.Step != fleet.StepRollback || se.Reason != c.want {
			t.Errorf("%v in %q: %v, want rollback %s", c.err, c.phase, err, c.want)
		}
	}
	if err := switchBackError(&nodelock.HeldError{Path: "x"}, ""); !errors.Is(err, fleet.ErrBusy) {
		t.Errorf("held lock: %v", err)
	}
}

func saveApplied(t *testing.T, h *rolloutHost, rel v1alpha1.Release) {
	t.Helper()
	rec := fleet.Record{Rollout: "r", Phase: fleet.PhaseUpdating, Step: fleet.StepRollback,
		Applied: &fleet.AppliedRelease{Rollout: "r", Generation: 1, Release: rel, At: time.Now()}}
	if err := fleet.SaveRecord(h.layout.OnRoot(h.layout.RolloutRecord()), rec); err != nil {
		t.Fatal(err)
	}
}

func noClient() (kubeclient.Interface, error) { return nil, errors.New("no API server in this test") }

// A node already off the release its Record names (a switch back that
// finished before the agent recorded it) is not switched again.
func TestSwitchBackDoesNothingOnceBack(t *testing.T) {
	h := rolloutTestHost(t) // kube2 serves 1.35.4
	h.client = noClient
	saveApplied(t, h, v1alpha1.Release{KubernetesVersion: "v1.36.0"})
	if err := h.SwitchBack(t.Context(), time.Minute); err != nil {
		t.Fatalf("switch back of a node off the release: %v", err)
	}
	if s, _ := state.Open(h.layout).Sides(); s.Active != "kube2" || s.Last != nil {
		t.Errorf("sides: %+v", s)
	}
}

// A node whose other side is not retained (its rootfs is gone here) is
// refused at the rollback step, before anything changes.
func TestSwitchBackRefusesWithoutARetainedSide(t *testing.T) {
	h := rolloutTestHost(t)
	h.client = noClient
	saveApplied(t, h, v1alpha1.Release{KubernetesVersion: "v1.35.4"})
	l := h.layout
	if _, err := state.Open(l).SaveApplied(state.Applied{NodeName: "n1", Machine: "kube2", KubernetesVersion: "1.35.4"}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(l.OnRoot(l.ConfigFile())), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.OnRoot(l.ConfigFile()), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := h.SwitchBack(t.Context(), time.Minute)
	var se *fleet.StepError
	if !errors.As(err, &se) || se.Step != fleet.StepRollback || se.Reason != "RollbackRefused" || !strings.Contains(err.Error(), "machine kube1") {
		t.Fatalf("switch back without a retained side: %v", err)
	}
}

// The evidence names the side whose journals tell the failure, reads
// them there, writes the debug bundle into the state dir and names it;
// the state dir keeps the newest three.
func TestFailureEvidenceOnThisHost(t *testing.T) {
	h := rolloutTestHost(t) // kube2 serves, kube1 is the other side
	var read []string
	var written []string
	h.evidence = Evidence{
		Journal: func(_ context.Context, side, unit string, _ int, _ int64) ([]byte, int, error) {
			read = append(read, side+"/"+unit)
			return []byte("last words of " + unit + " on " + side + "\n"), 1, nil
		},
		Bundle: func(_ context.Context, path string) error {
			written = append(written, path)
			return os.WriteFile(path, []byte("bundle"), 0o600)
		},
	}
	at := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	for i, c := range []struct {
		step, reason, side string
	}{
		{fleet.StepSwitch, "RolledBack", "kube1"},
		{fleet.StepRollback, "RolledBack", "kube1"},
		{fleet.StepSoak, "Unhealthy", "kube2"},
		{fleet.StepDrain, "DrainTimeout", "kube2"},
		{fleet.StepRollback, "Unhealthy", "kube2"},
	} {
		read = nil
		e := fleet.Evidence{Step: c.step, Reason: c.reason, At: at.Add(time.Duration(i) * time.Second)}
		h.FailureEvidence(t.Context(), &e)
		if e.Side != c.side || strings.Join(read, ",") != c.side+"/kubelet.service,"+c.side+"/containerd.service" ||
			len(e.Journals) != 2 || !strings.Contains(strings.Join(e.Journals[0].Lines, ""), "on "+c.side) {
			t.Errorf("%s %s: side %q, read %v, journals %+v; want %s", c.step, c.reason, e.Side, read, e.Journals, c.side)
		}
		want := filepath.Join(h.layout.StateDir(), "rollout-failure-"+e.At.Format("20060102T150405Z")+".tar.gz")
		if e.Bundle != want || written[len(written)-1] != h.layout.OnRoot(want) {
			t.Errorf("bundle %q (written at %q), want %q", e.Bundle, written[len(written)-1], want)
		}
	}
	left, _ := filepath.Glob(filepath.Join(h.layout.OnRoot(h.layout.StateDir()), "rollout-failure-*"))
	if len(left) != keptBundles || !strings.HasSuffix(left[len(left)-1], "T080004Z.tar.gz") {
		t.Errorf("bundles kept: %v", left)
	}
	// A switch that failed without rolling back (its rollback failed too)
	// names the side it tried, from the sides record.
	s, _ := state.Open(h.layout).Sides()
	s.Last = &state.Repave{FromMachine: "kube2", ToMachine: "kube1", Result: state.RepaveFailed}
	if err := state.Open(h.layout).SaveSides(*s); err != nil {
		t.Fatal(err)
	}
	e := fleet.Evidence{Step: fleet.StepSwitch, Reason: "SwitchFailed", At: at}
	h.FailureEvidence(t.Context(), &e)
	if e.Side != "kube1" {
		t.Errorf("failed switch: side %q", e.Side)
	}
}

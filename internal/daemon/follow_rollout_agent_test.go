package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/Azure/aks-flex-node/internal/agentupgrade"
	"github.com/Azure/aks-flex-node/internal/buildinfo"
	"github.com/Azure/aks-flex-node/internal/fleet"
	"github.com/Azure/aks-flex-node/internal/fleet/v1alpha1"
)

func fakeAgentBinary(version string) []byte {
	return []byte("#!/bin/sh\necho '{\"version\":\"" + version + "\",\"gitCommit\":\"x\",\"buildTime\":\"y\"}'\n")
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// A release's agent binary is staged into the inactive agent slot, the
// agent running on; a wrong checksum is ChecksumMismatch naming expected
// and got, a URL that does not answer AgentUnreachable, each with the URL
// and no credentials; a release of the agent alone stages no machine.
func TestRolloutHostStagesTheAgentBinary(t *testing.T) {
	h := rolloutTestHost(t)
	l := h.layout
	v1, v2 := fakeAgentBinary("v1.0.0"), fakeAgentBinary("v2.0.0")
	bin := l.OnRoot(l.AgentBinary())
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, v1, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := agentupgrade.Seed(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(v2) }))
	defer srv.Close()
	rel := v1alpha1.Release{Agent: &v1alpha1.AgentRelease{URL: srv.URL + "/aks-flex-node", SHA256: sha(v2)}}
	if ok, _ := h.Running(t.Context(), rel); ok {
		t.Fatal("runs the release before it was applied")
	}
	if err := h.Stage(t.Context(), rel); err != nil {
		t.Fatalf("stage the agent alone (no sides touched): %v", err)
	}
	if got, _ := os.ReadFile(l.OnRoot(l.LibDir() + "/agent-green")); string(got) != string(v2) {
		t.Error("the inactive agent slot does not hold the release's binary")
	}
	if sum, err := agentupgrade.CurrentSHA256(l); err != nil || sum != sha(v1) {
		t.Errorf("staging changed the running agent: %s %v", sum, err)
	}

	var se *fleet.StepError
	bad := v1alpha1.Release{Agent: &v1alpha1.AgentRelease{URL: strings.Replace(srv.URL, "http://", "http://u:hunter2@", 1) + "/x", SHA256: strings.Repeat("0", 64)}}
	err := h.Stage(t.Context(), bad)
	if !errors.As(err, &se) || se.Step != fleet.StepStage || se.Reason != "ChecksumMismatch" ||
		!strings.Contains(err.Error(), "expected "+strings.Repeat("0", 64)+", got "+sha(v2)) || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "spec.release.agent") {
		t.Errorf("a wrong checksum: %v", err)
	}
	srv.Close()
	gone := v1alpha1.Release{Agent: &v1alpha1.AgentRelease{URL: srv.URL + "/y", SHA256: strings.Repeat("1", 64)}}
	if err := h.Stage(t.Context(), gone); !errors.As(err, &se) || se.Reason != "AgentUnreachable" || !strings.Contains(err.Error(), srv.URL+"/y") {
		t.Errorf("an unreachable URL: %v", err)
	}
}

// AgentRolledBack reads recovery's result of an upgrade at or after the
// agent step began, and names it as evidence.
func TestRolloutHostAgentRolledBack(t *testing.T) {
	h := rolloutTestHost(t)
	if _, back, err := h.AgentRolledBack(time.Now()); back || err != nil {
		t.Fatalf("no result: %v %v", back, err)
	}
	res := "result=rolled-back\nreason=agent stopped with result exit-code (exited 1)\nfrom_slot=agent-blue\nfrom_version=v1\nto_slot=agent-green\nto_version=v2\ntime=" +
		time.Now().UTC().Format(time.RFC3339) + "\nby=recovery\n"
	if err := os.WriteFile(h.layout.OnRoot(h.layout.StateDir()+"/"+agentupgrade.ResultFile), []byte(res), 0o600); err != nil {
		t.Fatal(err)
	}
	ev, back, err := h.AgentRolledBack(time.Now().Add(-time.Minute))
	if !back || err != nil || !strings.Contains(ev, "exited 1") || !strings.Contains(ev, "v1 -> v2") {
		t.Errorf("rolled back: %q %v %v", ev, back, err)
	}
	if _, back, _ := h.AgentRolledBack(time.Now().Add(time.Hour)); back {
		t.Error("a rollback before the step counted")
	}
	// Without the host's systemd the upgrade is refused before it changes anything.
	if err := h.UpgradeAgent(context.Background(), v1alpha1.Release{Agent: &v1alpha1.AgentRelease{URL: "https://x/a", SHA256: strings.Repeat("2", 64)}}); err == nil {
		t.Error("upgraded the agent on a temp root")
	}
}

// patchNodes is a fleet.NodeClient that records the patches of the Node.
type patchNodes struct {
	fleet.NodeClient
	patches []string
	err     error
}

func (p *patchNodes) Patch(_ context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, sub ...string) (*corev1.Node, error) {
	p.patches = append(p.patches, fmt.Sprintf("%s %s %s %v", name, pt, data, sub))
	return &corev1.Node{}, p.err
}

// The agent puts its version on its Node once per process (a merge
// patch of the Node's annotations, not its status), again after a
// failure.
func TestAnnounceAgentVersion(t *testing.T) {
	f := &RolloutFollower{Keeper: &MachineKeeper{Log: slog.New(slog.DiscardHandler)}}
	p := &patchNodes{err: errors.New("connection refused")}
	f.announceAgentVersion(t.Context(), p, "n1")
	p.err = nil
	f.announceAgentVersion(t.Context(), p, "n1")
	f.announceAgentVersion(t.Context(), p, "n1")
	want := `n1 application/merge-patch+json {"metadata":{"annotations":{"` + fleet.AgentVersionAnnotation + `":"` + buildinfo.Version + `"}}} []`
	if len(p.patches) != 2 || p.patches[1] != want {
		t.Errorf("patches %q, want two (one failed), the last %q", p.patches, want)
	}
}

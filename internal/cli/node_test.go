package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/state"
)

func TestStatusShowsTheMachinesAndTheLastRepave(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "var/lib/aks-flex-node")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, _, _ := run(t, "status", "--root", root)
	if !strings.Contains(out, "node:       not joined\n") {
		t.Errorf("status before a join:\n%s", out)
	}
	// Joined, never repaved: the pair comes from the applied state.
	if _, err := state.OpenDir(dir).SaveApplied(state.Applied{Machine: "kube1", KubernetesVersion: "1.35.4", ImageDigest: "sha256:aa"}); err != nil {
		t.Fatal(err)
	}
	out, _, _ = run(t, "status", "--root", root)
	for _, want := range []string{"node:       active machine kube1\n", "  kube1: Kubernetes 1.35.4, worker image sha256:aa\n", "  kube2: never prepared\n", "repave:     none\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("status after a join lacks %q:\n%s", want, out)
		}
	}
	at := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	s := state.Sides{Active: "kube1", Machines: map[string]state.Side{
		"kube1": {KubernetesVersion: "1.35.4", ImageDigest: "sha256:aa"},
		"kube2": {KubernetesVersion: "1.35.5", ImageDigest: "sha256:bb", Failed: "not Ready"},
	}, Last: &state.Repave{FromMachine: "kube1", ToMachine: "kube2", FromVersion: "1.35.4", ToVersion: "1.35.5", Started: at,
		Duration: 42 * time.Second, Result: state.RepaveRolledBack, Reason: "rolled back: not Ready"}}
	if err := state.OpenDir(dir).SaveSides(s); err != nil {
		t.Fatal(err)
	}
	out, _, _ = run(t, "status", "--root", root)
	for _, want := range []string{"  kube2: Kubernetes 1.35.5, worker image sha256:bb, failed: not Ready\n",
		"repave:     last rolled-back: kube1 (1.35.4) -> kube2 (1.35.5) at 2026-12-04T09:00:00Z, took 42s: rolled back: not Ready\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("status after a rollback lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = run(t, "status", "--root", root, "--output", "json")
	var got struct {
		Node state.Sides `json:"node"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Node.Last == nil || got.Node.Last.Result != state.RepaveRolledBack || got.Node.Active != "kube1" {
		t.Errorf("status json: %v\n%s", err, out)
	}
}

func TestNodeUpgradeRefusesWithoutAJoin(t *testing.T) {
	_, errOut, code := run(t, "node", "upgrade")
	if code != 2 || !strings.Contains(errOut, "--kubernetes-version is required") {
		t.Errorf("no version: exit %d: %s", code, errOut)
	}
	_, errOut, code = run(t, "node", "upgrade", "--kubernetes-version", "1.35.4", "--ignore-preflight-errors", "swap")
	if code != 2 || !strings.Contains(errOut, "unknown check") {
		t.Errorf("a start check named: exit %d: %s", code, errOut)
	}
}

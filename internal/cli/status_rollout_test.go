package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// status's rollout section: the rollout, its generation, the node's
// phase, step, since, reason and slot, the applied release, and each key
// the release sets with its source and the config file's value; the same
// in json. A record that cannot be read is shown with what to do, and
// status still answers.
func TestStatusShowsTheRollout(t *testing.T) {
	root := t.TempDir()
	stateDir := filepath.Join(root, "var/lib/aks-flex-node")
	for _, d := range []string{stateDir, filepath.Join(root, "etc/aks-flex-node")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile(aclExample)
	if err != nil {
		t.Fatal(err)
	}
	write := func(p, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/aks-flex-node/config.json", string(cfg))
	out, _, code := run(t, "status", "--root", root)
	if code != 0 || !strings.Contains(out, "rollout:    none selected this node\n") {
		t.Errorf("status without a rollout (exit %d):\n%s", code, out)
	}
	img := "registry.test/worker@sha256:" + strings.Repeat("ab", 32)
	write("var/lib/aks-flex-node/rollout.json", `{"rollout":"r1","uid":"u1","generation":2,"phase":"Updating","step":"soak","reason":"Soaking","since":"2026-12-06T07:00:00Z","slot":"r1-slot-0",
		"applied":{"rollout":"r1","generation":2,"release":{"kubernetesVersion":"v1.35.4","workerImage":"`+img+`"},"at":"2026-12-06T06:58:00Z"}}`)
	out, _, code = run(t, "status", "--root", root)
	for _, want := range []string{
		"rollout:    rollout r1 generation 2: Updating at step soak since 2026-12-06T07:00:00Z (Soaking); holds slot r1-slot-0\n",
		"release:    rollout r1 generation 2 applied at 2026-12-06T06:58:00Z\n" +
			"overlay:    the cluster's goal over the config file, as start runs it:\n",
		"  components.kubernetes 1.35.4 from rollout r1 generation 2 (the config file says 1.35.0)\n",
		"  bootstrap.ociImage " + img + " from rollout r1 generation 2 (the config file says (none))\n",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("status (exit %d) does not say %q:\n%s", code, want, out)
		}
	}
	out, _, _ = run(t, "status", "--root", root, "-o", "json")
	var js struct {
		Rollout struct {
			Record struct {
				Rollout, Phase, Step, Slot string
				Generation                 int64
			}
			Sources []struct{ Key, Value, From, File string }
		}
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	if r := js.Rollout; r.Record.Rollout != "r1" || r.Record.Generation != 2 || r.Record.Phase != "Updating" || r.Record.Slot != "r1-slot-0" ||
		len(r.Sources) != 2 || r.Sources[0].Key != "components.kubernetes" || r.Sources[0].Value != "1.35.4" || r.Sources[0].File != "1.35.0" || r.Sources[0].From != "rollout r1 generation 2" {
		t.Errorf("status -o json rollout: %+v", js.Rollout)
	}
	write("var/lib/aks-flex-node/rollout.json", `{"rollout":`)
	out, _, code = run(t, "status", "--root", root)
	if code != 0 || !strings.Contains(out, "rollout:    /var/lib/aks-flex-node/rollout.json cannot be read: ") || !strings.Contains(out, "start refuses until it is repaired or removed") {
		t.Errorf("status with an unreadable record (exit %d):\n%s", code, out)
	}
}

// On a node following its AKS Machine, the overlay lines name the
// Machine's eTag as the source of the settings the agent applied.
func TestStatusShowsTheAKSMachineGoalsSources(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"var/lib/aks-flex-node", "etc/aks-flex-node"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile("../../examples/acl-aks-machine.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/aks-flex-node/config.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/aks-flex-node/machine-goal.json"), []byte(`{"applied":{"kubernetesVersion":"1.35.9","labels":{"team":"edge"}},"eTag":"e2","decision":"applied","at":"2026-12-06T04:06:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code := run(t, "status", "--root", root)
	if code != 0 || !strings.Contains(out, "rollout:    none selected this node\noverlay:    the cluster's goal over the config file, as start runs it:\n") ||
		!strings.Contains(out, "  components.kubernetes 1.35.9 from AKS Machine eTag e2 (the config file says ") || !strings.Contains(out, "  node.labels team=edge from AKS Machine eTag e2") {
		t.Errorf("status on a node following its AKS Machine (exit %d):\n%s", code, out)
	}
}

package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/aks-flex-node/internal/state"
)

func TestAgentUpgradeUsage(t *testing.T) {
	// Refused before anything on the host is looked at or locked.
	for _, args := range [][]string{
		{"agent-upgrade", "--binary", "/nonexistent"},
		{"agent-upgrade", "--binary", "/nonexistent", "--sha256", "abc"},
		{"agent-upgrade", "--binary", "/nonexistent", "--sha256", strings.Repeat("z", 64)},
		{"agent-upgrade", "--output", "yaml", "--sha256", strings.Repeat("0", 64)},
	} {
		if _, errOut, code := run(t, args...); code != ExitInvalid {
			t.Errorf("%v: exit %d, want 2: %s", args, code, errOut)
		}
	}
}

func TestStatusOnAnEmptyRoot(t *testing.T) {
	root := t.TempDir()
	out, errOut, code := run(t, "status", "--root", root)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "config absent; using the default layout") {
		t.Errorf("fallback not logged: %s", errOut)
	}
	for _, want := range []string{"current:    /usr/local/lib/aks-flex-node/current -> (none) (absent)", "in flight:  none", "last:       none", "repairs:    none"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out, _, code = run(t, "status", "--root", root, "--output", "json")
	var s map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil || s["inFlight"] != nil {
		t.Errorf("status json: exit %d %s", code, out)
	}
}

// status shows the agent's last repairs, newest first, the five last in
// text and all kept in JSON.
func TestStatusShowsTheLastRepairs(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "var/lib/aks-flex-node")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	for i := range 7 {
		if err := state.OpenDir(dir).RecordRepair(state.Repair{At: at.Add(time.Duration(i) * time.Minute), Kind: "unit-stopped", What: fmt.Sprintf("repair %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := run(t, "status", "--root", root)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	want := "repairs:    7 recorded, newest first\n  2026-12-04T09:06:00Z unit-stopped: repair 6\n"
	if !strings.Contains(out, want) || strings.Contains(out, "repair 1\n") || !strings.Contains(out, "repair 2\n") {
		t.Errorf("status repairs:\n%s", out)
	}
	out, _, _ = run(t, "status", "--root", root, "--output", "json")
	var s struct {
		Repairs []state.Repair `json:"repairs"`
		Current map[string]any `json:"current"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || len(s.Repairs) != 7 || s.Current == nil {
		t.Errorf("status json repairs: %v\n%s", err, out)
	}
}

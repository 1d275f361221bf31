package cli

import (
	"encoding/json"
	"strings"
	"testing"
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
	for _, want := range []string{"current:    /usr/local/lib/aks-flex-node/current -> (none) (absent)", "in flight:  none", "last:       none"} {
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

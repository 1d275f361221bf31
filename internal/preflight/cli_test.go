package preflight_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/cli"
	"github.com/Azure/aks-flex-node/internal/preflight"
)

// The command's usage errors, tested through the real CLI. Only paths that
// stop before any check runs are exercised here: a full run would probe
// (and write its test executable on) the machine running the tests.
func TestPreflightCommandUsage(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"agent": {"hostprefix": "/opt/x"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args   []string
		code   int
		stderr []string
	}{
		{[]string{"preflight", "--ignore-preflight-errors=swap,no-such-check"}, cli.ExitInvalid,
			append([]string{`unknown check "no-such-check"`, "all"}, preflight.DefaultNames...)},
		{[]string{"preflight", "--output", "yaml"}, cli.ExitInvalid, []string{"--output"}},
		{[]string{"preflight", "--no-such-flag"}, cli.ExitInvalid, []string{"no-such-flag"}},
		{[]string{"preflight", "extra"}, cli.ExitInvalid, nil},
		{[]string{"preflight", "--config", cfg}, cli.ExitInvalid, []string{"did you mean agent.hostPrefix?"}},
		{[]string{"preflight", "--config", "/nonexistent/config.json", "--ignore-preflight-errors=all"}, cli.ExitFailure, []string{"/nonexistent/config.json"}},
	}
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := cli.Main(tc.args, &out, &errb)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errb.String())
		}
		for _, s := range tc.stderr {
			if !strings.Contains(errb.String(), s) {
				t.Errorf("%v: stderr does not mention %q: %q", tc.args, s, errb.String())
			}
		}
	}
}

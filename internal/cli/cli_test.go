package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/Azure/aks-flex-node/internal/buildinfo"
)

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return out.String(), errb.String(), code
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const aclExample = "../../examples/acl-bootstrap-token.json"

func TestVersionJSON(t *testing.T) {
	old := buildinfo.Version
	buildinfo.Version = "v9.9.9"
	defer func() { buildinfo.Version = old }()
	out, _, code := run(t, "version", "--output", "json")
	var info buildinfo.Info
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.Version != "v9.9.9" {
		t.Fatalf("version json: code %d out %q", code, out)
	}
	if _, _, code := run(t, "version", "--output", "yaml"); code != ExitInvalid {
		t.Errorf("bad --output exit %d, want 2", code)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{"nope"}, {"version", "--nope"}, {"version", "extra"}, {"layout", "--prefix", "/opt/a b"}, {"layout", "--prefix", "/opt/x", "--get", "nope"}} {
		if _, _, code := run(t, args...); code != ExitInvalid {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if out, _, code := run(t, "config", "validate", "--config", aclExample); code != 0 || !strings.Contains(out, "is valid") {
		t.Fatalf("example: code %d out %q", code, out)
	}
	bad := writeFile(t, `{"agent": {"hostprefix": "/opt/aks-flex-node"}}`)
	_, errOut, code := run(t, "config", "validate", "--config", bad)
	if code != ExitInvalid || !strings.Contains(errOut, "did you mean agent.hostPrefix?") {
		t.Fatalf("typo: code %d stderr %q", code, errOut)
	}
	out, _, code := run(t, "config", "validate", "--config", bad, "--output", "json")
	var res validateResult
	if code != ExitInvalid || json.Unmarshal([]byte(out), &res) != nil || res.Valid || len(res.Errors) != 1 || res.Errors[0].Path != "agent.hostprefix" || res.Errors[0].Line != 1 {
		t.Fatalf("json: code %d out %q", code, out)
	}
	if _, errOut, code := run(t, "config", "validate", "--config", "/nonexistent/config.json"); code != ExitFailure || !strings.Contains(errOut, "/nonexistent/config.json") {
		t.Fatalf("missing file: code %d stderr %q", code, errOut)
	}
}

func TestConfigViewRedacts(t *testing.T) {
	out, _, code := run(t, "config", "view", "--config", aclExample)
	if code != 0 || strings.Contains(out, "0123456789abcdef") || !strings.Contains(out, "abcdef.<redacted>") || !strings.Contains(out, `"logDir": "/var/log/aks-flex-node"`) {
		t.Fatalf("view: code %d out %s", code, out)
	}
}

func TestLayoutCommand(t *testing.T) {
	out, _, code := run(t, "layout", "--config", aclExample, "--output", "json")
	var l map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l["agentBinary"] != "/opt/aks-flex-node/bin/aks-flex-node" {
		t.Fatalf("layout json: %d %s", code, out)
	}
	if out, _, code := run(t, "layout", "--config", aclExample, "--get", "upgradeSlots.lastGood"); code != 0 || out != "/opt/aks-flex-node/lib/last-good\n" {
		t.Fatalf("--get: %d %q", code, out)
	}
	if out, _, code := run(t, "layout", "--get", "binDir"); code != 0 || out != "/usr/local/bin\n" {
		t.Fatalf("default --get: %d %q", code, out)
	}
	if out, _, code := run(t, "layout", "--check-bin-dir", "/opt/aks-flex-node/bin"); code != 0 || out != "/opt/aks-flex-node\n" {
		t.Fatalf("--check-bin-dir: %d %q", code, out)
	}
	if _, _, code := run(t, "layout", "--check-bin-dir", "/opt/aks-flex-node"); code != ExitInvalid {
		t.Fatalf("--check-bin-dir non-bin: %d", code)
	}
	if _, _, code := run(t, "layout", "--config", aclExample, "--prefix", "/opt/x"); code != ExitInvalid {
		t.Fatalf("--config with --prefix: %d", code)
	}
	bad := writeFile(t, `{"agent": {"hostPrefix": "/opt/aks flex"}, "azure": {"bootstrapToken": {"token": "abcdef.0123456789abcdef"}}}`)
	_, errOut, code := run(t, "layout", "--config", bad)
	if code != ExitInvalid || !strings.Contains(errOut, "agent.hostPrefix: \"/opt/aks flex\" is not a valid prefix: ' ' at offset 8 is not allowed") {
		t.Fatalf("invalid prefix in config: %d %q", code, errOut)
	}
}

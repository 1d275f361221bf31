package cli

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIgnitionRenderAndCheck(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "aks-flex-node")
	if err := os.WriteFile(bin, []byte("\x7fELF"+strings.Repeat("agent binary ", 1000)), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "acl.ign")
	stdout, stderr, code := run(t, "ignition", "render", "--config", aclExample, "--binary", bin, "--output", out)
	if code != 0 {
		t.Fatalf("render: %d %s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("render to a file printed on stdout: %q", stdout)
	}
	// Secrets: the file is 0600, the warning is there, the token is not
	// in anything printed.
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("output mode: %v %v", st, err)
	}
	if !strings.Contains(stderr, "readable by anyone with access to the VM's metadata") {
		t.Errorf("no customData warning: %q", stderr)
	}
	if strings.Contains(stderr, "0123456789abcdef") {
		t.Errorf("the bootstrap token leaked to stderr: %q", stderr)
	}
	if _, _, code := run(t, "ignition", "check", out); code != 0 {
		t.Fatalf("check of the rendered config: %d", code)
	}
	// As Azure's agent leaves customData: base64.
	raw, _ := os.ReadFile(out)
	cd := filepath.Join(dir, "CustomData")
	if err := os.WriteFile(cd, []byte(base64.StdEncoding.EncodeToString(raw)), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, code = run(t, "ignition", "check", cd, "--output", "json")
	var res struct {
		Spec  string
		Valid bool
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || !res.Valid || res.Spec != "3.3.0" {
		t.Fatalf("check base64 customData: %d %q", code, stdout)
	}

	// To stdout, spec 3.4.0: still warns.
	stdout, stderr, code = run(t, "ignition", "render", "--config", aclExample, "--binary-url", "https://example.invalid/aks-flex-node", "--binary-sha256", strings.Repeat("0f", 32), "--spec", "3.4.0")
	if code != 0 || !strings.Contains(stdout, `"version":"3.4.0"`) || !strings.Contains(stdout, `"hash":"sha256-0f0f`) || !strings.Contains(stderr, "VM's metadata") {
		t.Fatalf("render to stdout: %d %q %q", code, stdout, stderr)
	}
}

func TestIgnitionUsageAndRefusals(t *testing.T) {
	const noPrefix = "../../examples/ubuntu-bootstrap-token.json"
	bad := writeFile(t, `{"ignition": {"version": "3.3.0"}, "storage": {"files": [{"path": "rel"}]}}`)
	script := writeFile(t, "#!/bin/sh\necho hi\n")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ignition", "render", "--config", noPrefix, "--binary", "/proc/self/exe"}, ExitInvalid, "agent.hostPrefix is empty in " + noPrefix},
		{[]string{"ignition", "render", "--config", aclExample}, ExitInvalid, "no agent binary"},
		{[]string{"ignition", "render", "--config", aclExample, "--binary", "/proc/self/exe", "--spec", "3.2.0"}, ExitInvalid, "3.3.0, 3.4.0"},
		{[]string{"ignition", "render", "--config", aclExample, "extra"}, ExitInvalid, ""},
		{[]string{"ignition", "render", "--config", "/nonexistent.json", "--binary", "/proc/self/exe"}, ExitFailure, "/nonexistent.json"},
		{[]string{"ignition", "check"}, ExitInvalid, ""},
		{[]string{"ignition", "check", "/nonexistent.ign"}, ExitFailure, "/nonexistent.ign"},
		{[]string{"ignition", "check", bad}, ExitInvalid, ""},
		{[]string{"ignition", "check", script}, ExitInvalid, "is not an Ignition config: it is shell script"},
	}
	for _, tc := range cases {
		_, stderr, code := run(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, stderr, tc.want)
		}
	}
	stdout, _, _ := run(t, "ignition", "check", bad)
	if !strings.Contains(stdout, "error at $.storage.files.0.path") {
		t.Errorf("check report lacks the JSON path: %q", stdout)
	}
}

// host inspect names the payload and reports the error; with --root it does
// not ask IMDS (it describes the running VM, not the tree).
func TestHostInspectProvisioning(t *testing.T) {
	t.Setenv("AKS_FLEX_NODE_IMDS_ENDPOINT", "")
	root := t.TempDir()
	for p, c := range map[string]string{
		"etc/os-release":             "ID=debian\nVERSION_ID=12\n",
		"var/lib/waagent/CustomData": base64.StdEncoding.EncodeToString([]byte(`{"ignition": {"version": "3.3.0"}}`)),
		"var/lib/waagent/other-data": "#cloud-config\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, code := run(t, "host", "inspect", "--root", root, "--output", "json")
	var r struct {
		Family       string
		Provisioning struct {
			Payloads []struct{ Source, Kind, Spec, Encoding string }
			Notes    []string
			Problems []struct{ Severity, Message string }
		}
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &r) != nil {
		t.Fatalf("%d %q %q", code, stdout, stderr)
	}
	if r.Family != "debian" || len(r.Provisioning.Payloads) != 1 || r.Provisioning.Payloads[0].Kind != "ignition" || r.Provisioning.Payloads[0].Encoding != "base64" {
		t.Fatalf("%+v", r)
	}
	if len(r.Provisioning.Problems) != 1 || r.Provisioning.Problems[0].Severity != "error" ||
		!strings.Contains(r.Provisioning.Problems[0].Message, "/var/lib/waagent/CustomData holds an Ignition config (spec 3.3.0)") {
		t.Fatalf("%+v", r.Provisioning.Problems)
	}
	if !strings.Contains(strings.Join(r.Provisioning.Notes, "\n"), "IMDS userData: not queried") {
		t.Errorf("--root must not ask IMDS: %v", r.Provisioning.Notes)
	}
	stdout, _, code = run(t, "host", "inspect", "--root", root, "--custom-data", "/var/lib/waagent/other-data")
	if code != 0 || !strings.Contains(stdout, "/var/lib/waagent/other-data: cloud-config") {
		t.Fatalf("text: %d %q", code, stdout)
	}
}

func TestIgnitionSizeWarning(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{
		{3636, ""},
		{49152, ""},                // 65536 bytes of base64: fits both
		{49153, "fits customData"}, // base64 over userData's cap
		{65535, "fits customData"}, // customData's cap exactly
		{65536, "over Azure's 65535-byte customData limit"},
		{18000789, "over Azure's 65535-byte customData limit"},
	} {
		got := sizeWarning(tc.n)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("sizeWarning(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// Issue 13, defect 4 at the command: render --output onto an existing
// 0644 file leaves the token-bearing output 0600, not the old file's mode.
func TestIgnitionRenderOutputModeOverExistingFile(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "aks-flex-node")
	if err := os.WriteFile(bin, []byte("\x7fELF agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "acl.ign")
	if err := os.WriteFile(out, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run(t, "ignition", "render", "--config", aclExample, "--binary", bin, "--output", out); code != 0 {
		t.Fatalf("render: %d %s", code, stderr)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("output over a 0644 file: %v %v, want 0600", st.Mode(), err)
	}
}
